# Prints the directory of Tcl's auto_path where a locally installed package belongs.
foreach dir $auto_path {
    if {[string match /usr/local/* $dir]} {
        puts $dir
        exit
    }
}
puts [lindex $auto_path 0]
