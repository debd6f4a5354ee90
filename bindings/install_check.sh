#!/bin/sh
# Checks that `cmake --install` puts each language module where that language
# finds it: the install directories are on the interpreter's own default
# search path, and a staged install (DESTDIR) loads and works from there.
#   install_check.sh BUILD_DIR LANGUAGE...
set -eu
build=$1
shift
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
DESTDIR=$stage cmake --install "$build" >/dev/null
raw_setting() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
# An install directory as an absolute path (relative ones are under the prefix).
setting() {
  case $(raw_setting "$1") in
  /*) raw_setting "$1" ;;
  *) echo "$(raw_setting CMAKE_INSTALL_PREFIX)/$(raw_setting "$1")" ;;
  esac
}
fail() {
  echo "install check: $*" >&2
  exit 1
}
# No server is contacted: making a client and a lock sends nothing.
url=redis://127.0.0.1:1

for lang in "$@"; do
  case $lang in
  ruby)
    arch=$(setting REDMUTEX_RUBY_ARCHDIR) lib=$(setting REDMUTEX_RUBY_LIBDIR)
    ruby -e 'exit(ARGV.all? { |d| $LOAD_PATH.include?(d) })' "$arch" "$lib" ||
      fail "$arch or $lib is not on Ruby's \$LOAD_PATH"
    ruby -I"$stage$arch" -I"$stage$lib" -e '
      require "redmutex"
      lock = Redmutex::Client.new(ARGV[0]).lock("x")
      exit(lock.name == "x" && $LOADED_FEATURES.grep(/redmutex_native/).first.start_with?(ARGV[1]))' \
      "$url" "$stage" || fail "the staged Ruby module does not load"
    ;;
  perl)
    arch=$(setting REDMUTEX_PERL_ARCHDIR)
    perl -e 'exit !grep { $_ eq $ARGV[0] } @INC' "$arch" || fail "$arch is not in Perl's @INC"
    perl -I"$stage$arch" -e '
      use Redmutex qw(with_lock);
      my $lock = Redmutex::Client->new($ARGV[0])->lock("x");
      exit !($lock->name eq "x" && $INC{"Redmutex.pm"} =~ /^\Q$ARGV[1]\E/)' \
      "$url" "$stage" || fail "the staged Perl module does not load"
    ;;
  tcl)
    parent=$(dirname "$(setting REDMUTEX_TCL_DIR)")
    cat >"$stage/check.tcl" <<'TCL'
lassign $argv parent url stage
if {$stage eq ""} { exit [expr {[lsearch -exact $auto_path $parent] < 0}] }
package require redmutex
set lock [[redmutex::client $url] lock x]
exit [expr {[$lock name] ne "x" || ![string match *$stage* [package ifneeded redmutex [package provide redmutex]]]}]
TCL
    tclsh "$stage/check.tcl" "$parent" || fail "$parent is not on Tcl's auto_path"
    TCLLIBPATH=$stage$parent tclsh "$stage/check.tcl" "$parent" "$url" "$stage" ||
      fail "the staged Tcl package does not load"
    ;;
  lua)
    cdir=$(setting REDMUTEX_LUA_CDIR) ldir=$(setting REDMUTEX_LUA_LDIR)
    cat >"$stage/check.lua" <<'LUA'
local cdir, ldir, url = ...
if not url then
  os.exit(package.cpath:find(cdir .. "/?.so", 1, true) ~= nil and package.path:find(ldir .. "/?.lua", 1, true) ~= nil)
end
os.exit(require("redmutex").Client(url):lock("x"):name() == "x")
LUA
    lua5.4 "$stage/check.lua" "$cdir" "$ldir" || fail "$cdir or $ldir is not on Lua's package.cpath or package.path"
    LUA_CPATH="$stage$cdir/?.so" LUA_PATH="$stage$ldir/?.lua" lua5.4 "$stage/check.lua" "$cdir" "$ldir" "$url" ||
      fail "the staged Lua module does not load"
    ;;
  *) fail "unknown language $lang" ;;
  esac
  echo "install check: $lang ok"
done
