local H = require("helper")

-- Objects that cannot be made on their own, and methods called on something
-- that is not a live object of their class (nil, a collected object), raise
-- InvalidArgument; nothing crashes. Each case runs in a child lua5.4, so that
-- a crash fails the case, not the suite.
local function dies_cleanly(code)
  local status, out = H.run_lua([[
    local native = require("redmutex_native")
    local client = require("redmutex").Client(arg[1])
    local ok, err = pcall(function() ]] .. code .. [[ end)
    print(ok and "survived" or tostring(err))
  ]], H.url)
  return status, out
end

describe("objects that are not live", function()
  local cases = {
    { "Lock() cannot make a lock", "native.Lock()", "made by a client" },
    { "Guard() cannot make a guard", "native.Guard()", "made by a lock" },
    { "a Lock method on nil", "client:lock('lua:self').name(nil)", "called on nothing" },
    { "a Client method on nil", "client.close(nil)", "called on nothing" },
    { "a Guard method on nil", "client:lock('lua:self'):guard().release(nil)", "called on nothing" },
    { "a lock collected by an explicit __gc", "local l = client:lock('lua:self'); getmetatable(l).__gc(l); l:name()",
      "freed" },
    { "a lock collected twice",
      "local l = client:lock('lua:self'); getmetatable(l).__gc(l); getmetatable(l).__gc(l); l:name()", "freed" },
    { "with on a collected lock",
      "local l = client:lock('lua:self'); getmetatable(l).__gc(l); l:with(function() end)", "freed" },
    { "a collected client", "local c = native.Client(arg[1]); getmetatable(c).__gc(c); c:lock('x')", "freed" },
    { "a collected guard", "local g = client:lock('lua:self'):guard(); getmetatable(g).__gc(g); g:held()", "freed" },
  }
  it("a Lock method on a Client: SWIG's own type check refuses it", function()
    local status, out = dies_cleanly("client:lock('lua:self').name(client)")
    assert.are.equal(0, status, out)
    assert.truthy(out:find("Error in Lock_name (arg 1)", 1, true), out)
  end)

  for _, case in ipairs(cases) do
    it(case[1], function()
      local status, out = dies_cleanly(case[2])
      assert.are.equal(0, status, out)
      assert.truthy(out:find("redmutex.InvalidArgument", 1, true), out)
      assert.truthy(out:find(case[3], 1, true), out)
    end)
  end
end)
