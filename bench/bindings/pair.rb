# Uncontended pairs per second of lock.synchronize {}: ruby pair.rb URL SECONDS
require "redmutex"
url, seconds = ARGV[0], Float(ARGV[1])
lock = Redmutex::Client.new(url).lock("bench:ruby")
200.times { lock.synchronize {} }
clock = Process::CLOCK_MONOTONIC
n = 0
start = Process.clock_gettime(clock)
loop do
  100.times { lock.synchronize {} }
  n += 100
  break if Process.clock_gettime(clock) - start >= seconds
end
puts n / (Process.clock_gettime(clock) - start)
