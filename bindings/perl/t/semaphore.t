use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use TestRedis;
use Redmutex qw(with_lock);

sub fresh_client { cli('FLUSHALL'); Redmutex::Client->new(url(), @_) }

subtest 'with_lock on a semaphore holds one permit for the block' => sub {
    my $client = fresh_client();
    my $sem = $client->semaphore('pl:sem', 2);
    my $value = with_lock {
        is cli('GET', 'pl:sem'), '1', 'one permit taken';
        is cli('ZCARD', '{pl:sem}:timeout'), '1', 'in the timeout zset';
        'done';
    } $sem;
    is $value, 'done', 'the block value';
    is cli('GET', 'pl:sem'), '2', 'given back';
};

subtest 'a guard holds one permit until it goes out of scope' => sub {
    my $client = fresh_client();
    my $sem = $client->semaphore('pl:guard', 1);
    {
        my $guard = $sem->guard;
        ok $guard->held, 'held';
        is $sem->available, 0, 'none free';
    }
    is $sem->available, 1, 'given back at the end of the scope';
};

subtest 'acquire returns a permit id or undef, release gives it back' => sub {
    my $client = fresh_client();
    my $sem = $client->semaphore('pl:ids', 2);
    my $a = $sem->acquire;
    like $a, qr/\A[0-9a-f]{32}\z/, 'a permit id';
    my $b = $sem->acquire(undef, 1);
    ok !defined $sem->acquire(0), 'none free: undef';
    $sem->release($_) for $a, $b;
    is $sem->available, 2, 'both back';
    eval { $sem->release($a) };
    isa_ok $@, 'Redmutex::NotOwnedError', 'a second release';
};

subtest 'bad input is refused and changes nothing' => sub {
    my $client = fresh_client();
    for my $bad (0, -1, 1.5) {
        eval { $client->semaphore('pl:bad', $bad) };
        isa_ok $@, 'Redmutex::InvalidArgument', "permits $bad";
    }
    my $sem = $client->semaphore('pl:bad', 2);
    eval { $sem->acquire(0, 3) };
    isa_ok $@, 'Redmutex::InvalidArgument', 'more permits than the capacity';
    eval { $sem->acquire('nan') };
    isa_ok $@, 'Redmutex::InvalidArgument', 'a NaN timeout';
    is cli('KEYS', '*'), '', 'nothing on the server';
};

done_testing;
