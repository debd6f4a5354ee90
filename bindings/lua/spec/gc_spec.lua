local H = require("helper")
local redmutex = require("redmutex")

-- Objects may be collected in any order; a lock keeps its client usable;
-- collection never blocks, also when the state closes with locks held.
describe("garbage collection", function()
  it("leaves a lock usable after its client is collected", function()
    H.cli("FLUSHALL")
    local lock = redmutex.Client(H.url):lock("lua:orphan")
    collectgarbage("collect")
    collectgarbage("collect")
    assert.are.equal(3, lock:with(function() return 3 end))
    assert.are.equal("0", H.cli("EXISTS", "lua:orphan"))
  end)

  it("collects clients and held locks in any order without waiting", function()
    H.cli("FLUSHALL")
    local start = H.now()
    for i = 1, 30 do
      local client = redmutex.Client(H.url, { shutdown_timeout = 5 })
      local locks = {}
      for k = 1, 3 do
        locks[k] = client:lock(("lua:gc:%d:%d"):format(i, k), { lease = 30 })
        locks[k]:acquire()
      end
      client = nil
      if i % 2 == 0 then collectgarbage("collect") end
      locks = nil
      if i % 3 == 0 then collectgarbage("collect") end
    end
    collectgarbage("collect")
    assert.is_true(H.now() - start < 10)
  end)

  it("survives a program that closes its Lua state while the client closes in the background", function()
    H.cli("FLUSHALL")
    local program = assert(os.getenv("REDMUTEX_LUA_EMBED"), "REDMUTEX_LUA_EMBED names the embed_unload program")
    local p = io.popen(("LUA_PATH=%s LUA_CPATH=%s %s %s 2>&1"):format(H.sh_quote(package.path),
      H.sh_quote(package.cpath), H.sh_quote(program), H.sh_quote(H.url)))
    local out = p:read("a")
    local ok, how, code = p:close()
    assert.are.same({ "ok\n", true, "exit", 0 }, { out, ok, how, code })
    H.wait_until(5, "the background close to release the locks", function()
      return H.cli("KEYS", "lua:unload:*") == ""
    end)
  end)

  it("closes a state holding locks without hanging", function()
    local start = H.now()
    local code = [[
      local redmutex = require("redmutex")
      local c = redmutex.Client(arg[1])
      locks = {}
      for k = 1, 3 do locks[k] = c:lock("lua:gd:" .. k); locks[k]:acquire() end
      guard = c:lock("lua:gd:g"):guard()
      print("ok")
    ]]
    local script = H.dir .. "/gd.lua"
    local f = assert(io.open(script, "w"))
    f:write(code)
    f:close()
    local p = io.popen(("LUA_PATH=%s LUA_CPATH=%s lua5.4 %s %s"):format(H.sh_quote(package.path),
      H.sh_quote(package.cpath), H.sh_quote(script), H.sh_quote(H.url)))
    local out = p:read("a")
    local ok = p:close()
    assert.are.equal("ok\n", out)
    assert.is_true(ok)
    assert.is_true(H.now() - start < 10)
  end)
end)
