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
  VERSION = "1.1.0",
}

-- on_lost handlers: lock -> function (an ephemeron: the handler may refer to
-- its lock without keeping it alive), and id -> lock for the news.
local handlers = setmetatable({}, { __mode = "k" })
local by_id = setmetatable({}, { __mode = "v" })

--- fn(lock, state, owner) is called by redmutex.dispatch_events(client) when
-- a hold of lock turns "renewal_failing" or "lost" (or "held" again); Lua
-- code never runs on the library's watchdog thread. lock:lost() asks without
-- a callback. Returns lock.
function M.on_lost(lock, fn)
  handlers[lock] = fn
  by_id[lock:id()] = lock
  return lock
end

--- Runs the on_lost handlers of the client's locks for the news queued so
-- far; returns how many events there were. Never blocks. client:event_fd()
-- is readable while news is queued, for an event loop (luaposix, cqueues...).
function M.dispatch_events(client)
  local count = 0
  while true do
    local id, state, owner = client:next_event()
    if id == nil then
      return count
    end
    count = count + 1
    local lock = by_id[id]
    local fn = lock and handlers[lock]
    if fn then
      fn(lock, state, owner)
    end
  end
end

--- True when err is a redmutex error of class `name` or a class derived
-- from it (LockLostError is a NotOwnedError; all are an Error); any redmutex
-- error when name is nil.
function M.is(err, name)
  local mt = getmetatable(err)
  if type(err) ~= "table" or mt == nil or mt.__name ~= "redmutex.Error" then
    return false
  end
  local class = err.name
  while class ~= nil do
    if name == nil or class == name then
      return true
    end
    class = native.error_parents[class]
  end
  return false
end

return M
