# Cross-language worker: tclsh worker.tcl URL NAME COUNTER_FILE ITERATIONS
package require redmutex
lassign $argv url name path n
set lock [[redmutex::client $url] lock $name]
for {set i 0} {$i < $n} {incr i} {
    redmutex::with_lock $lock {
        set f [open $path r]
        set value [string trim [read $f]]
        close $f
        set f [open $path w]
        puts -nonewline $f [expr {($value eq "" ? 0 : $value) + 1}]
        close $f
    }
}
