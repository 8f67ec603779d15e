#!/usr/bin/env bash
# Sanitizer tiers (scripts/test.sh --sanitize runs this; CI too):
#   asan  build-asan/: -fsanitize=address,undefined (halt on the first report), CUDA off,
#         -O1 -g1 (below); runs the unit and mpi tests (and e2e with --e2e)
#   tsan  build-tsan/: -fsanitize=thread, CUDA off; builds and runs only the threaded tests:
#         the reducer (communication thread), the loader (worker threads, in test_train)
#         and the communicator's time-out watchdog (exercised by the algorithm MPI tests)
#   scripts/sanitize.sh [asan|tsan|all] [--e2e]     (default all)
# Suppressions (every entry explained in its file): scripts/sanitizers/tsan.supp — Open MPI
# internals only. LeakSanitizer is off: Open MPI's plugins leak on purpose and are unloaded
# (dlclose) before LSan runs, so their leaks show as "<unknown module>" and cannot be
# suppressed by name (seen 2026-12-01: 26 such stacks from a 1-rank gradsync-bench run). Extra CMake arguments: GRADSYNC_SANITIZE_CMAKE_ARGS (e.g. a ccache launcher).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
e2e=0
[ "${2:-}" = "--e2e" ] && e2e=1
[ "${1:-}" = "--e2e" ] && { what=all; e2e=1; }
jobs=${GRADSYNC_JOBS:-$(nproc)}
supp=$PWD/scripts/sanitizers
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# shellcheck disable=SC2206
extra=(${GRADSYNC_SANITIZE_CMAKE_ARGS:-})

# Both trees build at -O1 with line tables only (-g1): what the sanitizers' own docs suggest
# for a reasonable speed, and enough for file:line in every report. Measured 2026-12-07 on
# the 2-core host, uncached: the ASan+UBSan build 858 s at RelWithDebInfo's -O2 -g, 410 s at
# -O1 -g1; its unit+mpi+e2e tests 328 s and 380 s (same clone, one after the other).
configure() {  # dir flags
  mkdir -p "$1"
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DGRADSYNC_WITH_CUDA=OFF \
    -DCMAKE_CXX_FLAGS="$2 -fno-omit-frame-pointer" -DCMAKE_EXE_LINKER_FLAGS="$2" \
    -DCMAKE_SHARED_LINKER_FLAGS="$2" "${launcher[@]}" "${extra[@]}" >"$1/configure.log" 2>&1 ||
    { cat "$1/configure.log" >&2; exit 1; }
}

run_asan() {
  local t0=$SECONDS
  configure build-asan "-fsanitize=address,undefined -fno-sanitize-recover=undefined"
  cmake --build build-asan -j"$jobs"
  echo "sanitize: asan+ubsan build $((SECONDS - t0)) s"
  local labels="unit|mpi"
  [ "$e2e" = 1 ] && labels="unit|mpi|e2e"
  (cd build-asan &&
    ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=0:detect_odr_violation=0" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
    ctest --output-on-failure --timeout 900 -L "$labels" -LE "gpu|testbed|slurm|study|faults|badinput")
  echo "sanitize: asan+ubsan tier $((SECONDS - t0)) s"
}

run_tsan() {
  local t0=$SECONDS
  configure build-tsan "-fsanitize=thread"
  cmake --build build-tsan -j"$jobs" --target test_train test_reducer_mpi test_allreduce_mpi
  echo "sanitize: tsan build $((SECONDS - t0)) s"
  # test_train (loader threads, emulated gradients) directly: in this tree only the listed
  # targets exist, so ctest's other discovered tests would be "not built". The MPI tests at
  # 1-3 ranks: at 4 and 5 ranks on 2 cores TSan's slowdown passes their 120 s time-out.
  (cd build-tsan &&
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp" &&
    ./tests/test_train &&
    ctest --output-on-failure -R '^(test_reducer_mpi|test_allreduce_mpi)\.np[1-3]$')
  echo "sanitize: tsan tier $((SECONDS - t0)) s"
}

case "$what" in
  asan) run_asan ;;
  tsan) run_tsan ;;
  all) run_asan; run_tsan ;;
  *) echo "usage: scripts/sanitize.sh [asan|tsan|all] [--e2e]" >&2; exit 2 ;;
esac
