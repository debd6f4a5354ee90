# The same Redmutex::Client->new on a Redis Cluster's seed list: each name
# goes to the master of its hash slot. The cluster (3 masters) comes from
# tests/rmserver.py serve --cluster; redis-cli on each master tells where a
# key is.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use TestRedis;
use Redmutex qw(with_lock);

my $rmserver = "$FindBin::Bin/../../../tests/rmserver.py";
open(my $cluster, '-|', 'python3', $rmserver, 'serve', '--cluster', '3:0') or die "python3 $rmserver: $!\n";
my $line = <$cluster> // die "tests/rmserver.py started no cluster (its message is above)\n";
chomp $line;
my %info = map { split /=/, $_, 2 } split / /, $line;
my @ports = split /,/, $info{ports};

# The masters that hold key $name (one while it is held, none once released).
sub holders {
    my ($name) = @_;
    return grep {
        open my $out, '-|', 'sh', '-c', 'exec "$0" -p "$@" 2>/dev/null', $info{cli}, $_, 'EXISTS', $name
            or die "redis-cli: $!";
        my $answer = do { local $/; <$out> } // '';
        close $out;
        $answer =~ /^1\s*$/;
    } @ports;
}

subtest 'locks on a cluster URL go to each name\'s master' => sub {
    my $client = Redmutex::Client->new($info{url});
    my %owners;
    for my $k (0 .. 5) {
        my $name = "pl:cluster:$k";
        with_lock {
            my @held = holders($name);
            is scalar(@held), 1, "$name held on its master";
            $owners{ $held[0] // '' } = 1;
        } $client->lock($name);
        is scalar(holders($name)), 0, "$name released";
    }
    cmp_ok scalar(keys %owners), '>=', 2, 'the names span masters';
    $client->close;
};

close $cluster;
done_testing;
