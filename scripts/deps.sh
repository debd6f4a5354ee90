#!/usr/bin/env bash
# Installs what building and testing redmutex needs, if it is missing:
# Debian packages (compiler, CMake, hiredis, OpenSSL, redis-server, Python headers,
# CPython's test suite (its lock tests check the Python locks' threading contract),
# pytest and groff for the command-line tests, clang and its fuzzer runtime, clang-format,
# abigail-tools for the ABI check, valgrind, for the SWIG bindings swig with the
# Ruby, Perl, Tcl and Lua 5.4 headers and test runners (and Tclx, whose signal
# traps the Tcl tests use), and for the fault-injection harness libfaketime,
# stress-ng, nftables, iproute2 and util-linux's setpriv and taskset), and for the
# packaging stage (scripts/package.sh, tests/packages/run) debhelper, dh-python,
# python3-cffi (the Debian build's Python package), lintian, luarocks, and zip and unzip
# (the rock is a zip file).
# Safe to run repeatedly.
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config libhiredis-dev libssl-dev openssl redis-server
          python3-dev python3-venv libffi-dev libpython3.11-testsuite binutils openjdk-17-jdk-headless maven
          python3-pytest groff-base clang libclang-rt-14-dev clang-format abigail-tools valgrind
          swig ruby-dev ruby-minitest libperl-dev tcl-dev tclx8.4 liblua5.4-dev lua5.4 lua-busted
          faketime stress-ng nftables iproute2 util-linux
          debhelper dh-python python3-cffi lintian luarocks zip unzip)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing Debian packages: ${missing[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi
