# Builds redmutex_native, the gem's extension: SWIG's wrapper, the code every
# binding shares and the C core, all bundled under src/ (scripts/package.sh
# copies the files CMake builds), linked to the system's hiredis and OpenSSL.
require "mkmf"

def need(what, found)
  abort "redmutex: #{what} not found (Debian: apt-get install libhiredis-dev libssl-dev)" unless found
end

need("hiredis", pkg_config("hiredis") || have_library("hiredis"))
need("OpenSSL", pkg_config("openssl") || (have_library("crypto") && have_library("ssl")))
need("pthreads", have_library("pthread"))

# Every .c under src/, objects beside their sources (the gem builds in place).
$srcs = Dir.chdir(__dir__) { Dir["src/**/*.c"].sort }
$objs = $srcs.map { |c| c.sub(/\.c\z/, ".#{$OBJEXT}") }
$INCFLAGS << %w[src/core/include src/core/src src/common].map { |d| " -I$(srcdir)/#{d}" }.join
# The core is C11; its internal functions stay hidden, as in the CMake build.
$CFLAGS << " -std=c11 -fvisibility=hidden"
# Only Init_redmutex_native is exported. The module is never unloaded: a client
# freed by the garbage collector closes in a background thread of the core.
$DLDFLAGS << " -Wl,--version-script=$(srcdir)/src/exports.map -Wl,-z,nodelete"
create_makefile("redmutex_native")
