# A private redis-server for the Tcl binding's tests: Debian's binary on a
# Unix socket in a temporary directory, no persistence, stopped on exit.
# Tests look at the server with redis-cli.
package require tcltest
package require redmutex
namespace import ::tcltest::*

namespace eval ::testredis {
    variable dir [file join [expr {[info exists ::env(TMPDIR)] ? $::env(TMPDIR) : "/tmp"}] \
                      redmutex-tcl-[pid]-[clock clicks]]
    variable socket [file join $dir redis.sock]
    file mkdir $dir
    variable children 0
    variable server [exec redis-server --port 0 --unixsocket $socket --save "" --appendonly no \
                         --dir $dir --logfile [file join $dir redis.log] &]
}

proc now {} { expr {[clock milliseconds] / 1000.0} }

proc cli {args} {
    return [exec redis-cli -s $::testredis::socket {*}$args 2>/dev/null]
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

proc stop_redis {} {
    catch {exec kill $::testredis::server}
    catch {file delete -force $::testredis::dir}
}

wait_until 10 "redis-server to start" {[file exists $::testredis::socket] && ![catch {cli PING} pong] && $pong eq "PONG"}
