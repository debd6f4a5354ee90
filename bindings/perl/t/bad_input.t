use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use TestRedis;
use Redmutex;

cli('FLUSHALL');
my $client = Redmutex::Client->new(url());
my $lock = $client->lock('pl:bad');
cli('CONFIG', 'RESETSTAT');

sub invalid {
    my ($code, $pattern, $name) = @_;
    my $ok = eval { $code->(); 1 };
    my $error = $@;
    ok !$ok, "$name dies";
    isa_ok $error, 'Redmutex::InvalidArgument', $name;
    like "$error", $pattern, "$name message";
}

invalid(sub { $client->lock('') }, qr/lock name is empty/, 'empty name');
invalid(sub { $client->lock(undef) }, qr/lock name must be a string, not undef/, 'undef name');
invalid(sub { $client->lock({}) }, qr/not a HASH reference/, 'hash name');
invalid(sub { $client->rlock([]) }, qr/not an ARRAY reference/, 'array name');
invalid(sub { $client->lock("a\0b") }, qr/NUL/, 'NUL in name');
invalid(sub { $client->lock('x' x 1025) }, qr/at most 1024/, 'long name');
invalid(sub { $client->lock('x', lease => 'nan') }, qr/not NaN/, 'NaN lease');
invalid(sub { $client->lock('x', lease => 9**9**9) }, qr/not infinity/, 'infinite lease');
invalid(sub { $client->lock('x', lease => 'soon') }, qr/lease must be a number of seconds, not a string/, 'word lease');
invalid(sub { $client->lock('x', lease => 0) }, qr/lease must be positive/, 'zero lease');
invalid(sub { $lock->acquire(-2) }, qr/timeout must not be negative/, 'negative timeout');
invalid(sub { $lock->acquire('nan') }, qr/not NaN/, 'NaN timeout');
invalid(sub { $lock->guard(timeout => []) }, qr/not an ARRAY reference/, 'array timeout');
invalid(sub { $client->lock('x', max_extensions => 1.5) }, qr/must be an integer/, 'fractional count');
invalid(sub { $client->lock('x', owner => '') }, qr/owner is empty/, 'empty owner');
invalid(sub { $client->lock('x', leese => 5) }, qr/unknown option 'leese'/, 'unknown option');
invalid(sub { $client->lock('x', 'lease') }, qr/pairs/, 'odd option list');
invalid(sub { $lock->extend(0) }, qr/seconds must be positive/, 'zero extension');
invalid(sub { Redmutex::Client->new([]) }, qr/at least one server URL/, 'no URLs');
invalid(sub { Redmutex::Client->new('http://example.com') }, qr/malformed/, 'bad URL');
invalid(sub { Redmutex::Client->new(url(), timeout => 1) }, qr/unknown option 'timeout' for a client/, 'client option');
is_deeply [commands_since_reset()], [], 'nothing was sent';

done_testing;
