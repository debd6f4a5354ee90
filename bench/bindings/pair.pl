# Uncontended pairs per second of with_lock {} $lock: perl pair.pl URL SECONDS
use strict;
use warnings;
use Redmutex qw(with_lock);
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);
my ($url, $seconds) = @ARGV;
my $lock = Redmutex::Client->new($url)->lock('bench:perl');
with_lock {} $lock for 1 .. 200;
my $n = 0;
my $start = clock_gettime(CLOCK_MONOTONIC);
my $now;
do {
    with_lock {} $lock for 1 .. 100;
    $n += 100;
    $now = clock_gettime(CLOCK_MONOTONIC);
} while ($now - $start < $seconds);
print $n / ($now - $start), "\n";
