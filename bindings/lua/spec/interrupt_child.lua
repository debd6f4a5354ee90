-- Child of interrupt_spec: holds lua:int:outer and waits for lua:int:busy.
local redmutex = require("redmutex")
local client = redmutex.Client(arg[1], { wait_backoff_cap = 30 })
client:lock("lua:int:outer"):with(function()
  io.write("holding\n")
  io.flush()
  client:lock("lua:int:busy"):acquire()
  io.write("acquired\n")
end)
