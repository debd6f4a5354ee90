--- The error classes are the table that redmutex.h, bindings/common/errors.c and the Python
-- package agree on (tests/errortable.py), and a raised error carries its class's code.
local H = require("helper")
local redmutex = require("redmutex")
local native = require("redmutex_native")

local function table_rows()
  local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
  local p = assert(io.popen("python3 " .. H.sh_quote(here .. "/../../../tests/errortable.py") .. " --list"))
  local rows = {}
  for line in p:lines() do
    local name, parent, tag, code = line:match("^(%S+) (%S+) (%S+) (%S+)$")
    rows[#rows + 1] = { name = name, parent = parent, tag = tag, code = tonumber(code) }
  end
  p:close()
  return rows
end

describe("error classes", function()
  local rows = table_rows()

  it("match the C codes and the Python classes", function()
    assert.is_true(#rows > 1, "tests/errortable.py --list printed the table")
    local want = {}
    for _, r in ipairs(rows) do
      if r.parent ~= "-" then
        want[r.name] = r.parent
      end
    end
    assert.are.same(want, native.error_parents)
  end)

  it("give a raised error the code of its class", function()
    local code = {}
    for _, r in ipairs(rows) do
      code[r.name] = r.code
    end
    local client = redmutex.Client(H.url)
    local raised = {}
    raised[1] = select(2, pcall(client.lock, client, ""))
    raised[2] = select(2, pcall(function() client:lock("lua:errors"):release() end))
    client:close()
    raised[3] = select(2, pcall(client.lock, client, "lua:errors"))
    for i, name in ipairs({ "InvalidArgument", "NotOwnedError", "ClosedError" }) do
      assert.is_true(redmutex.is(raised[i], name), tostring(raised[i]))
      assert.are.equal(code[raised[i].name], raised[i].code)
    end
  end)
end)
