# A private redis-server for the Perl binding's tests, from tests/rmserver.py
# (the helper every suite shares; CONTRIBUTING.md, "Test servers"): the binary
# of $REDMUTEX_TEST_SERVER or Debian's, on a Unix socket in a temporary
# directory, no persistence. The helper stops it when this process closes its
# end of the pipe, however the process ends. No server binary fails the suite,
# never skips it. Tests look at the server with redis-cli.
package TestRedis;

use strict;
use warnings;
use Exporter 'import';
use File::Basename ();
use File::Spec ();
use IO::Select ();
use IPC::Open3 ();
use Symbol ();
use Time::HiRes ();

our @EXPORT = qw(cli url socket_path now wait_until commands_since_reset wait_for_waiter spawn_perl run_perl
    expect_line hand_over);

my $rmserver = File::Spec->rel2abs(File::Basename::dirname(__FILE__) . '/../../../../tests/rmserver.py');
my $owner = $$;    # a forked child's END must leave the server alone
open(our $server, '-|', 'python3', $rmserver, 'serve', '--unix') or die "python3 $rmserver: $!\n";
my $line = <$server> // die "tests/rmserver.py started no server (its message is above)\n";
my %info = map { split /=/, $_, 2 } split ' ', $line;
our $dir = $info{dir};
my $socket = $info{socket};
my $redis_cli = $info{cli};

# Closing the pipe stops the server; close waits until the helper has removed it.
# (local $?: close sets it to the helper's status, and in END it is our exit status.)
END {
    local $?;
    close $server if $$ == $owner && $server;
}

sub url         { "unix://$socket" }
sub socket_path { $socket }
sub now         { Time::HiRes::clock_gettime(Time::HiRes::CLOCK_MONOTONIC()) }

sub cli {
    open my $out, '-|', 'sh', '-c', 'exec "$0" -s "$@" 2>/dev/null', $redis_cli, $socket, @_
        or die "redis-cli: $!";
    my $text = do { local $/; <$out> } // '';
    close $out;
    $text =~ s/\n\z//;
    return $text;
}

# Waits until $cond->() is true; dies after $seconds.
sub wait_until {
    my ($seconds, $what, $cond) = @_;
    my $deadline = now() + $seconds;
    until ($cond->()) {
        die "timed out waiting for $what\n" if now() > $deadline;
        Time::HiRes::sleep(0.01);
    }
    return 1;
}

# Commands the server ran since CONFIG RESETSTAT, apart from CONFIG and INFO.
sub commands_since_reset {
    return grep { !/^config/ && $_ ne 'info' } map { /^cmdstat_([^:]+):/ ? $1 : () } split /\n/,
        cli('INFO', 'commandstats');
}

# Waits until a client waits for lock $name (it subscribed to the lock's channel).
sub wait_for_waiter {
    my ($name) = @_;
    wait_until(10, "a waiter on $name", sub {
        (split /\n/, cli('PUBSUB', 'NUMSUB', "redisson_lock__channel:{$name}"))[-1] > 0;
    });
}

# Starts a child perl running $code with @args, with this process's @INC. SIGINT is put back to
# its default (a shell started in the background hands its children SIGINT ignored); every other
# signal a test sends, the child handles itself. Returns ($pid, $stdout, $stderr).
sub spawn_perl {
    my ($code, @args) = @_;
    my $err = Symbol::gensym;
    my $pid = IPC::Open3::open3(my $in, my $out, $err, 'env', '--default-signal=INT', $^X, (map {"-I$_"} @INC),
        '-e', $code, @args);
    close $in;
    return ($pid, $out, $err);
}

# Runs a child perl to its end: (wait status, stdout, stderr, seconds).
sub run_perl {
    my ($code, @args) = @_;
    my $start = now();
    my ($pid, $out, $err) = spawn_perl($code, @args);
    my $stdout = do { local $/; <$out> } // '';
    my $stderr = do { local $/; <$err> } // '';
    waitpid $pid, 0;
    return ($?, $stdout, $stderr, now() - $start);
}

# Reads the child's output until a line matches $pattern; dies after $seconds. Returns the line.
my %unread;
sub expect_line {
    my ($fh, $pattern, $seconds) = @_;
    my $deadline = now() + ($seconds // 10);
    my $select = IO::Select->new($fh);
    $unread{$fh} //= '';
    for (;;) {
        while ($unread{$fh} =~ s/\A([^\n]*)\n//) {
            my $line = $1;
            return $line if $line =~ $pattern;
        }
        my $left = $deadline - now();
        die "timed out waiting for a line like $pattern\n" if $left <= 0;
        next unless $select->can_read($left);
        my $n = sysread $fh, my $chunk, 4096;
        die "the child closed its output before a line like $pattern\n" unless $n;
        $unread{$fh} .= $chunk;
    }
}

# Frees the plain lock $name as another holder's release would: DEL and the release message.
sub hand_over {
    my ($name) = @_;
    cli('DEL', $name);
    cli('PUBLISH', "redisson_lock__channel:{$name}", '0');
}

1;
