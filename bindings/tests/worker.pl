# Cross-language worker: perl worker.pl URL NAME COUNTER_FILE ITERATIONS
use strict;
use warnings;
use Redmutex qw(with_lock);
my ($url, $name, $path, $n) = @ARGV;
my $lock = Redmutex::Client->new($url)->lock($name);
for (1 .. $n) {
    with_lock {
        open my $in, '<', $path or die "$path: $!";
        my $value = <$in> // 0;
        close $in;
        open my $out, '>', $path or die "$path: $!";
        print $out $value + 1;
        close $out;
    } $lock;
}
