-- Uncontended pairs per second of lock:with(function() end): lua5.4 pair.lua URL SECONDS
local redmutex = require("redmutex")
local clock = require("system").monotime
local url, seconds = arg[1], tonumber(arg[2])
local lock = redmutex.Client(url):lock("bench:lua")
local empty = function() end
for _ = 1, 200 do lock:with(empty) end
local n, start, now = 0, clock(), nil
repeat
  for _ = 1, 100 do lock:with(empty) end
  n = n + 100
  now = clock()
until now - start >= seconds
print(n / (now - start))
