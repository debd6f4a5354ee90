# The error classes are the table that redmutex.h, bindings/common/errors.c and the Python
# package agree on (tests/errortable.py), and a raised error carries its class's code.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use TestRedis;
use Redmutex;

open my $list, '-|', 'python3', "$FindBin::Bin/../../../tests/errortable.py", '--list' or die "python3: $!";
my @table = map { [split] } <$list>;
close $list;
ok scalar(@table), 'tests/errortable.py --list printed the table';
my %code = map { $_->[0] => $_->[3] } @table;

for my $row (@table) {
    my ($name, $parent) = @$row;
    next if $parent eq '-';
    ok "Redmutex::$name"->isa("Redmutex::$parent"), "Redmutex::$name isa Redmutex::$parent";
}

# The error of a call (returned as a copy: $@ itself is overwritten by the next eval).
sub error_of {
    my ($code) = @_;
    return undef if eval { $code->(); 1 };
    return $@;
}

my $client = Redmutex::Client->new(url());
my @raised = (error_of(sub { $client->lock('') }), error_of(sub { $client->lock('pl:errors')->release }));
$client->close;
push @raised, error_of(sub { $client->lock('pl:errors') });
my @want = qw(InvalidArgument NotOwnedError ClosedError);
for my $i (0 .. $#want) {
    my $e = $raised[$i];
    isa_ok $e, "Redmutex::$want[$i]";
    (my $name = ref $e) =~ s/^Redmutex:://;
    is $e->code, $code{$name}, "$name carries the code of the table";
}

done_testing;
