-- Cross-language worker: lua5.4 worker.lua URL NAME COUNTER_FILE ITERATIONS
local redmutex = require("redmutex")
local url, name, path, n = table.unpack(arg)
local lock = redmutex.Client(url):lock(name)
for _ = 1, tonumber(n) do
  lock:with(function()
    local f = assert(io.open(path))
    local value = tonumber(f:read("a")) or 0
    f:close()
    f = assert(io.open(path, "w"))
    f:write(tostring(value + 1))
    f:close()
  end)
end
