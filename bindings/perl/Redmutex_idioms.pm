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

our $VERSION = '1.0.0';
our @EXPORT_OK = qw(with_lock);

# with_lock { BLOCK } $lock, timeout => $seconds;
# Runs BLOCK holding $lock and returns what it returns. The lock is released
# however BLOCK ends; if BLOCK dies, that error is what with_lock dies with.
# If BLOCK finished but the lease was lost meanwhile, dies with
# Redmutex::LockLostError.
sub with_lock (&$;@) {
    my ($code, $lock, @options) = @_;
    my $guard = $lock->guard(@options);
    my @result = wantarray ? $code->() : scalar $code->();
    $guard->release;
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

# $lock->try_lock: tries once; true when acquired.
sub try_lock { $_[0]->acquire(0) }

package Redmutex;
