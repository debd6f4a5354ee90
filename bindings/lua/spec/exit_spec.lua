local H = require("helper")

-- A script that ends without closing its client releases the locks it still
-- holds, however it ends: the end of the script, an error, os.exit with or
-- without closing the state. Only leave_locks_on_close keeps them.
local function run_holder(body, options)
  H.cli("FLUSHALL")
  local status, out, seconds = H.run_lua(([[
    local redmutex = require("redmutex")
    local client = redmutex.Client(arg[1], %s)
    %s
  ]]):format(options or "{}", body), H.url)
  return status, out, H.cli("EXISTS", "lua:exit"), seconds
end

describe("a script that exits holding locks", function()
  local cases = {
    { "the end of the script", "client:lock('lua:exit', {lease = 60}):acquire(); print('held')", 0 },
    { "an error", "client:rlock('lua:exit'):acquire(); print('held'); error('boom')", 1 },
    { "os.exit(3)", "client:fair_lock('lua:exit'):acquire(); print('held'); os.exit(3)", 3 },
    { "os.exit(0, true)", "client:lock('lua:exit', {lease = 60}):acquire(); print('held'); os.exit(0, true)", 0 },
    { "a lock collected while it held",
      "client:lock('lua:exit', {lease = 60}):acquire(); collectgarbage(); collectgarbage(); print('held')", 0 },
    { "a guard left open", "guard = client:write_lock('lua:exit'):guard(); print('held'); os.exit(0)", 0 },
  }
  for _, case in ipairs(cases) do
    it("releases them: " .. case[1], function()
      local status, out, exists, seconds = run_holder(case[2])
      assert.are.equal(case[3], status, out)
      assert.truthy(out:find("^held\n"), out)
      assert.are.equal("0", exists, "released by the time the script has exited")
      assert.is_true(seconds < 10, "the exit did not hang: " .. seconds)
    end)
  end

  it("leaves them to expire with leave_locks_on_close", function()
    local status, out, exists = run_holder("client:lock('lua:exit', {lease = 60}):acquire(); print('held')",
      "{leave_locks_on_close = true}")
    assert.are.same({ 0, "held\n", "1" }, { status, out, exists })
    assert.is_true(tonumber(H.cli("PTTL", "lua:exit")) > 50000)
  end)
end)
