# A redmutex call leaves $! as it found it: the library's sockets must not
# decide what a script that dies of a redmutex error exits with (Perl's die
# exits with $! when it is set; here 255, as for any die with $! clear).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use TestRedis;
use Redmutex qw(with_lock);

cli('FLUSHALL');
cli('SET', 'pl:errno:busy', 'someone-else');
my %failing = (
    'a wait that runs out' => '$client->lock("pl:errno:busy")->guard(timeout => 0.3)',
    'a lock not held' => '$client->lock("pl:errno:free")->release',
    'a server that is not there' => 'Redmutex::Client->new("unix://$ARGV[0].none")->lock("x")->acquire(0)',
    'a closed client' => '$client->close; $client->lock("x")',
    'bad input' => '$client->lock("")',
);

for my $case (sort keys %failing) {
    my ($status, $out, $err) = run_perl('use Redmutex; my $client = Redmutex::Client->new($ARGV[0]); $! = 0; '
        . "$failing{$case}; print qq{no error\\n}", url());
    is $status >> 8, 255, "$case: the script dies with 255" or diag $err;
    like $err, qr/Redmutex::/, "$case: of the redmutex error";
}

subtest '$! is what it was before each call' => sub {
    my $client = Redmutex::Client->new(url());
    my $busy = $client->lock('pl:errno:busy');
    my $lock = $client->lock('pl:errno:mine');
    for my $call (
        ['acquire', sub { $lock->acquire(1) }],
        ['release', sub { $lock->release }],
        ['try on a busy lock', sub { $busy->acquire(0) }],
        ['a wait that runs out', sub { $busy->acquire(0.2) }],
        ['with_lock', sub { with_lock { 1 } $lock }],
        ['a failing release', sub { eval { $lock->release } }],
        ['queries', sub { $lock->locked; $lock->ttl; $busy->hold_count }],
        ['a new client', sub { Redmutex::Client->new(url())->lock('x')->acquire(0) }],
        ['no server', sub { eval { Redmutex::Client->new('unix://' . socket_path() . '.none')->lock('x')->acquire(0) } }],
    ) {
        $! = 7;
        $call->[1]->();
        is $! + 0, 7, $call->[0];
    }
};

done_testing;
