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

proc stop_redis {} {
    catch {exec kill $::testredis::server}
    catch {file delete -force $::testredis::dir}
}

wait_until 10 "redis-server to start" {[file exists $::testredis::socket] && ![catch {cli PING} pong] && $pong eq "PONG"}
