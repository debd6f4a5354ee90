# The Perl idioms of redmutex, appended by swig to the generated Redmutex.pm.
#
#   use Redmutex qw(with_lock);
#   my $client = Redmutex::Client->new('redis://127.0.0.1:6379/0');
#   my $lock = $client->lock('jobs:nightly', timeout => 10);
#   with_lock { run_nightly_job() } $lock;
#
#   {   my $guard = $lock->guard;    # held until $guard goes out of scope
#       ...
#   }
#
# Errors are objects: die with Redmutex::LockTimeout, Redmutex::NotOwnedError,
# ... all of them Redmutex::Error.

package Redmutex;

our $VERSION = '1.1.0';
our @EXPORT_OK = qw(with_lock);

# with_lock { BLOCK } $lock, timeout => $seconds;
# Runs BLOCK holding $lock and returns what it returns. The lock is released
# however BLOCK ends, and if BLOCK dies, that error is what with_lock dies
# with. If BLOCK finished but the lease was lost meanwhile, dies with
# Redmutex::LockLostError.
sub with_lock (&$;@) {
    my ($code, $lock, @options) = @_;
    my $scope = Redmutexc::_scope_enter($lock, @options);    # its DESTROY releases on the way out
    my @result = wantarray ? $code->() : scalar $code->();
    Redmutexc::_scope_leave($scope);
    return wantarray ? @result : $result[0];
}

package Redmutex::Error;

use overload
    '""' => sub { my $e = shift; "$e->{message} (Redmutex::$e->{name})\n" },
    'bool' => sub { 1 },
    fallback => 1;

sub code    { $_[0]{code} }
sub name    { $_[0]{name} }
sub message { $_[0]{message} }

package Redmutex::Lock;

use Scalar::Util ();

# $lock->try_lock: tries once; true when acquired.
sub try_lock { $_[0]->acquire(0) }

# Lost-lock callbacks by lock id: [callback, weak reference to the lock].
my %on_lost;

# $lock->on_lost(sub { my ($lock, $state, $owner) = @_; ... });
# Called by $client->dispatch_events (in the caller's thread) when a hold of
# this lock turns 'renewal_failing' or 'lost' (or 'held' again). Perl code
# never runs on the library's watchdog thread. $lock->lost asks without a
# callback. The callback gets the lock as its first argument: do not close
# over $lock, or it is never freed.
sub on_lost {
    my ($self, $callback) = @_;
    my $entry = $on_lost{ $self->id } = [$callback, $self];
    Scalar::Util::weaken($entry->[1]);
    return $self;
}

{
    my $destroy = \&Redmutex::Lock::DESTROY;
    no warnings 'redefine';
    *Redmutex::Lock::DESTROY = sub {
        # A lock freed while an error unwinds (a temporary, as in
        # $client->lock($name)->acquire) must not clear the caller's $@.
        local ($@, $!, $?);
        if (ref $_[0] && Scalar::Util::reftype($_[0]) eq 'HASH' && tied %{ $_[0] }) {
            # A lock dropped while an error unwinds must not clear the caller's $@.
            local $@;
            my $id = eval { $_[0]->id };    # none once destroyed by hand already
            delete $on_lost{$id} if defined $id;
        }
        goto &$destroy;
    };
}

package Redmutex::Client;

# $client->event_fd: readable while lost-lock news is queued (IO::Select,
# AnyEvent->io, ...); then call $client->dispatch_events. Never read it.

# $client->dispatch_events: runs the on_lost callbacks for the news queued
# so far and returns how many events there were. Never blocks.
sub dispatch_events {
    my ($self) = @_;
    my $count = 0;
    while (my ($id, $state, $owner) = $self->next_event) {
        $count++;
        my $entry = $on_lost{$id} or next;
        $entry->[0]->($entry->[1], $state, $owner) if $entry->[1];
    }
    return $count;
}

package Redmutex;
