# Objects that cannot be made on their own, and methods called on something
# that is not a live object of their class (undef, a freed object, a forged
# reference), die with Redmutex::InvalidArgument; nothing crashes. Each case
# runs in a child perl, so that a crash fails the case, not the suite.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use TestRedis;

sub dies_cleanly {
    my ($code, $pattern, $name) = @_;
    my ($status, $out, $err) = run_perl("use strict; use warnings; use Redmutex qw(with_lock);\n"
        . 'my $client = Redmutex::Client->new($ARGV[0]);' . "\n$code;\nprint qq{survived\\n};", url());
    subtest $name => sub {
        is $status & 127, 0, 'no crash (no signal)' or diag "killed by signal " . ($status & 127);
        isnt $out, "survived\n", 'died';
        like $err, qr/Redmutex::InvalidArgument/, 'with InvalidArgument';
        like $err, $pattern, 'saying what is wrong';
    };
}

dies_cleanly('Redmutex::Lock->new()', qr/made by a client/, 'Redmutex::Lock->new');
dies_cleanly('Redmutex::Guard->new()', qr/made by a lock/, 'Redmutex::Guard->new');
dies_cleanly('Redmutex::Lock::acquire(undef)', qr/called on nothing/, 'a Lock method on undef');
dies_cleanly('Redmutex::Client::close(undef)', qr/called on nothing/, 'a Client method on undef');
dies_cleanly('Redmutex::Guard::release(undef)', qr/called on nothing/, 'a Guard method on undef');
dies_cleanly('my $l = $client->lock("pl:self"); $l->DESTROY; $l->name', qr/freed/, 'a destroyed lock');
dies_cleanly('my $c = Redmutex::Client->new($ARGV[0]); $c->DESTROY; $c->lock("pl:self")', qr/freed/,
    'a destroyed client');
dies_cleanly('my $g = $client->lock("pl:self")->guard; $g->DESTROY; $g->held', qr/freed/, 'a destroyed guard');
dies_cleanly('my $l = $client->lock("pl:self"); my $p = tied(%$l); Redmutexc::delete_Lock($p); '
    . 'Redmutexc::delete_Lock($p)', qr/freed/, 'a lock deleted twice');
dies_cleanly('my $l = $client->lock("pl:self"); my $p = tied(%$l); Redmutexc::delete_Lock($p); with_lock {} $l',
    qr/freed/, 'with_lock on a deleted lock');
dies_cleanly('Redmutexc::_scope_leave(bless \(my $x = 123456), "Redmutex::_Scope")', qr/not a live scope/,
    'a forged with_lock scope');

# A Lock method on a Client, or on something made up: SWIG's own type check refuses it.
for my $case (['Redmutex::Lock::acquire($client)', 'a Lock method on a Client'],
              ['Redmutex::Lock::name(bless {}, "Redmutex::Lock")', 'a Lock method on a made-up object']) {
    my ($status, $out, $err) = run_perl('use Redmutex; my $client = Redmutex::Client->new($ARGV[0]); '
        . "$case->[0]; print qq{survived\\n};", url());
    is $status & 127, 0, "$case->[1]: no crash";
    like $err, qr/TypeError in method 'Lock_(acquire|name)', argument 1/, "$case->[1]: a type error";
}

done_testing;
