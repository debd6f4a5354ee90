local H = require("helper")
local redmutex = require("redmutex")

-- client:stats() is the C core's snapshot; the library's log messages go to
-- redmutex.on_log(level, message) if set, else to stderr.
describe("statistics", function()
  it("count N acquisitions and N holds", function()
    H.cli("FLUSHALL")
    local client = redmutex.Client(H.url)
    local lock = client:lock("lua:stats")
    for _ = 1, 3 do
      lock:with(function() end)
    end
    local s = client:stats()
    assert.are.equal(3, s["acquire_wait_seconds.lock.acquired.count"])
    assert.are.equal(3, s["hold_seconds.lock.count"])
    assert.are.equal(0, s["locks_held"])
    client:close()
  end)

  it("log an unreachable server through redmutex.on_log", function()
    local logged = {}
    redmutex.on_log = function(level, message) logged[#logged + 1] = { level, message } end
    local dead = redmutex.Client("redis://127.0.0.1:1")
    assert.is_false(pcall(function() dead:lock("lua:dead"):acquire() end))
    redmutex.on_log = nil
    assert.are.equal("WARNING", logged[1][1])
    assert.truthy(logged[1][2]:find("redis://127.0.0.1:1/0 is unreachable", 1, true))
    assert.are.equal(1, dead:stats()["servers[redis://127.0.0.1:1/0].errors.connection"])
    dead:close()
  end)
end)
