# Cross-language worker: ruby worker.rb URL NAME COUNTER_FILE ITERATIONS
require "redmutex"
url, name, path, n = ARGV
lock = Redmutex::Client.new(url).lock(name)
Integer(n).times do
  lock.synchronize { File.write(path, (File.read(path).to_i + 1).to_s) }
end
