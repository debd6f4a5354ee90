--- redmutex for Lua 5.4: distributed locks for Redis.
--
--   local redmutex = require("redmutex")
--   local client = redmutex.Client("redis://127.0.0.1:6379/0")
--   local lock = client:lock("jobs:nightly", {timeout = 10})
--   lock:with(function() run_nightly_job() end)
--   do
--     local held <close> = lock:guard()   -- released at the end of the block
--   end
--
-- Errors are tables {code = -3, name = "LockTimeout", message = "..."};
-- redmutex.is(err, "LockTimeout") tells them apart.
-- Client, Lock, Guard and their methods come from the generated module
-- (redmutex_native, from bindings/redmutex.i); this file adds what is plain Lua.
local native = require("redmutex_native")

local M = {
  Client = native.Client,
  VERSION = "1.0.0",
}

--- True when err is a redmutex error (of class `name`, when given).
function M.is(err, name)
  local mt = getmetatable(err)
  return type(err) == "table" and mt ~= nil and mt.__name == "redmutex.Error"
    and (name == nil or err.name == name or (name == "Error"))
end

return M
