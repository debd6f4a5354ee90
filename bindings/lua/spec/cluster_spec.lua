-- The same redmutex.Client on a Redis Cluster's seed list: each name goes to
-- the master of its hash slot. The cluster comes from tests/rmcluster.py
-- (3 masters), driven over a FIFO (requests) and a pipe (answers).
local H = require("helper")
local redmutex = require("redmutex")

local rmcluster = debug.getinfo(1, "S").source:match("^@(.*)/spec/[^/]+$") .. "/../../tests/rmcluster.py"

describe("a client on a cluster URL", function()
  it("takes each lock on its name's master", function()
    local fifo = H.dir .. "/cluster.fifo"
    assert(os.execute("mkfifo " .. H.sh_quote(fifo)))
    local answers = io.popen("python3 " .. H.sh_quote(rmcluster) .. " serve < " .. H.sh_quote(fifo))
    local requests = assert(io.open(fifo, "w"))
    local first = answers:read("l")
    assert.are.equal("URL ", first:sub(1, 4))
    local function ask(request)
      requests:write(request, "\n")
      requests:flush()
      return answers:read("l")
    end
    local client = redmutex.Client(first:sub(5))
    local owners, n = {}, 0
    for k = 0, 5 do
      local name = "lua:cluster:" .. k
      client:lock(name):with(function()
        assert.are.equal("1", ask("exists " .. name))
        local owner = ask("owner " .. name)
        if not owners[owner] then
          owners[owner] = true
          n = n + 1
        end
      end)
      assert.are.equal("0", ask("exists " .. name))
    end
    assert.is_true(n >= 2, "the names all landed on one master")
    client:close()
    requests:close()
    answers:close()
    os.remove(fifo)
  end)
end)
