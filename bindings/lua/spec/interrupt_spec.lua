local H = require("helper")

-- Ctrl-C (SIGINT) during a wait, in a child lua5.4: the wait ends at once,
-- lock:with around it releases, nothing is left on the server.
describe("SIGINT during a wait", function()
  it("ends the wait promptly with nothing held", function()
    H.cli("FLUSHALL")
    H.cli("SET", "lua:int:busy", "someone-else")
    local child = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") .. "/interrupt_child.lua"
    local out = H.dir .. "/child.out"
    local pidfile = H.dir .. "/child.pid"
    -- The child writes its stdout and stderr to a file; the shell tells its pid.
    -- (env --default-signal: a shell started in the background hands its
    -- children SIGINT ignored, and an ignored SIGINT must stay ignored)
    local cmd = ("LUA_PATH=%s LUA_CPATH=%s exec env --default-signal=INT lua5.4 %s %s >%s 2>&1 & echo $! >%s"):format(
      H.sh_quote(package.path), H.sh_quote(package.cpath), H.sh_quote(child), H.sh_quote(H.url), H.sh_quote(out),
      H.sh_quote(pidfile))
    assert(os.execute(cmd))
    local pid = io.open(pidfile):read("n")
    local function output()
      local f = io.open(out)
      local text = f and f:read("a") or ""
      if f then f:close() end
      return text
    end
    H.wait_until(10, "the child to hold the outer lock", function() return output():find("holding") end)
    H.wait_for_waiter("lua:int:busy")
    assert.are.equal("1", H.cli("EXISTS", "lua:int:outer"))
    local start = H.now()
    os.execute("kill -INT " .. pid)
    H.wait_until(10, "the child to exit", function() return not os.execute("kill -0 " .. pid .. " 2>/dev/null") end)
    local elapsed = H.now() - start
    assert.is_true(elapsed < 5, "exited promptly, not after the 30 s backoff: " .. elapsed)
    local text = output()
    assert.is_nil(text:find("acquired"))
    assert.truthy(text:find("interrupted"), text)
    assert.are.equal("0", H.cli("EXISTS", "lua:int:outer"), "lock:with released on the way out")
    assert.are.equal("someone-else", H.cli("GET", "lua:int:busy"))
  end)

  it("ends the wait holding nothing even as the lock is handed over", function()
    H.cli("FLUSHALL")
    H.cli("SET", "lua:int:busy", "someone-else")
    -- lua.c's Ctrl-C hook raises "interrupted!" at the next Lua instruction;
    -- the outer pcall catches it, so that the child can report what it holds.
    local child = [[
      local redmutex = require("redmutex")
      local client = redmutex.Client(arg[1], { wait_backoff_cap = 30 })
      local outer, busy = client:lock("lua:int:outer"), client:lock("lua:int:busy")
      local inner
      local _, hooked = pcall(function()
        local _, err = pcall(outer.with, outer, function()
          io.write("waiting\n")
          io.flush()
          busy:acquire(20)
        end)
        inner = err
        for _ = 1, 10 do end
      end)
      print(("error=%s owned=%s outer=%s"):format(tostring(inner or hooked), busy:owned(), outer:locked()))
    ]]
    local out = H.dir .. "/handover.out"
    local pidfile = H.dir .. "/handover.pid"
    assert(os.execute(("%s >%s 2>&1 & echo $! >%s"):format(H.child_command(child, H.url), H.sh_quote(out),
      H.sh_quote(pidfile))))
    local pid = io.open(pidfile):read("n")
    local function output()
      local f = io.open(out)
      local text = f and f:read("a") or ""
      if f then f:close() end
      return text
    end
    H.wait_until(10, "the child to wait", function() return output():find("waiting") end)
    H.wait_for_waiter("lua:int:busy")
    os.execute("kill -INT " .. pid)
    H.cli("DEL", "lua:int:busy") -- freed at the same moment: it must not stay held
    H.cli("PUBLISH", "redisson_lock__channel:{lua:int:busy}", "0")
    H.wait_until(20, "the child's report", function() return output():find("error=") end)
    local text = output()
    assert.truthy(text:find("error=[^\n]*interrupted"), text)
    assert.truthy(text:find("owned=false outer=false", 1, true), text)
  end)
end)
