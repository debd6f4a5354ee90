# Child of interrupt.test: holds tcl:int:outer and waits for tcl:int:busy.
package require redmutex
set client [redmutex::client [lindex $argv 0] -wait_backoff_cap 30]
set outer [$client lock tcl:int:outer]
set busy [$client lock tcl:int:busy]
if {[catch {
    redmutex::with_lock $outer {
        puts holding
        flush stdout
        $busy acquire
        puts acquired
    }
} msg opts]} {
    puts "$msg [dict get $opts -errorcode]"
    exit 1
}
