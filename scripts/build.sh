#!/usr/bin/env bash
# Configures and builds gradsync into ${BUILD_DIR:-build} (programs in build/bin/).
# Extra arguments go to CMake, e.g. scripts/build.sh -DGRADSYNC_WITH_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
jobs=${GRADSYNC_JOBS:-$(nproc)}
mkdir -p "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} "$@" >"$BUILD_DIR/configure.log" 2>&1 || {
  cat "$BUILD_DIR/configure.log" >&2
  exit 1
}
grep -E "gradsync:" "$BUILD_DIR/configure.log" || true
cmake --build "$BUILD_DIR" -j"$jobs"
