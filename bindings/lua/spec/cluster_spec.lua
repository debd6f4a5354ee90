-- The same redmutex.Client on a Redis Cluster's seed list: each name goes to
-- the master of its hash slot. The cluster (3 masters) comes from
-- tests/rmserver.py serve --cluster; redis-cli on each master tells where a
-- key is.
local H = require("helper")
local redmutex = require("redmutex")

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local rmserver = here .. "/../../../tests/rmserver.py"

describe("a client on a cluster URL", function()
  it("takes each lock on its name's master", function()
    local cluster = assert(io.popen("exec python3 " .. H.sh_quote(rmserver) .. " serve --cluster 3:0"))
    local line = assert(cluster:read("l"), "tests/rmserver.py started no cluster (its message is above)")
    local info = {}
    for key, value in line:gmatch("(%S-)=(%S*)") do
      info[key] = value
    end
    -- The masters that hold key name (one while it is held, none once released).
    local function holders(name)
      local held = {}
      for port in info.ports:gmatch("%d+") do
        local p = io.popen(H.sh_quote(info.cli) .. " -p " .. port .. " EXISTS " .. H.sh_quote(name) .. " 2>/dev/null")
        local answer = p:read("a")
        p:close()
        if answer:match("^%s*1%s*$") then
          held[#held + 1] = port
        end
      end
      return held
    end
    local client = redmutex.Client(info.url)
    local owners, n = {}, 0
    for k = 0, 5 do
      local name = "lua:cluster:" .. k
      client:lock(name):with(function()
        local held = holders(name)
        assert.are.equal(1, #held)
        if not owners[held[1]] then
          owners[held[1]] = true
          n = n + 1
        end
      end)
      assert.are.equal(0, #holders(name))
    end
    assert.is_true(n >= 2, "the names all landed on one master")
    client:close()
    cluster:close()
  end)
end)
