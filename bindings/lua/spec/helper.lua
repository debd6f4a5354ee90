--- A private redis-server for the Lua binding's specs: Debian's binary on a
-- Unix socket in a temporary directory, no persistence, stopped at exit.
-- Specs look at the server with redis-cli.
local system = require("system")

local H = {}

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir))
H.socket = dir .. "/redis.sock"
H.url = "unix://" .. H.socket

local function sh_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
H.sh_quote = sh_quote

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
  local p = io.popen("redis-cli -s " .. sh_quote(H.socket) .. " " .. table.concat(args, " ") .. " 2>/dev/null")
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
local pidfile = dir .. "/redis.pid"
assert(os.execute(("redis-server --port 0 --unixsocket %s --save '' --appendonly no --dir %s"
  .. " --logfile %s/redis.log --pidfile %s --daemonize yes"):format(sh_quote(H.socket), sh_quote(dir), sh_quote(dir),
  sh_quote(pidfile))))
H.wait_until(10, "redis-server to start", function()
  return H.cli("PING") == "PONG"
end)

function H.stop()
  H.cli("SHUTDOWN", "NOSAVE")
  os.execute("rm -rf " .. sh_quote(dir))
end
-- Stopped when the Lua state closes (busted exits with os.exit(code, true)).
H.stopper = setmetatable({}, { __gc = H.stop })

return H
