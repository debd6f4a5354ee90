# A redis+sentinel:// URL works unchanged: a real Sentinel deployment (1 master,
# 2 replicas, 3 sentinels) from tests/rmsentinel.py, the lock on the master
# the sentinels name, and a wrong sentinel password an error without it.
use strict;
use warnings;
use FindBin;
use IPC::Open2 ();
use Test::More;
use Redmutex;

# (the checkout's, or the copy a CPAN dist carries in t/lib: it has no tests/)
my $helper = -e "$FindBin::Bin/lib/rmsentinel.py" ? "$FindBin::Bin/lib/rmsentinel.py" : "$FindBin::Bin/../../../tests/rmsentinel.py";
my $pid = IPC::Open2::open2(my $out, my $in, 'python3', $helper) or die "python3: $!";
my $line = <$out> // '';
my ($url) = $line =~ /^URL (\S+)/ or BAIL_OUT("no Sentinel deployment: $line");

my $client = Redmutex::Client->new($url);
my $lock = $client->lock('pl:sentinel');
ok $lock->acquire(0), 'acquired through the sentinels';
print $in "master\n";
my $master = <$out>;
chomp $master;
is `redis-cli -p $master EXISTS pl:sentinel` + 0, 1, 'the key is on the master they name';
$lock->release;
ok !$client->lock('pl:sentinel')->locked, 'released';
$client->close;

my $wrong = $url . '?sentinel_password=hunter22';
my $ok = eval { Redmutex::Client->new($wrong, command_timeout => 0.5)->lock('pl:sentinel')->acquire(0); 1 };
ok !$ok, 'a wrong sentinel password fails';
unlike "$@", qr/hunter22/, 'the password is not in the message';

close $in;
waitpid $pid, 0;
done_testing;
