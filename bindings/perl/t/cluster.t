# The same Redmutex::Client->new on a Redis Cluster's seed list: each name
# goes to the master of its hash slot. The cluster comes from
# tests/rmcluster.py (3 masters), driven over a pipe.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use IPC::Open2 ();
use Test::More;
use TestRedis;
use Redmutex qw(with_lock);

my $rmcluster = "$FindBin::Bin/../../../tests/rmcluster.py";
my $pid = IPC::Open2::open2(my $from, my $to, 'python3', $rmcluster, 'serve');
my $first = <$from> // '';
like $first, qr/^URL /, 'the cluster is up';
chomp(my $url = substr($first, 4));

sub ask {
    print {$to} "$_[0]\n";
    $to->flush;
    chomp(my $answer = <$from> // '');
    return $answer;
}

subtest 'locks on a cluster URL go to each name\'s master' => sub {
    my $client = Redmutex::Client->new($url);
    my %owners;
    for my $k (0 .. 5) {
        my $name = "pl:cluster:$k";
        with_lock {
            is ask("exists $name"), '1', "$name held on its master";
            $owners{ ask("owner $name") } = 1;
        } $client->lock($name);
        is ask("exists $name"), '0', "$name released";
    }
    cmp_ok scalar(keys %owners), '>=', 2, 'the names span masters';
    $client->close;
};

close $to;
waitpid $pid, 0;
done_testing;
