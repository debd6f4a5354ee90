# Uncontended pairs per second of redmutex::with_lock $lock {}: tclsh pair.tcl URL SECONDS
package require redmutex
lassign $argv url seconds
set lock [[redmutex::client $url] lock bench:tcl]
proc pairs {lock count} {
    for {set i 0} {$i < $count} {incr i} { redmutex::with_lock $lock {} }
}
pairs $lock 200
set n 0
set start [clock microseconds]
while {1} {
    pairs $lock 100
    incr n 100
    set now [clock microseconds]
    if {$now - $start >= $seconds * 1e6} break
}
puts [expr {$n / (($now - $start) / 1e6)}]
