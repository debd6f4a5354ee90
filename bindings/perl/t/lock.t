use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use TestRedis;
use Redmutex qw(with_lock);

sub fresh_client { cli('FLUSHALL'); Redmutex::Client->new(url(), @_) }

subtest 'acquire and release change the key' => sub {
    my $client = fresh_client();
    my $lock = $client->lock('pl:plain');
    ok $lock->acquire, 'acquired';
    is cli('EXISTS', 'pl:plain'), '1', 'the key exists';
    is $lock->state, 'held';
    ok $lock->locked && $lock->owned, 'locked and owned';
    $lock->release;
    is cli('EXISTS', 'pl:plain'), '0', 'the key is gone';
    is $lock->state, 'unlocked';
};

subtest 'acquire of a held lock returns false after the wait' => sub {
    my $client = fresh_client();
    my $holder = $client->lock('pl:held');
    $holder->acquire;
    my $other = $client->lock('pl:held');
    ok !$other->try_lock, 'try_lock fails';
    my $start = now();
    ok !$other->acquire(0.2), 'acquire(0.2) fails';
    cmp_ok now() - $start, '>=', 0.19, 'after waiting';
    $holder->release;
    ok $other->acquire(0), 'free again';
    $other->release;
};

subtest 'with_lock holds the lock for the block and returns its value' => sub {
    my $client = fresh_client();
    my $lock = $client->lock('pl:with', lease => 5);
    my @got = with_lock {
        is cli('EXISTS', 'pl:with'), '1', 'held inside';
        my $ttl = cli('PTTL', 'pl:with');
        ok $ttl > 4000 && $ttl <= 5000, "lease of 5 s (pttl $ttl)";
        (1, 2, 3);
    } $lock;
    is_deeply \@got, [1, 2, 3], 'list value';
    my $scalar = with_lock { 'one' } $lock;
    is $scalar, 'one', 'scalar value';
    is cli('EXISTS', 'pl:with'), '0', 'released';
};

subtest 'guard releases when it goes out of scope' => sub {
    my $client = fresh_client();
    my $lock = $client->lock('pl:guard');
    {
        my $guard = $lock->guard;
        ok $guard->held, 'the guard holds';
        is cli('EXISTS', 'pl:guard'), '1', 'held in scope';
    }
    is cli('EXISTS', 'pl:guard'), '0', 'released by DESTROY';
    my $guard = $lock->guard(timeout => 1);
    $guard->release;
    ok !$guard->held, 'released explicitly';
    $guard->release;    # a second release does nothing
    is cli('EXISTS', 'pl:guard'), '0';
};

subtest 'the wait runs out with Redmutex::LockTimeout' => sub {
    my $client = fresh_client();
    my $holder = $client->lock('pl:timeout');
    $holder->acquire;
    my $waiter = $client->lock('pl:timeout', timeout => 0.3);
    my $start = now();
    my $ran = 0;
    ok !eval { with_lock { $ran = 1 } $waiter; 1 }, 'with_lock died';
    my $error = $@;
    my $elapsed = now() - $start;
    ok !$ran, 'the block did not run';
    isa_ok $error, 'Redmutex::LockTimeout';
    isa_ok $error, 'Redmutex::Error';
    is $error->code, -3, 'code';
    like "$error", qr/pl:timeout.*Redmutex::LockTimeout/, 'message';
    ok $elapsed >= 0.29 && $elapsed < 5, "waited about 0.3 s ($elapsed)";
    ok !eval { $waiter->guard(timeout => 0); 1 }, 'guard(timeout => 0)';
    isa_ok $@, 'Redmutex::LockTimeout';
    $holder->release;
};

subtest 'release by a non-owner dies with Redmutex::NotOwnedError' => sub {
    my $client = fresh_client();
    my $holder = $client->lock('pl:owner');
    $holder->acquire;
    my $stranger = $client->lock('pl:owner');
    ok !eval { $stranger->release; 1 }, 'died';
    isa_ok $@, 'Redmutex::NotOwnedError';
    is cli('EXISTS', 'pl:owner'), '1', 'nothing changed';
    $holder->release;
};

subtest 'reentrant lock counts holds' => sub {
    my $client = fresh_client();
    my $rlock = $client->rlock('pl:re');
    my $field = $client->thread_owner;
    with_lock {
        is $rlock->hold_count, 1;
        with_lock {
            is $rlock->hold_count, 2;
            with_lock { is cli('HGET', 'pl:re', $field), '3', 'count 3 in the hash' } $rlock;
            is $rlock->hold_count, 2;
        } $rlock;
        is $rlock->hold_count, 1;
    } $rlock;
    is $rlock->hold_count, 0;
    is cli('EXISTS', 'pl:re'), '0', 'gone after the last release';
};

subtest 'with_lock releases when the block dies, and dies with its error' => sub {
    my $client = fresh_client();
    my $lock = $client->lock('pl:die');
    my $thrown = bless {}, 'My::Error';
    ok !eval { with_lock { die $thrown } $lock; 1 }, 'died';
    is $@, $thrown, 'the block\'s own error';
    is cli('EXISTS', 'pl:die'), '0', 'released';
    ok !eval { with_lock { die "plain\n" } $lock; 1 };
    is $@, "plain\n";
    is cli('EXISTS', 'pl:die'), '0';
};

subtest 'with_lock releases when the block leaves by return or last' => sub {
    my $client = fresh_client();
    my $lock = $client->lock('pl:leave');
    my $f = sub { with_lock { return 'from the block' } $lock; return 'after' };
    is $f->(), 'after', 'return leaves the block only';
    is cli('EXISTS', 'pl:leave'), '0';
    my $i;
    {
        no warnings 'exiting';
        for $i (1 .. 3) { with_lock { last if $i == 2 } $lock }
    }
    is cli('EXISTS', 'pl:leave'), '0', 'released after last';
    ok $lock->acquire(0), 'free again';
    $lock->release;
};

subtest 'a lost lock: lost is true and with_lock dies with LockLostError' => sub {
    my $client = fresh_client();
    my $lock = $client->lock('pl:lost', lease => 0.2);
    ok !eval { with_lock { wait_until(5, 'the lease to run out', sub { $lock->lost }) } $lock; 1 }, 'died';
    isa_ok $@, 'Redmutex::LockLostError';
    isa_ok $@, 'Redmutex::NotOwnedError';
    ok !$lock->lost, 'forgotten after the release';
};

subtest 'lost-lock news: on_lost and dispatch_events on the event fd' => sub {
    my $client = fresh_client(watchdog_lease => 0.6);
    my @news;
    my $lock = $client->lock('pl:ev')->on_lost(sub { push @news, [@_] });
    $lock->acquire;
    cli('DEL', 'pl:ev');
    my $fd = $client->event_fd;
    open my $fh, '<&=', $fd or die "fdopen: $!";
    my $bits = '';
    vec($bits, $fd, 1) = 1;
    ok select(my $r = $bits, undef, undef, 5), 'the event fd became readable';
    wait_until(5, 'the news', sub { $client->dispatch_events; @news });
    is scalar @news, 1, 'one event';
    is $news[0][0], $lock, 'the lock';
    is $news[0][1], 'lost', 'state';
    ok !defined $news[0][2], 'a plain lock\'s own hold: no owner';
    ok $lock->lost;
    ok !eval { $lock->release; 1 };
    isa_ok $@, 'Redmutex::LockLostError';
};

subtest 'a closed client dies with ClosedError' => sub {
    my $client = fresh_client();
    $client->close;
    ok $client->closed;
    ok !eval { $client->lock('pl:closed'); 1 };
    isa_ok $@, 'Redmutex::ClosedError';
};

done_testing;
