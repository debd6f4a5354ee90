#!/usr/bin/env bash
# Runs every redmutex test suite on this machine, installing what is missing:
#   0. clang-format over the C sources (scripts/format.sh --check), and the library built with
#      clang -Wthread-safety (which functions need the client mutex is checked at every call);
#   1. the C tests and the redmutex command-line tests (ctest; pytest drives the built binary),
#      against redis-servers they start themselves; with them the ABI check against abi/
#      (abidiff) and the install check (the README's C example built against the installed
#      tree with CMake and pkg-config); the cluster tests and a smoke subset again against
#      Valkey 9.1 (ctest label valkey; scripts/valkey.sh fetches valkey-server);
#   2. the same under AddressSanitizer + UndefinedBehaviorSanitizer;
#   3. the same under ThreadSanitizer;
#   4. the same test binaries under valgrind memcheck (scripts/valgrind.sh);
#   5. the libFuzzer targets, 60 s each, all at once, under ASan + UBSan (scripts/fuzz.sh);
#   6. the Python package, installed with pip into a fresh virtualenv: ruff, mypy --strict, then
#      pytest (including interop with the real redis-py and Redisson), and its cluster tests and a
#      smoke subset against Valkey 9.1;
#   7. the SWIG bindings for Ruby, Perl, Tcl and Lua: each language's own suite (minitest,
#      prove, tcltest, busted), the cross-language test (with the Python package of 6) and
#      the install check;
#   8. the fault-injection harness (tests/chaos): its own tests, then the quick profile of
#      scenarios (about 5 minutes), which fails when a scenario's expectation fails;
#   9. the packages: scripts/package.sh builds the wheel, sdist, gem, CPAN dist, rock, Tcl tarball
#      and Debian packages into dist/, tests/packages/run installs each into a clean place and
#      takes a lock with it (docs/packaging.md).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's heading says how long the run has taken so far.
stage() { echo "== $*   [$((SECONDS / 60)) min $((SECONDS % 60)) s]"; }
scripts/deps.sh

# The C sources are formatted as .clang-format says (Debian 12's clang-format 14); a
# difference fails here, before anything is built. `scripts/format.sh` fixes it.
stage "clang-format"
scripts/format.sh --check

# The library with clang: -Wthread-safety checks that every function declared RM_REQUIRES(c->mu)
# is called with the client's mutex held (docs/architecture.md, "State and locks").
stage "clang -Wthread-safety over core/src"
CC=clang cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Debug -DREDMUTEX_WERROR=ON -DREDMUTEX_BUILD_TESTS=OFF \
  -DREDMUTEX_BUILD_BENCH=OFF -DREDMUTEX_BUILD_CLI=OFF >/dev/null
ninja -C build-clang redmutex

build() {
  local dir=$1 type=$2
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" -DREDMUTEX_WERROR=ON "$@" >/dev/null
  ninja -C "$dir"
}

# Valkey 9.1 for the valkey-labelled tests: fetched now, so that a failed fetch fails the run.
valkey=$(scripts/valkey.sh)

# Two test programs at a time here too (test_safety and test_safety_valkey, which compare
# throughputs over seconds, run alone: RUN_SERIAL): their time is mostly wall-clock waits.
stage "C tests"
build build-test RelWithDebInfo
(cd build-test && ctest -j2 --output-on-failure)

stage "Release build (-O3: GCC's deeper warnings, -Werror)"
build build-release Release -DREDMUTEX_BUILD_TESTS=OFF -DREDMUTEX_BUILD_BENCH=OFF

# The sanitizer stages run two test programs at a time: their time is mostly the servers' and the
# leases' wall-clock time, and their bounds already allow for the instrumentation's slowness.
stage "C tests under AddressSanitizer + UndefinedBehaviorSanitizer"
build build-asan Debug -DREDMUTEX_SANITIZE=address -DREDMUTEX_BUILD_BENCH=OFF
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest -j2 --output-on-failure -LE valkey -E 'exported_symbols|install_consumer|abi_compat')

stage "C tests under ThreadSanitizer"
build build-tsan Debug -DREDMUTEX_SANITIZE=thread -DREDMUTEX_BUILD_BENCH=OFF
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest -j2 --output-on-failure -LE valkey -E 'exported_symbols|header_|install_consumer|abi_compat')

stage "C tests under valgrind memcheck"
scripts/valgrind.sh build-test

stage "fuzzing (libFuzzer, ASan + UBSan)"
scripts/fuzz.sh

if [ -d tests/python ]; then
  stage "Python package"
  rm -rf build-venv
  python3 -m venv build-venv
  build-venv/bin/python -m pip install -q --upgrade pip
  build-venv/bin/python -m pip install -q . pytest redis ruff hypothesis prometheus_client opentelemetry-sdk mypy types-cffi
  build-venv/bin/ruff check python tests/python tests/cli tests/chaos bench tests/rmcluster.py tests/rmsentinel.py setup.py packaging \
    tests/rmserver.py tests/errortable.py tests/c/check_versions.py
  build-venv/bin/ruff format --check python tests/python tests/cli tests/chaos bench tests/rmcluster.py tests/rmsentinel.py setup.py packaging \
    tests/rmserver.py tests/errortable.py tests/c/check_versions.py
  build-venv/bin/mypy python/redmutex   # --strict, from pyproject.toml
  (cd tests/python && ../../build-venv/bin/python -m pytest -q)
  (cd tests/python && REDMUTEX_TEST_SERVER=$valkey ../../build-venv/bin/python -m pytest -q \
    test_cluster.py test_lock.py test_fair_rwlock.py test_asyncio.py)

  stage "Fault injection (tests/chaos): harness tests, then the quick profile"
  build-venv/bin/python -m pytest -q tests/chaos
  build-venv/bin/python tests/chaos/run --quick --python build-venv/bin/python
fi
stage "SWIG bindings: Ruby, Perl, Tcl, Lua"
build build-bindings RelWithDebInfo -DREDMUTEX_BINDINGS="ruby;perl;tcl;lua" -DREDMUTEX_BUILD_TESTS=OFF \
  -DREDMUTEX_BUILD_BENCH=OFF -DREDMUTEX_BUILD_CLI=OFF -DREDMUTEX_TEST_PYTHON="$PWD/build-venv/bin/python"
(cd build-bindings && ctest --output-on-failure -L bindings)

stage "packages: built (scripts/package.sh), then installed and used in clean places (tests/packages/run)"
packages_start=$SECONDS
scripts/package.sh
tests/packages/run
echo "== packages: $((SECONDS - packages_start)) s"
stage "all test suites passed"
