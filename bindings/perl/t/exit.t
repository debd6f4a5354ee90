# A script that ends without closing its client releases the locks it still
# holds, however it ends: the end of the script, die, exit, a signal whose
# handler exits. Only leave_locks_on_close keeps them; a forked child that
# exits leaves its parent's locks alone.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use TestRedis;
use Redmutex;

my $prelude = 'use strict; use warnings; use Redmutex qw(with_lock); $| = 1; '
    . 'my $client = Redmutex::Client->new($ARGV[0]); ';

my %ends = (
    'the end of the script' => 'my $l = $client->lock("pl:exit", lease => 60); $l->acquire; print "held\n";',
    'die' => 'my $l = $client->lock("pl:exit", lease => 60); $l->acquire; print "held\n"; die "boom\n";',
    'exit 3' => 'my $l = $client->rlock("pl:exit"); $l->acquire; print "held\n"; exit 3;',
    'a lock in a package variable' => 'our $l = $client->fair_lock("pl:exit"); $l->acquire; print "held\n";',
    'a lock whose handle was freed' => '{ my $l = $client->lock("pl:exit", lease => 60); $l->acquire; } print "held\n";',
    'a guard left to global destruction' => 'our $g = $client->write_lock("pl:exit")->guard; print "held\n";',
);

for my $case (sort keys %ends) {
    cli('FLUSHALL');
    my ($status, $out, $err, $seconds) = run_perl($prelude . $ends{$case}, url());
    is $out, "held\n", "$case: held the lock" or diag $err;
    is cli('EXISTS', 'pl:exit'), '0', "$case: released by the time the script has exited";
    cmp_ok $seconds, '<', 10, "$case: the exit did not hang";
}

subtest 'a script ended by a signal whose handler exits' => sub {
    cli('FLUSHALL');
    my ($pid, $out) = spawn_perl($prelude . '$SIG{TERM} = sub { exit 1 }; my $l = $client->lock("pl:exit"); '
        . '$l->acquire; print "held\n"; sleep 60;', url());
    expect_line($out, qr/^held$/);
    kill 'TERM', $pid;
    waitpid $pid, 0;
    is $? >> 8, 1, 'exited 1';
    is cli('EXISTS', 'pl:exit'), '0', 'released';
};

subtest 'leave_locks_on_close leaves them to expire' => sub {
    cli('FLUSHALL');
    my ($status, $out) = run_perl('use Redmutex; my $c = Redmutex::Client->new($ARGV[0], leave_locks_on_close => 1); '
        . 'my $l = $c->lock("pl:exit", lease => 60); $l->acquire; print "held\n";', url());
    is $out, "held\n";
    cmp_ok cli('PTTL', 'pl:exit'), '>', 50000, 'still held, for its lease';
};

subtest 'a forked child that exits leaves its parent\'s locks alone' => sub {
    cli('FLUSHALL');
    my ($status, $out, $err) = run_perl($prelude . 'my $l = $client->lock("pl:exit", lease => 60); $l->acquire; '
        . 'my $pid = fork // die "fork: $!"; if (!$pid) { exit 0 } waitpid $pid, 0; '
        . 'print "child exited ", $? >> 8, "; parent owns: ", ($l->owned ? 1 : 0), "\n";', url());
    is $out, "child exited 0; parent owns: 1\n", 'the parent still holds it after the child exited' or diag $err;
    is cli('EXISTS', 'pl:exit'), '0', 'released when the parent exited';
};

done_testing;
