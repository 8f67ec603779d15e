#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test.
#   scripts/test.sh                 # everything
#   scripts/test.sh -L unit         # extra arguments go to ctest
#   scripts/test.sh --sanitize [all|asan|tsan] [--e2e]
#                                   # only the sanitizer tiers (scripts/sanitize.sh: ASan+UBSan
#                                   # on unit+mpi (+e2e) in build-asan/, TSan on the threaded
#                                   # tests); CI runs `--sanitize all --e2e`
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--sanitize" ]; then
  shift
  bash scripts/install-deps.sh
  exec bash scripts/sanitize.sh "${@:-all}"
fi
# The PyTorch venv too (label `torch`; GRADSYNC_TORCH_VENV points at an existing one).
GRADSYNC_DEPS="${GRADSYNC_DEPS:-all,torch}" bash scripts/install-deps.sh
bash scripts/build.sh
cd "${BUILD_DIR:-build}"
# MPI tests oversubscribe the 2 cores; run tests one at a time so timings stay sane.
ctest --output-on-failure --timeout 600 "$@"
