# Signals with a Perl handler (%SIG) during a wait, in a child perl: the wait
# ends as the signal arrives, the handler runs with nothing held by that
# acquire, a handler that dies is what the acquire dies with, and one that
# returns lets the wait go on for the time it has left.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use TestRedis;

my $child = <<'PERL';
use strict;
use warnings;
use Redmutex qw(with_lock);
use Time::HiRes ();
$| = 1;
my ($url, $case) = @ARGV;
my $client = Redmutex::Client->new($url, wait_backoff_cap => 30);
my $busy = $client->lock('pl:sig:busy');
my $outer = $client->lock('pl:sig:outer');
my $start = Time::HiRes::time();
my $acquired = eval {
    with_lock {
        if ($case eq 'alarm') {    # the handler dies, the alarm is the script's own
            local $SIG{ALRM} = sub { die "alarm\n" };
            alarm 1;
            print "waiting\n";
            return $busy->acquire(20) ? 1 : 0;
        }
        if ($case eq 'term') {     # the handler dies
            local $SIG{TERM} = sub { die "terminated\n" };
            print "waiting\n";
            return $busy->acquire(20) ? 1 : 0;
        }
        if ($case eq 'returns') {  # the handler returns
            local $SIG{USR1} = sub { print "handler ran\n" };
            print "waiting\n";
            return $busy->acquire(20) ? 1 : 0;
        }
        if ($case eq 'ignored') {  # SIGINT ignored, as under nohup
            local $SIG{INT} = 'IGNORE';
            print "waiting\n";
            return $busy->acquire(3) ? 1 : 0;
        }
        die "unknown case $case\n";
    } $outer;
};
(my $error = $@) =~ s/\n//g;
printf "acquired=%s error=%s owned=%d outer=%d seconds=%.1f\n", $acquired // 'none', $error,
    $busy->owned ? 1 : 0, $outer->locked ? 1 : 0, Time::HiRes::time() - $start;
PERL

# Runs the child in $case while the busy lock is held by someone else;
# $meanwhile->($pid, $out) acts once the child waits. Returns the child's report
# (key => value), or {failure => why}.
sub run_case {
    my ($case, $meanwhile) = @_;
    cli('FLUSHALL');
    cli('SET', 'pl:sig:busy', 'someone-else');
    my ($pid, $out, $err) = spawn_perl($child, url(), $case);
    my $report = eval {
        expect_line($out, qr/^waiting$/);
        wait_for_waiter('pl:sig:busy');
        $meanwhile->($pid, $out) if $meanwhile;
        expect_line($out, qr/^acquired=/, 40);
    };
    my $failure = $@;
    kill 'KILL', $pid if $failure;
    waitpid $pid, 0;
    return {failure => $failure} if $failure;
    return { map { split /=/, $_, 2 } split / /, $report };
}

sub reported {
    my ($r) = @_;
    ok !$r->{failure}, 'the child reported' or diag $r->{failure};
    return $r;
}

subtest 'a dying $SIG{ALRM} handler ends the wait at the alarm, holding nothing' => sub {
    my $r = reported(run_case('alarm'));
    is $r->{error}, 'alarm', 'the acquire died with the handler\'s error';
    cmp_ok $r->{seconds}, '<', 10, 'at the alarm, not at the end of the 20 s wait';
    is $r->{owned}, 0, 'the waited-for lock is not held';
    is $r->{outer}, 0, 'with_lock released the outer lock on the way out';
    is cli('GET', 'pl:sig:busy'), 'someone-else', 'the other holder keeps its lock';
};

subtest 'a dying $SIG{TERM} handler ends the wait even as the lock is handed over' => sub {
    my $r = reported(run_case('term', sub {
        my ($pid) = @_;
        kill 'TERM', $pid;
        hand_over('pl:sig:busy');    # freed at the same moment: it must not stay held
    }));
    is $r->{error}, 'terminated', 'the acquire died with the handler\'s error';
    is $r->{owned}, 0, 'the lock freed meanwhile is not held by the dead acquire';
    is $r->{outer}, 0, 'with_lock released the outer lock';
};

subtest 'a handler that returns runs during the wait, which then goes on' => sub {
    my $r = reported(run_case('returns', sub {
        my ($pid, $out) = @_;
        kill 'USR1', $pid;
        expect_line($out, qr/^handler ran$/, 10);    # while the lock is still held by someone else
        hand_over('pl:sig:busy');
    }));
    is $r->{error}, '', 'no error';
    is $r->{acquired}, 1, 'the wait went on and acquired the lock once it was free';
    is $r->{owned}, 1, 'held';
};

subtest 'an ignored SIGINT stays ignored' => sub {
    my $r = reported(run_case('ignored', sub { kill 'INT', $_[0] }));
    is $r->{error}, '', 'no error';
    is $r->{acquired}, 0, 'the wait ran to its timeout';
    cmp_ok $r->{seconds}, '>=', 2.9, 'all of its 3 s';
};

done_testing;
