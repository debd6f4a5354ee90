--- A private redis-server for the Lua binding's specs, from tests/rmserver.py
-- (the helper every suite shares; CONTRIBUTING.md, "Test servers"): the binary
-- of $REDMUTEX_TEST_SERVER or Debian's, on a Unix socket in a temporary
-- directory, no persistence. The helper stops it when this process closes its
-- end of the pipe, however the process ends. No server binary fails the suite,
-- never skips it. Specs look at the server with redis-cli.
local system = require("system")

local H = {}

local function sh_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
H.sh_quote = sh_quote

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
if here:sub(1, 1) ~= "/" then
  here = os.getenv("PWD") .. "/" .. here
end
local server = assert(io.popen("exec python3 " .. sh_quote(here .. "/../../../tests/rmserver.py") .. " serve --unix"))
local line = assert(server:read("l"), "tests/rmserver.py started no server (its message is above)")
local info = {}
for key, value in line:gmatch("(%S+)=(%S*)") do
  info[key] = value
end
local dir = info.dir
H.socket = info.socket
H.url = "unix://" .. H.socket
local redis_cli = info.cli

function H.now()
  return system.monotime()
end

function H.sleep(seconds)
  system.sleep(seconds)
end

function H.cli(...)
  local args = {}
  for i, a in ipairs({ ... }) do
    args[i] = sh_quote(a)
  end
  local p = io.popen(sh_quote(redis_cli) .. " -s " .. sh_quote(H.socket) .. " " .. table.concat(args, " ") .. " 2>/dev/null")
  local out = p:read("a")
  p:close()
  return (out:gsub("\n$", ""))
end

--- Waits until cond() is true; errors after seconds.
function H.wait_until(seconds, what, cond)
  local deadline = H.now() + seconds
  while not cond() do
    if H.now() > deadline then
      error("timed out waiting for " .. what)
    end
    H.sleep(0.01)
  end
end

--- Commands the server ran since CONFIG RESETSTAT, apart from CONFIG and INFO.
function H.commands_since_reset()
  local names = {}
  for name in H.cli("INFO", "commandstats"):gmatch("cmdstat_([^:]+):") do
    if not name:match("^config") and name ~= "info" then
      names[#names + 1] = name
    end
  end
  return names
end

--- Waits until a client waits for lock name (it subscribed to the lock's channel).
function H.wait_for_waiter(name)
  H.wait_until(10, "a waiter on " .. name, function()
    local out = H.cli("PUBSUB", "NUMSUB", "redisson_lock__channel:{" .. name .. "}")
    return tonumber(out:match("(%d+)$")) > 0
  end)
end

H.dir = dir

local children = 0
--- Writes code to a script of its own and returns the shell command running it in a child
-- lua5.4 with the given arguments, this process's package paths, and SIGINT back at its
-- default (a shell started in the background hands its children SIGINT ignored); every other
-- signal a spec sends, the child handles itself.
function H.child_command(code, ...)
  children = children + 1
  local script = ("%s/child%d.lua"):format(dir, children)
  local f = assert(io.open(script, "w"))
  f:write(code)
  f:close()
  local args = {}
  for i, a in ipairs({ ... }) do
    args[i] = sh_quote(a)
  end
  return ("LUA_PATH=%s LUA_CPATH=%s exec env --default-signal=INT lua5.4 %s %s"):format(sh_quote(package.path),
    sh_quote(package.cpath), sh_quote(script), table.concat(args, " "))
end

--- Runs code in a child lua5.4 to its end: its exit status (or "killed <signal>"), its output
-- (stdout and stderr) and the seconds it took.
function H.run_lua(code, ...)
  local start = H.now()
  local p = io.popen(H.child_command(code, ...) .. " 2>&1")
  local out = p:read("a")
  local _, how, status = p:close()
  return how == "exit" and status or ("killed " .. status), out, H.now() - start
end
--- Closing the pipe stops the server; close waits until the helper has removed it.
function H.stop()
  if server then
    server:close()
    server = nil
  end
end
-- Stopped when the Lua state closes (busted exits with os.exit(code, true)).
H.stopper = setmetatable({}, { __gc = H.stop })

return H
