local H = require("helper")
local redmutex = require("redmutex")

-- A redis+sentinel:// URL works unchanged: a real Sentinel deployment (1 master,
-- 2 replicas, 3 sentinels) from tests/rmsentinel.py, started in the background.
local function spec_dir()
  return debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
end

describe("a sentinel URL", function()
  it("takes the lock on the master the sentinels name", function()
    local helper = spec_dir() .. "/../../../tests/rmsentinel.py"
    local url_file = H.dir .. "/sentinel.url"
    local p = io.popen(("python3 %s --url-file %s >/dev/null 2>&1 & echo $!"):format(H.sh_quote(helper),
      H.sh_quote(url_file)))
    local pid = p:read("l")
    p:close()
    H.wait_until(60, "the Sentinel deployment", function()
      local f = io.open(url_file)
      if f then f:close() end
      return f ~= nil
    end)
    local f = assert(io.open(url_file))
    local text = f:read("a")
    f:close()
    local url, master = text:match("URL (%S+)"), text:match("MASTER (%d+)")
    local ok, err = pcall(function()
      local client = redmutex.Client(url)
      local lock = client:lock("lua:sentinel")
      assert.is_true(lock:acquire(0))
      local out = io.popen("redis-cli -p " .. master .. " EXISTS lua:sentinel"):read("a")
      assert.are.equal("1", (out:gsub("\n$", "")))
      lock:release()
      client:close()
      local bad = redmutex.Client(url .. "?sentinel_password=hunter22", { command_timeout = 0.5 })
      local failed, msg = pcall(function() return bad:lock("lua:sentinel"):acquire(0) end)
      assert.is_false(failed)
      assert.is_nil(tostring(msg):find("hunter22"))
    end)
    os.execute("kill -TERM " .. pid)
    assert(ok, err)
  end)
end)
