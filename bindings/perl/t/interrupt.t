# Ctrl-C (SIGINT) during a wait, in a child perl: the wait ends at once,
# with_lock around it releases, nothing is left on the server.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use TestRedis;
use IPC::Open3 ();
use Symbol ();

my $child = <<'PERL';
use strict;
use warnings;
use Redmutex qw(with_lock);
$| = 1;
$SIG{INT} = sub { die "interrupted by the user\n" } if $ARGV[1];
my $client = Redmutex::Client->new($ARGV[0], wait_backoff_cap => 30);
with_lock {
    print "holding\n";
    $client->lock('pl:int:busy')->acquire;   # waits: someone else holds it
    print "acquired\n";
} $client->lock('pl:int:outer');
PERL

sub interrupt_a_waiting_child {
    my ($with_handler) = @_;
    cli('FLUSHALL');
    cli('SET', 'pl:int:busy', 'someone-else');
    my $err = Symbol::gensym;
    # (env --default-signal: a shell started in the background hands its
    # children SIGINT ignored, and an ignored SIGINT must stay ignored)
    my $pid = IPC::Open3::open3(my $in, my $out, $err, 'env', '--default-signal=INT', $^X, (map {"-I$_"} @INC),
        '-e', $child, url(), $with_handler ? 1 : 0);
    is scalar <$out>, "holding\n", 'the child holds the outer lock';
    wait_for_waiter('pl:int:busy');
    my $start = now();
    kill 'INT', $pid;
    waitpid $pid, 0;
    my $status = $?;
    my $elapsed = now() - $start;
    my $stderr = do { local $/; <$err> };
    ok $elapsed < 5, "exited promptly ($elapsed s), not after the 30 s backoff";
    ok $status != 0, 'with a failure status';
    is scalar <$out>, undef, 'never acquired';
    is cli('EXISTS', 'pl:int:outer'), '0', 'with_lock released on the way out';
    is cli('GET', 'pl:int:busy'), 'someone-else', 'the other holder\'s lock is untouched';
    return $stderr;
}

subtest 'default SIGINT: dies with Redmutex::InterruptedWait' => sub {
    like interrupt_a_waiting_child(0), qr/Redmutex::InterruptedWait/;
};

subtest '$SIG{INT} handler: Perl runs it' => sub {
    like interrupt_a_waiting_child(1), qr/interrupted by the user/;
};

done_testing;
