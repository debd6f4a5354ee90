# The Tcl idioms of redmutex, sourced after the generated module is loaded.
#
#   package require redmutex
#   set client [redmutex::Client -args redis://127.0.0.1:6379/0]
#   set lock [$client lock jobs:nightly -timeout 10]
#   redmutex::with_lock $lock { run_nightly_job }
#
# Errors are Tcl errors with -errorcode {REDMUTEX <TAG> <description>}, e.g.
# {REDMUTEX TIMEOUT {lock held by another owner}}: try ... trap {REDMUTEX TIMEOUT} ...

namespace eval ::redmutex {
    namespace export with_lock client on_lost
    # lock id -> {lock command}: the news handlers of redmutex::on_lost
    variable lost_handlers [dict create]
}

# redmutex::client url ?url ...? ?-option value ...?: a client object command.
proc ::redmutex::client {args} {
    set urls {}
    while {[llength $args] && ![string match -* [lindex $args 0]]} {
        set args [lassign $args url]
        lappend urls $url
    }
    return [::redmutex::Client -args $urls {*}$args]
}

# redmutex::with_lock lock ?-timeout seconds? script  (a C command of the module)
# Evaluates script in the caller's scope holding lock and returns its result
# (return, break and continue pass through, as with `if`). The lock is
# released however the script ends - try/finally - and the script's own
# error is what with_lock raises. A script that finished while the lease was
# lost raises {REDMUTEX LOST ...}; a wait that runs out {REDMUTEX TIMEOUT ...}.

# redmutex::on_lost lock command
# When a hold of lock turns renewal_failing or lost (or held again), the
# event loop (vwait, update, Tk) calls {*}command lock state owner at global
# level - in the interpreter's own thread, never on the library's watchdog
# thread. owner is "" for a plain lock's own hold. [$lock lost] asks without
# a callback.
proc ::redmutex::on_lost {lock command} {
    variable lost_handlers
    set id [$lock id]
    dict set lost_handlers $id [list $lock $command]
    $lock watch_events
    trace add command $lock delete [list ::redmutex::_forget $id]
    return
}

proc ::redmutex::_forget {id args} {
    variable lost_handlers
    dict unset lost_handlers $id
}

# Called by the event loop's handler of the client's event fd, once per event.
proc ::redmutex::_lost_event {id state owner} {
    variable lost_handlers
    if {[dict exists $lost_handlers $id]} {
        lassign [dict get $lost_handlers $id] lock command
        uplevel #0 [list {*}$command $lock $state $owner]
    }
}
