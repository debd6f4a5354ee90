# The Tcl binding's test suite (tcltest): tclsh tests/all.tcl, with TCLLIBPATH
# naming the directory of the built redmutex package. Exits 1 on failure.
package require tcltest
::tcltest::configure -testdir [file dirname [file normalize [info script]]] {*}$argv
if {[::tcltest::runAllTests]} {
    exit 1
}
