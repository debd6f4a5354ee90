# A private redis-server for the Tcl binding's tests, from tests/rmserver.py
# (the helper every suite shares; CONTRIBUTING.md, "Test servers"): the binary
# of $REDMUTEX_TEST_SERVER or Debian's, on a Unix socket in a temporary
# directory, no persistence. The helper stops it when this process closes its
# end of the pipe (stop_redis), however the process ends. No server binary
# fails the suite, never skips it. Tests look at the server with redis-cli.
package require tcltest
package require redmutex
namespace import ::tcltest::*

namespace eval ::testredis {
    variable rmserver [file normalize [file join [file dirname [info script]] .. .. .. tests rmserver.py]]
    variable children 0
    variable pipe [open |[list python3 $rmserver serve --unix 2>@stderr] r]
    if {[gets $pipe line] < 0} { error "tests/rmserver.py started no server (its message is above)" }
    variable info {}
    foreach pair [split $line " "] {
        set eq [string first = $pair]
        dict set info [string range $pair 0 $eq-1] [string range $pair $eq+1 end]
    }
    variable dir [dict get $info dir]
    variable socket [dict get $info socket]
    variable cli [dict get $info cli]
}

proc now {} { expr {[clock milliseconds] / 1000.0} }

proc cli {args} {
    return [exec $::testredis::cli -s $::testredis::socket {*}$args 2>/dev/null]
}

proc url {} { return unix://$::testredis::socket }

# The library's log messages (a lock lost on purpose...) would go to stderr,
# which tcltest counts as a failing test file: the tests keep them.
namespace eval ::redmutex {}
proc ::redmutex::log {level message} { lappend ::redmutex_logged $level $message }

# Waits until the script is true in the caller's scope; errors after seconds.
proc wait_until {seconds what script} {
    set deadline [expr {[now] + $seconds}]
    while {![uplevel 1 [list expr $script]]} {
        if {[now] > $deadline} { error "timed out waiting for $what" }
        after 10
    }
}

# Commands the server ran since CONFIG RESETSTAT, apart from CONFIG and INFO.
proc commands_since_reset {} {
    set names {}
    foreach line [split [cli INFO commandstats] \n] {
        if {[regexp {^cmdstat_([^:]+):} $line -> name] && ![string match config* $name] && $name ne "info"} {
            lappend names $name
        }
    }
    return $names
}

# Waits until a client waits for lock name (it subscribed to the lock's channel).
proc wait_for_waiter {name} {
    wait_until 10 "a waiter on $name" {[lindex [cli PUBSUB NUMSUB "redisson_lock__channel:{$name}"] end] > 0}
}

# Frees the plain lock name as another holder's release would: DEL and the release message.
proc hand_over {name} {
    cli DEL $name
    cli PUBLISH "redisson_lock__channel:{$name}" 0
}

# Writes script to a file of its own and returns the command line of a child tclsh running it
# with args. SIGINT is put back to its default (a shell started in the background hands its
# children SIGINT ignored); every other signal a test sends, the child handles itself.
proc child_command {script args} {
    set file [file join $::testredis::dir child-[incr ::testredis::children].tcl]
    set f [open $file w]
    puts $f $script
    close $f
    return [list env --default-signal=INT [info nameofexecutable] $file {*}$args]
}

# Runs a child tclsh to its end: {exit-status output seconds}; the status is "killed SIGNAME"
# when a signal ended it. stderr goes to the output too.
proc run_tcl {script args} {
    set start [now]
    set failed [catch {exec {*}[child_command $script {*}$args] 2>@1} out opts]
    set status 0
    if {$failed} {
        set code [dict get $opts -errorcode]
        switch [lindex $code 0] {
            CHILDSTATUS {
                set status [lindex $code 2]
                regsub {\n?child process exited abnormally$} $out "" out
            }
            CHILDKILLED { set status "killed [lindex $code 2]" }
            default { set status "failed: $code" }
        }
    }
    return [list $status $out [expr {[now] - $start}]]
}

# A child tclsh whose output is read line by line (a non-blocking channel, stderr in it too).
proc spawn_tcl {script args} {
    set chan [open |[list {*}[child_command $script {*}$args] 2>@1] r]
    fconfigure $chan -blocking 0 -buffering line
    return $chan
}

# Reads chan until a line matches the regexp pattern; errors after seconds. Returns the line.
proc expect_line {chan pattern {seconds 10}} {
    set deadline [expr {[now] + $seconds}]
    while 1 {
        if {[gets $chan line] >= 0} {
            if {[regexp -- $pattern $line]} { return $line }
            continue
        }
        if {[eof $chan]} { error "the child closed its output before a line like $pattern" }
        if {[now] > $deadline} { error "timed out waiting for a line like $pattern" }
        after 10
    }
}

# Closing the pipe stops the server; close waits until the helper has removed it.
proc stop_redis {} {
    catch {close $::testredis::pipe}
}
