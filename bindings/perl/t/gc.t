# Objects may be freed in any order; a lock keeps its client usable; freeing
# never blocks, also at global destruction with locks held.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use TestRedis;
use Redmutex qw(with_lock);

cli('FLUSHALL');

subtest 'a lock outlives its client object' => sub {
    my $lock = Redmutex::Client->new(url())->lock('pl:orphan');
    is((with_lock { 3 } $lock), 3, 'still works');
    is cli('EXISTS', 'pl:orphan'), '0';
};

subtest 'freeing clients, held locks and guards in any order' => sub {
    my $start = now();
    for my $i (1 .. 30) {
        my $client = Redmutex::Client->new(url(), shutdown_timeout => 5);
        my @locks = map { $client->lock("pl:gc:$i:$_", lease => 30) } 1 .. 3;
        $_->acquire for @locks[0, 1];
        my $guard = $locks[2]->guard;
        undef $client if $i % 2;
        @locks = reverse @locks if $i % 3;
        undef @locks;
        undef $guard;
    }
    ok now() - $start < 10, 'did not wait for the servers';
};

subtest 'global destruction with locks and guards held' => sub {
    my $start = now();
    my $code = 'use Redmutex; my $c = Redmutex::Client->new($ARGV[0]); our @l = map { $c->lock("pl:gd:$_") } 1..3; '
        . '$_->acquire for @l; our $g = $c->lock("pl:gd:g")->guard; our $c2 = $c; print "ok\n"';
    my $out = qx{$^X @{[map {"-I$_"} @INC]} -e '$code' '@{[url()]}'};
    is $out, "ok\n", 'ran';
    is $?, 0, 'exited cleanly';
    ok now() - $start < 10, 'exit did not hang';
};

done_testing;
