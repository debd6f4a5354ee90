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
    namespace export with_lock client
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

# redmutex::with_lock lock ?-timeout seconds? script
# Evaluates script in the caller's scope holding lock and returns its result
# (return, break and continue pass through). The lock is released however
# the script ends; the script's own error is what with_lock raises. A script
# that finished while the lease was lost raises {REDMUTEX LOST ...}.
proc ::redmutex::with_lock {lock args} {
    if {[llength $args] % 2 == 0} {
        return -code error -errorcode {REDMUTEX INVALID {invalid argument}} \
            "wrong # args: should be \"redmutex::with_lock lock ?-timeout seconds? script\""
    }
    set guard [$lock guard {*}[lrange $args 0 end-1]]
    set code [catch {uplevel 1 [lindex $args end]} result options]
    try {
        if {$code == 1} {
            catch {$guard release}
        } else {
            $guard release
        }
    } finally {
        rename $guard ""
    }
    dict incr options -level
    return -options $options $result
}
