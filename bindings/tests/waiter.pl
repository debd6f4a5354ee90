# Cross-language waiter: perl waiter.pl URL NAME
# Prints "waiting", then, once it holds NAME, the CLOCK_MONOTONIC time.
use strict;
use warnings;
use Redmutex;
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);
$| = 1;
my ($url, $name) = @ARGV;
my $lock = Redmutex::Client->new($url, wait_backoff_cap => 30)->lock($name);
print "waiting\n";
$lock->acquire;
printf "%.6f\n", clock_gettime(CLOCK_MONOTONIC);
$lock->release;
