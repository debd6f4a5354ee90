use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use TestRedis;
use Redmutex;

# $client->stats is the C core's snapshot; the library's log messages are Perl warnings.

subtest 'N acquisitions give N counts and N hold samples' => sub {
    cli('FLUSHALL');
    my $client = Redmutex::Client->new(url());
    my $lock = $client->lock('pl:stats');
    for (1 .. 4) { $lock->acquire; $lock->release }
    my $s = $client->stats;
    is $s->{'acquire_wait_seconds.lock.acquired.count'}, 4, 'four acquisitions';
    is $s->{'hold_seconds.lock.count'}, 4, 'four holds';
    is $s->{'locks_held'}, 0, 'none held';
    is $s->{'counting'}, 1, 'counting';
    $client->close;
};

subtest 'an unreachable server is a warning' => sub {
    my @warnings;
    local $SIG{__WARN__} = sub { push @warnings, $_[0] };
    my $dead = Redmutex::Client->new('redis://127.0.0.1:1');
    ok !eval { $dead->lock('pl:dead')->acquire; 1 }, 'acquire fails';
    ok((grep { /^redmutex: WARNING: .*redis:\/\/127\.0\.0\.1:1\/0 is unreachable/ } @warnings), 'warned')
        or diag explain \@warnings;
    is $dead->stats->{'servers[redis://127.0.0.1:1/0].errors.connection'}, 1, 'one connection error';
    $dead->close;
};

done_testing;
