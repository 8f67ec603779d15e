#!/usr/bin/env bash
# scripts/gpu-check.sh — the prepared check for a machine with one GPU (issue 6, item 6).
#
#   scripts/gpu-check.sh pack [--no-build] [--no-verify]     (here: the build machine)
#   scripts/gpu-check.sh run  [--out DIR] [--from-build DIR] [--budget S]   (there, or here)
#   scripts/gpu-check.sh verify                              (here: re-prove the carry)
#
# pack   builds (into $BUILD_DIR, default build/) gradsync-bench, gradsync-train,
#        gradsync-kernels-bench, gradsync-compress-ref, gradsync-gpu-kernels-bench, cuda_probe
#        and the test binaries labelled gpu, then fills the carry folder .gpucheck/ (or
#        $GPUCHECK_DIR) with everything the GPU machine lacks — it has CUDA 13, NCCL,
#        Python/PyTorch/h5py but no Open MPI, HDF5 or Boost:
#          bin/, tests/          stripped copies of the programs and test binaries
#          tests.txt             the gpu-labelled CTest tests as plain commands (ctest_list.py)
#          lib/                  every shared library they need but glibc, CUDA and NCCL
#                                (ldd; Debian's Open MPI, PMIx, hwloc, libevent, HDF5 and
#                                its curl/krb5/... tree, Boost, toml++ ...)
#          lib-std/              libstdc++ and libgcc_s, used only when the machine's own
#                                libstdc++ lacks a GLIBCXX version our binaries need
#          lib-fallback/         libcudart, used only when the machine has none
#          ompi/                 Debian's Open MPI relocated: bin/{orterun,orted,ompi_info,
#                                mpirun,mpiexec}, lib/x86_64-linux-gnu/openmpi/lib/openmpi3/
#                                (plugins, minus those needing UCX/libfabric/verbs/PSM),
#                                share/openmpi (help files), etc/ (mca params)
#          pmix/                 PMIx's plugins and help files (relocated likewise)
#          MANIFEST.txt, needs   what is there, sizes, the glibc/GLIBCXX versions needed
#        and proves the carry complete (verify, below). It must stay under 64 MiB.
# verify runs, in a private mount namespace where the system's Open MPI/PMIx trees and
#        every system original of a carried library are hidden (bind mounts), under
#        `env -i` with only the carried paths: ompi_info --path, mpirun -np 2 gradsync-bench
#        (CPU), gradsync-compress-ref and a 2-rank gradsync-train. Needs root and unshare.
# run    sets the environment up from .gpucheck (or uses a build tree as is with
#        --from-build DIR: no carry, the system's mpirun, the test list from ctest) and
#        runs, each step under its own time-out and all within --budget seconds (default
#        540: the whole run stays under 9.5 minutes, inside one 10-minute device call):
#          0  the carry resolves (ldd) and the machine's glibc is new enough
#             carried mpirun launches 2 ranks of gradsync-bench on the CPU
#          a  the gpu-labelled unit tests (kernels vs CPU reference on fresh random data,
#             outputs poisoned first; device, memory, streams; NCCL and host staging via MPI)
#          b  1-rank NCCL all-reduce with checking (gradsync-bench --device cuda --algo nccl -c 1)
#          c  2 and 4 MPI ranks sharing the GPU (--device cuda --algo ring: host staging),
#             and gradsync-train --device cuda when it has that option (emulated
#             resnet18-cifar: 1 rank NCCL, 2 and 4 ranks host-staged)
#          d  fp32/fp16/bf16 training converging (mlp, real compute, --precision): on the
#             GPU when gradsync-train computes there, else on the CPU, said so in the row
#          e  CUDA kernel throughput vs device-to-device copy (gradsync-gpu-kernels-bench)
#          f  our PowerSGD and fp16/bf16 compressors vs PyTorch's DDP hooks at world size 1
#             (gradsync-compress-ref on the CPU, scripts/gpu/compare_torch.py: torch.distributed
#             gloo, and NCCL when torch sees the GPU); PowerSGD rank 4 on ResNet-50 shapes on
#             the GPU against powerSGD_hook's time (scripts/powersgd-vs-torch.py --device cuda)
#          g  every compressor on device gradients (gradsync-train --device cuda, real mlp:
#             1 rank NCCL, 2 ranks sharing the GPU over MPI, two in fp16/bf16) against the
#             same run on the CPU: final parameter norm and bytes sent
#        GPU steps without a usable GPU (or in a build without CUDA) are SKIP rows with the
#        reason; so are the torch comparisons where torch is not importable. The run ends
#        with a table (check, result, figure, target) printed and written to
#        $OUT/gpu-check.txt (OUT: --out, else $OUT, else a new folder under $TMPDIR), the
#        full log to $OUT/gpu-check.log and every result file (HDF5, JSON, step logs) to
#        $OUT/gpu-check-results.tar.gz. Exit status 0 unless a row FAILED.
#        Results: PASS, FAIL, SKIP (could not run here, with why), WARN (ran, correct, below
#        a performance target), INFO (a measurement without a target).
#
# Environment: BUILD_DIR (pack; default build), GRADSYNC_JOBS (pack; default 2),
# GPUCHECK_DIR (default <repo>/.gpucheck), GPUCHECK_PYTHON (default python3),
# GPUCHECK_LIBSTD=0|1 (force the carried libstdc++ off/on; default: decided by GLIBCXX).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CARRY=${GPUCHECK_DIR:-$ROOT/.gpucheck}
PYTHON=${GPUCHECK_PYTHON:-python3}
MAX_CARRY_BYTES=$((64 * 1024 * 1024))
ARCH_LIB=lib/x86_64-linux-gnu
OMPI_SYS_LIBDIR=/usr/lib/x86_64-linux-gnu/openmpi/lib
PMIX_SYS_PREFIX=/usr/lib/x86_64-linux-gnu/pmix2

die() {
  echo "gpu-check: error: $*" >&2
  exit 1
}
note() { echo "gpu-check: $*"; }

usage() {
  sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}

# ==== pack ===================================================================================

# Libraries never carried: glibc (the machine has its own; we record the version needed)
# and what comes with the GPU machine's CUDA/NCCL/driver.
lib_class() {  # soname -> glibc | gpu | cudart | std | carry
  case "$1" in
    linux-vdso.so* | ld-linux*.so* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | \
      libresolv.so.* | libutil.so.* | libanl.so.* | libmvec.so.* | libBrokenLocale.so.*) echo glibc ;;
    libcuda.so* | libnccl.so* | libcublas*.so* | libnvidia-*.so* | libnvrtc*.so* | libcudnn*.so* | libnvJitLink*.so*) echo gpu ;;
    libcudart.so*) echo cudart ;;
    libstdc++.so* | libgcc_s.so*) echo std ;;
    *) echo carry ;;
  esac
}

# Open MPI / PMIx plugins that need transports the GPU check does not use and whose
# libraries are large (UCX, libfabric, verbs, PSM) or absent (Java): not carried.
PLUGIN_DEP_BLOCK='^(libucp|libucs|libuct|libucm|libfabric|libpsm_infinipath|libpsm2|libibverbs|librdmacm|libjvm|libjawt)'

is_elf() { [ -f "$1" ] && [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }

# ldd of one file -> "soname<TAB>path" lines ("not found" as the path when missing).
ldd_pairs() {
  ldd "$1" 2>/dev/null | awk '
    /=>/ { name = $1; path = $3; if ($3 == "not") path = "not found"; print name "\t" path; next }
    $2 ~ /^\(/ { n = $1; sub(/.*\//, "", n); print n "\t" $1 }'
}

copy_stripped() {  # src dst [mode]
  mkdir -p "$(dirname "$2")"
  cp -L "$1" "$2" || return 1
  chmod "${3:-755}" "$2"
  strip --strip-unneeded "$2" 2>/dev/null || true
}

pack() {
  local build=1 verify=1
  while [ $# -gt 0 ]; do
    case "$1" in
      --no-build) build=0 ;;
      --no-verify) verify=0 ;;
      -h | --help) usage 0 ;;
      *) die "pack: unknown argument '$1'" ;;
    esac
    shift
  done
  local B=${BUILD_DIR:-build}
  case "$B" in /*) ;; *) B=$ROOT/$B ;; esac
  command -v strip >/dev/null || die "strip (binutils) is needed"
  command -v python3 >/dev/null || die "python3 is needed (ctest_list.py)"

  if [ "$build" = 1 ]; then
    if [ ! -f "$B/CMakeCache.txt" ]; then
      note "configuring $B"
      cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=Release >"$B.configure.log" 2>&1 ||
        { cat "$B.configure.log" >&2; die "cmake configure failed"; }
    fi
  fi
  [ -f "$B/CMakeCache.txt" ] || die "no CMake build in $B (run without --no-build, or set BUILD_DIR)"
  grep -q '^GRADSYNC_WITH_CUDA:BOOL=ON' "$B/CMakeCache.txt" ||
    die "$B is configured with GRADSYNC_WITH_CUDA=OFF: the carry needs the CUDA build (nvcc at configure time)"

  local programs=(gradsync-bench gradsync-train gradsync-kernels-bench gradsync-compress-ref gradsync-gpu-kernels-bench)
  local test_targets=(cuda_probe test_cuda_basics test_kernels_gpu test_nccl_mpi)
  if [ "$build" = 1 ]; then
    local known targets=() t
    known=$(cmake --build "$B" --target help 2>/dev/null)
    for t in "${programs[@]}" "${test_targets[@]}"; do
      if grep -qE "(^|[ .:])$t(:|$| )" <<<"$known"; then targets+=("$t"); else note "no target $t in this build (skipped)"; fi
    done
    note "building ${targets[*]} in $B (-j${GRADSYNC_JOBS:-2})"
    cmake --build "$B" -j"${GRADSYNC_JOBS:-2}" --target "${targets[@]}" >"$B/gpucheck-build.log" 2>&1 ||
      { tail -40 "$B/gpucheck-build.log" >&2; die "build failed (log: $B/gpucheck-build.log)"; }
  fi

  local G=$CARRY tmp="$CARRY.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"/{bin,tests,lib,lib-std,lib-fallback} || die "cannot create $tmp"
  trap 'rm -rf "$tmp"' EXIT

  # -- the test list, and the test binaries it names
  python3 "$ROOT/scripts/gpu/ctest_list.py" "$B" "$ROOT" --label gpu >"$tmp/tests.txt" || die "ctest_list.py failed"
  if grep -q '^# not built:' "$tmp/tests.txt"; then
    grep '^# not built:' "$tmp/tests.txt" >&2
    die "some gpu tests are not built (build $B fully, or without --no-build)"
  fi
  local p
  for p in "${programs[@]}"; do
    if [ -x "$B/bin/$p" ]; then copy_stripped "$B/bin/$p" "$tmp/bin/$p"; else note "not carried: $p (not built)"; fi
  done
  local exe
  for exe in $(grep -v '^#' "$tmp/tests.txt" | cut -f6 | tr ' ' '\n' | grep -E '^@(TESTS|BIN)@/' | sort -u) \
    @TESTS@/cuda_probe; do
    local rel=${exe#@*@/} dir=tests
    [[ $exe == @BIN@/* ]] && dir=bin
    local src=$B/$dir/$rel
    [ -e "$tmp/$dir/$rel" ] && continue
    [ -x "$src" ] || die "test binary $src (named by tests.txt) is missing"
    copy_stripped "$src" "$tmp/$dir/$rel"
  done

  # -- Open MPI, relocated under ompi/ with Debian's layout (prefix /usr)
  local O=$tmp/ompi
  mkdir -p "$O/bin" "$O/$ARCH_LIB/openmpi/lib/openmpi3" "$O/share" "$O/etc"
  copy_stripped /usr/bin/orterun "$O/bin/orterun"
  copy_stripped /usr/bin/orted "$O/bin/orted"
  command -v ompi_info >/dev/null && copy_stripped "$(readlink -f "$(command -v ompi_info)")" "$O/bin/ompi_info"
  ln -s orterun "$O/bin/mpirun"
  ln -s orterun "$O/bin/mpiexec"
  cp -r /usr/share/openmpi "$O/share/openmpi"
  cp /etc/openmpi/openmpi-mca-params.conf /etc/openmpi/openmpi-default-hostfile "$O/etc/" 2>/dev/null
  local dropped=() f dep
  for f in "$OMPI_SYS_LIBDIR"/openmpi3/*.so; do
    [ -e "$f" ] || continue
    dep=$(ldd_pairs "$f" | cut -f1 | grep -E "$PLUGIN_DEP_BLOCK" | head -1)
    if [ -n "$dep" ] || [[ $(basename "$f") == *java* ]]; then
      dropped+=("$(basename "$f")${dep:+ ($dep)}")
      continue
    fi
    copy_stripped "$f" "$O/$ARCH_LIB/openmpi/lib/openmpi3/$(basename "$f")" 644
  done
  # -- PMIx (Open MPI's pmix_ext3x plugin links it), relocated under pmix/
  local X=$tmp/pmix
  mkdir -p "$X/lib/pmix" "$X/share"
  for f in "$PMIX_SYS_PREFIX"/lib/pmix/*.so; do
    [ -e "$f" ] && copy_stripped "$f" "$X/lib/pmix/$(basename "$f")" 644
  done
  [ -d "$PMIX_SYS_PREFIX/share/pmix" ] && cp -r "$PMIX_SYS_PREFIX/share/pmix" "$X/share/pmix"
  cp "$PMIX_SYS_PREFIX"/share/*.conf "$X/share/" 2>/dev/null

  # -- shared libraries of every carried ELF file (ldd gives the transitive closure)
  declare -A seen=()
  local sources=$tmp/lib/SOURCES.txt missing=()
  : >"$sources"
  local elf name path cls
  while IFS= read -r -d '' elf; do
    is_elf "$elf" || continue
    while IFS=$'\t' read -r name path; do
      [ -n "${seen[$name]:-}" ] && continue
      seen[$name]=1
      cls=$(lib_class "$name")
      if [ "$path" = "not found" ]; then
        [ "$cls" = gpu ] || [ "$cls" = cudart ] || missing+=("$name (for $(basename "$elf"))")
        continue
      fi
      case "$cls" in
        carry) copy_stripped "$path" "$tmp/lib/$name" 644 && printf '%s\t%s\n' "$name" "$(readlink -f "$path")" >>"$sources" ;;
        std) copy_stripped "$path" "$tmp/lib-std/$name" 644 && printf '%s\t%s\n' "$name" "$(readlink -f "$path")" >>"$sources" ;;
        cudart) copy_stripped "$path" "$tmp/lib-fallback/$name" 644 ;;
      esac
    done < <(ldd_pairs "$elf")
  done < <(find "$tmp/bin" "$tmp/tests" "$O/bin" "$O/$ARCH_LIB" "$X/lib" -type f -print0)
  [ ${#missing[@]} -eq 0 ] || die "libraries not found by ldd: ${missing[*]}"
  # the libraries' own dependencies (ldd of an executable covers them, plugins too) — check
  while IFS= read -r -d '' elf; do
    while IFS=$'\t' read -r name path; do
      [ -n "${seen[$name]:-}" ] && continue
      seen[$name]=1
      cls=$(lib_class "$name")
      [ "$cls" = carry ] && [ "$path" != "not found" ] &&
        copy_stripped "$path" "$tmp/lib/$name" 644 && printf '%s\t%s\n' "$name" "$(readlink -f "$path")" >>"$sources"
    done < <(ldd_pairs "$elf")
  done < <(find "$tmp/lib" -name '*.so*' -type f -print0)

  # -- what the machine must provide
  local glibc glibcxx cxxabi
  glibc=$(find "$tmp" -type f -print0 | xargs -0 objdump -T 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sort -uV | tail -1)
  glibcxx=$(find "$tmp/bin" "$tmp/tests" "$tmp/lib" "$O" "$X" -type f -print0 | xargs -0 objdump -T 2>/dev/null |
    grep -o 'GLIBCXX_[0-9][0-9.]*' | sort -uV | tail -1)
  cxxabi=$(find "$tmp/bin" "$tmp/tests" "$tmp/lib" "$O" "$X" -type f -print0 | xargs -0 objdump -T 2>/dev/null |
    grep -o 'CXXABI_[0-9][0-9.]*' | sort -uV | tail -1)
  printf 'glibc %s\nglibcxx %s\ncxxabi %s\n' "${glibc#GLIBC_}" "${glibcxx#GLIBCXX_}" "${cxxabi#CXXABI_}" >"$tmp/needs"

  local bytes
  bytes=$(du -sb "$tmp" | cut -f1)
  {
    echo "# gradsync GPU-check carry (scripts/gpu-check.sh pack)"
    echo "created   $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
    echo "revision  $(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo -dirty)"
    echo "build     $B"
    echo "size      $bytes bytes ($(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB; limit 64 MiB)"
    echo "needs     glibc >= ${glibc#GLIBC_}; libstdc++ with ${glibcxx:-none} (else lib-std/ is used)"
    echo "          CUDA runtime 13 and NCCL 2 from the machine (lib-fallback/ has libcudart)"
    echo "dropped   Open MPI plugins: ${dropped[*]:-none}"
    grep '^# not carried' "$tmp/tests.txt" | sed 's/^# /tests     /'
    echo
    echo "# size  path"
    (cd "$tmp" && find . -type f -printf '%s\t%p\n' | sort -k2)
  } >"$tmp/MANIFEST.txt"

  [ "$bytes" -le "$MAX_CARRY_BYTES" ] || die "the carry is $bytes bytes, over the 64 MiB limit (see $tmp/MANIFEST.txt)"
  rm -rf "$G"
  mv "$tmp" "$G" || die "cannot move $tmp to $G"
  trap - EXIT
  # Keep the carry out of git here (the lead adds /.gpucheck/ to .gitignore).
  local excl
  excl=$(git -C "$ROOT" rev-parse --git-path info/exclude 2>/dev/null)
  if [ -n "$excl" ] && [ "$G" = "$ROOT/.gpucheck" ]; then
    case "$excl" in /*) ;; *) excl=$ROOT/$excl ;; esac
    grep -qx '/.gpucheck/' "$excl" 2>/dev/null || { mkdir -p "$(dirname "$excl")" && echo '/.gpucheck/' >>"$excl"; }
  fi
  note "carry ready: $G, $(awk -v b="$bytes" 'BEGIN { printf "%.1f MiB", b / 1048576 }') ($bytes bytes) of 64 MiB;" \
    "needs glibc >= ${glibc#GLIBC_}"
  note "carry it with the run tool: carry [\".gpucheck\"], command: scripts/gpu-check.sh run"
  if [ "$verify" = 1 ]; then verify; fi
}

# ==== the carried environment ================================================================

# Sets PATH, LD_LIBRARY_PATH and Open MPI's/PMIx's relocation variables for carry $1.
# The caller's originals stay in ORIG_PATH / ORIG_LD_LIBRARY_PATH (for Python).
carry_env() {
  local G=$1
  export OPAL_PREFIX=$G/ompi OPAL_EXEC_PREFIX=$G/ompi OPAL_BINDIR=$G/ompi/bin
  export OPAL_LIBDIR=$G/ompi/$ARCH_LIB/openmpi/lib
  export OPAL_PKGLIBDIR=$OPAL_LIBDIR/openmpi3
  export OPAL_DATAROOTDIR=$G/ompi/share OPAL_DATADIR=$G/ompi/share OPAL_PKGDATADIR=$G/ompi/share/openmpi
  export OPAL_SYSCONFDIR=$G/ompi/etc
  export OMPI_MCA_mca_base_component_path=$OPAL_PKGLIBDIR
  export OMPI_MCA_mca_base_param_files=$G/ompi/etc/openmpi-mca-params.conf
  export OMPI_MCA_orte_default_hostfile=$G/ompi/etc/openmpi-default-hostfile
  export PMIX_PREFIX=$G/pmix PMIX_INSTALL_PREFIX=$G/pmix PMIX_EXEC_PREFIX=$G/pmix
  export PMIX_LIBDIR=$G/pmix/lib PMIX_PKGLIBDIR=$G/pmix/lib/pmix
  export PMIX_DATAROOTDIR=$G/pmix/share PMIX_DATADIR=$G/pmix/share PMIX_PKGDATADIR=$G/pmix/share/pmix
  export PMIX_SYSCONFDIR=$G/pmix/share
  export PMIX_MCA_mca_base_component_path=$G/pmix/lib/pmix
  # The machine's CUDA runtime and NCCL: the usual places, then PyTorch's wheels.
  local cuda_dirs=() d
  for d in /usr/local/cuda/lib /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && cuda_dirs+=("$d")
  done
  local have_nccl=0
  ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 ' && have_nccl=1
  for d in "${cuda_dirs[@]}"; do [ -e "$d/libnccl.so.2" ] && have_nccl=1; done
  if [ "$have_nccl" = 0 ]; then
    d=$(timeout 30 env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" "$PYTHON" -c \
      'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
    [ -n "$d" ] && [ -d "$d" ] && cuda_dirs+=("$d")
  fi
  local std=""
  case "${GPUCHECK_LIBSTD:-auto}" in
    1) std=$G/lib-std ;;
    0) std="" ;;
    *)
      local need sys
      need=$(awk '$1 == "glibcxx" { print $2 }' "$G/needs" 2>/dev/null)
      sys=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ { print $NF; exit }')
      if [ -n "$need" ] && { [ -z "$sys" ] || ! grep -qa "GLIBCXX_$need" "$sys"; }; then std=$G/lib-std; fi
      ;;
  esac
  USING_LIBSTD=${std:+yes}
  local ld=$G/lib${std:+:$std}
  for d in "${cuda_dirs[@]}"; do ld=$ld:$d; done
  ld=$ld:$G/lib-fallback
  export LD_LIBRARY_PATH=$ld${ORIG_LD_LIBRARY_PATH:+:$ORIG_LD_LIBRARY_PATH}
  export PATH=$G/ompi/bin:$ORIG_PATH
}

# ==== verify (here) ==========================================================================

verify() {
  local G=$CARRY
  [ -d "$G/ompi" ] || die "verify: no carry at $G (run pack first)"
  command -v unshare >/dev/null || die "verify: unshare is needed"
  [ "$(id -u)" = 0 ] || die "verify: needs root (mount namespace and bind mounts)"
  local w
  w=$(mktemp -d "${TMPDIR:-/tmp}/gs-gpucheck-verify.XXXXXX")
  # What to hide: the system's Open MPI/PMIx trees and every original of a carried library.
  # (files first: a folder hidden by a tmpfs has no mount points left for its files)
  {
    for f in /usr/bin/orterun /usr/bin/orted /usr/bin/ompi_info /usr/bin/mpirun /usr/bin/mpiexec; do
      [ -e "$f" ] && echo "file $(readlink -f "$f")"
    done
    cut -f2 "$G/lib/SOURCES.txt"
    for d in "$OMPI_SYS_LIBDIR" "$PMIX_SYS_PREFIX" /usr/share/openmpi /etc/openmpi; do [ -d "$d" ] && echo "dir $d"; done
  } | awk '$1 == "dir" || $1 == "file" { print; next } { print "file " $0 }' | awk '!seen[$0]++' >"$w/hide.txt"
  cat >"$w/inner.sh" <<'EOF'
#!/bin/bash
# runs inside the private mount namespace
set -u
G=$1 W=$2
mkdir -p "$W/empty"
while read -r kind path; do
  if [ "$kind" = dir ]; then mount -t tmpfs -o size=1m none "$path" || exit 90
  else mount --bind /dev/null "$path" || exit 91; fi
done <"$W/hide.txt"
echo "hidden: $(grep -c '^dir' "$W/hide.txt") folders, $(grep -c '^file' "$W/hide.txt") files"
cd "$W" || exit 92
exec env -i HOME="$W" TMPDIR="$W" PATH="$G/ompi/bin:/usr/bin:/bin" GPUCHECK_LIBSTD=1 GPUCHECK_PYTHON=/usr/bin/python3 \
  bash "$G/../scripts/gpu-check.sh" _verify_inner "$W"
EOF
  note "verify: hiding the system's Open MPI, PMIx and $(cut -f2 "$G/lib/SOURCES.txt" | sort -u | wc -l) carried libraries' originals; env -i"
  local rc
  # The carry folder must sit in the repository root for the inner call; use a link if not.
  if [ "$(cd "$G/.." && pwd)" != "$ROOT" ]; then die "verify: the carry must be <repo>/.gpucheck"; fi
  unshare -m --propagation private bash "$w/inner.sh" "$G" "$w"
  rc=$?
  if [ $rc = 0 ]; then
    note "verify: PASS"
    rm -rf "$w"
  else
    note "verify: FAIL (status $rc; files in $w)"
  fi
  return $rc
}

verify_inner() {  # called by inner.sh under env -i with the system copies hidden
  local W=$1
  ORIG_PATH=$PATH ORIG_LD_LIBRARY_PATH=""
  carry_env "$CARRY"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_MCA_btl_vader_single_copy_mechanism=none GRADSYNC_TIMEOUT_S=60
  local fail=0
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "--- ompi_info --path"
  timeout 60 ompi_info --path all | grep -E 'Prefix|Libdir|Pkglibdir|Pkgdatadir|Sysconfdir' || fail=1
  timeout 60 ompi_info --path pkglibdir --parsable | grep -q "$CARRY" || { echo "ompi_info: pkglibdir is not the carried one"; fail=1; }
  echo "--- mpirun -np 2 gradsync-bench (CPU)"
  timeout 120 mpirun --bind-to none -np 2 "$CARRY/bin/gradsync-bench" -b 8 -e 1K -c 1 -n 2 -w 1 --out "$W/bench.h5" \
    >"$W/bench.log" 2>&1
  local rc=$?
  cat "$W/bench.log"
  { [ $rc = 0 ] && grep -q '^# Out of bounds values : 0 OK' "$W/bench.log"; } || { echo "FAIL: bench status $rc"; fail=1; }
  echo "--- gradsync-compress-ref"
  timeout 60 "$CARRY/bin/gradsync-compress-ref" --out "$W/ref.h5" --steps 2 || { echo "FAIL: compress-ref"; fail=1; }
  if [ -x "$CARRY/bin/gradsync-train" ]; then
    echo "--- mpirun -np 2 gradsync-train"
    timeout 120 mpirun --bind-to none -np 2 "$CARRY/bin/gradsync-train" --model mlp --steps 20 --precision bf16 \
      --out "$W/train.h5" --quiet || { echo "FAIL: train"; fail=1; }
  fi
  echo "--- test binaries load (cuda_probe; gtest --gtest_list_tests)"
  timeout 30 "$CARRY/tests/cuda_probe" || fail=1
  local t
  for t in "$CARRY"/tests/test_*; do
    timeout 30 "$t" --gtest_list_tests >/dev/null || { echo "FAIL: $t does not load"; fail=1; }
  done
  echo "--- the whole run, as on the GPU machine"
  (run --out "$W/run-out" --budget 300) || { echo "FAIL: gpu-check.sh run"; fail=1; }
  return $fail
}

# ==== run ====================================================================================

ROWS=()
add_row() { ROWS+=("$1"$'\t'"$2"$'\t'"$3"$'\t'"$4"); echo "[$2] $1: $3${4:+ (target: $4)}"; }

T0=$(date +%s)
BUDGET=540
remaining() { echo $((BUDGET - ($(date +%s) - T0))); }

# step NAME TIMEOUT LOG cmd...: runs cmd with a time-out cut to the remaining budget.
# Sets STEP_RC (124: timed out; 125: no time left) and appends the log to the full log.
step() {
  local name=$1 want=$2 log=$3
  shift 3
  local left
  left=$(($(remaining) - 10))
  if [ "$left" -lt 5 ]; then
    STEP_RC=125
    echo "budget exhausted before $name" >"$log"
    return 125
  fi
  local t=$((want < left ? want : left))
  local s0
  s0=$(date +%s)
  {
    echo "==== $name ($(date -u +%H:%M:%S), time-out ${t}s)"
    echo "\$ $*"
  } >>"$FULL_LOG"
  timeout -k 10 "$t" "$@" >"$log" 2>&1 </dev/null  # (mpirun would eat the caller's stdin)
  STEP_RC=$?
  {
    cat "$log"
    echo "==== $name: status $STEP_RC in $(($(date +%s) - s0)) s"
  } >>"$FULL_LOG"
  return $STEP_RC
}
why_failed() {  # a short reason from a step's status and log
  case "$STEP_RC" in
    124 | 137) echo "timed out" ;;
    125) echo "no time left in the budget" ;;
    *) echo "status $STEP_RC: $(grep -m1 -iE 'error|fail|abort|not found' "$1" | cut -c1-100)" ;;
  esac
}

bench_row() {  # check-name log target -> a row from a gradsync-bench run
  local name=$1 log=$2 target=$3
  if [ "$STEP_RC" = 0 ] && grep -q '^# Out of bounds values : 0 OK' "$log"; then
    local last
    last=$(grep -v '^#' "$log" | awk 'NF >= 9 { l = $0 } END { print l }')
    add_row "$name" PASS "$(awk '{ printf "0 wrong; %s B: %s us, busbw %s GB/s (%s)", $1, $6, $8, $NF }' <<<"$last")" "$target"
  else
    add_row "$name" FAIL "$(why_failed "$log")" "$target"
  fi
}

run() {
  local from_build="" out_dir=${OUT:-}
  while [ $# -gt 0 ]; do
    case "$1" in
      --from-build) from_build=$2; shift ;;
      --out) out_dir=$2; shift ;;
      --budget) BUDGET=$2; shift ;;
      -h | --help) usage 0 ;;
      *) die "run: unknown argument '$1'" ;;
    esac
    shift
  done
  [ -n "$out_dir" ] || out_dir=$(mktemp -d "${TMPDIR:-/tmp}/gpucheck-out.XXXXXX")
  mkdir -p "$out_dir" || die "cannot create $out_dir"
  out_dir=$(cd "$out_dir" && pwd)
  local W
  W=$(mktemp -d "${TMPDIR:-/tmp}/gs-gpucheck.XXXXXX")
  FULL_LOG=$W/gpu-check.log
  : >"$FULL_LOG"
  ORIG_PATH=$PATH
  ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  # Containers often forbid the cross-memory attach of vader's single copy.
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
  export GRADSYNC_TIMEOUT_S=${GRADSYNC_TIMEOUT_S:-60}

  local BIN TESTS MPIRUN LIST mode
  if [ -n "$from_build" ]; then
    from_build=$(cd "$from_build" 2>/dev/null && pwd) || die "--from-build: no folder $from_build"
    BIN=$from_build/bin TESTS=$from_build/tests
    MPIRUN=$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$from_build/CMakeCache.txt" 2>/dev/null)
    [ -n "$MPIRUN" ] || MPIRUN=$(command -v mpirun)
    LIST=$W/tests.txt
    python3 "$ROOT/scripts/gpu/ctest_list.py" "$from_build" "$ROOT" --label gpu >"$LIST" 2>"$W/ctest_list.err" ||
      { cat "$W/ctest_list.err" >&2; : >"$LIST"; }
    mode="build tree $from_build (system MPI)"
  else
    [ -d "$CARRY/bin" ] || die "no carry at $CARRY: run 'scripts/gpu-check.sh pack' on the build machine and carry .gpucheck"
    carry_env "$CARRY"
    BIN=$CARRY/bin TESTS=$CARRY/tests MPIRUN=$CARRY/ompi/bin/mpirun LIST=$CARRY/tests.txt
    mode="carry $CARRY ($(sed -n 's/^revision  //p' "$CARRY/MANIFEST.txt"))${USING_LIBSTD:+, carried libstdc++}"
  fi
  local MPI=("$MPIRUN" --bind-to none --oversubscribe)

  {
    echo "# gradsync GPU check — $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
    echo "# mode: $mode"
    echo "# budget ${BUDGET}s; LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  } | tee -a "$FULL_LOG"

  # ---- 0. the machine and the carry ----------------------------------------------------------
  local gpu_n=0 gpu_why="" gpu_name=""
  if [ -z "$from_build" ]; then
    local bad=() e sys_glibc need_glibc
    while IFS= read -r -d '' e; do
      is_elf "$e" || continue
      if ldd "$e" 2>&1 | grep -q 'not found'; then bad+=("$(basename "$e"): $(ldd "$e" 2>&1 | awk '/not found/ { print $1 }' | tr '\n' ' ')"); fi
    done < <(find "$BIN" "$TESTS" "$CARRY/ompi/bin" -type f -print0)
    # Programs (not plugins) must also bind every symbol: an older NCCL or CUDA runtime
    # on the machine shows here as "undefined symbol".
    while IFS= read -r -d '' e; do
      is_elf "$e" || continue
      local undef
      undef=$(ldd -r "$e" 2>&1 | grep -m3 -o 'undefined symbol: [^ ,]*' | cut -d' ' -f3 | tr '\n' ' ')
      [ -n "$undef" ] && bad+=("$(basename "$e"): undefined $undef")
    done < <(find "$BIN" "$TESTS" -type f -print0)
    sys_glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
    need_glibc=$(awk '$1 == "glibc" { print $2 }' "$CARRY/needs")
    if [ -n "$sys_glibc" ] && [ "$(printf '%s\n%s\n' "$need_glibc" "$sys_glibc" | sort -V | head -1)" != "$need_glibc" ]; then
      add_row "0.carry: glibc" FAIL "machine has glibc $sys_glibc, the carry needs $need_glibc" ">= $need_glibc"
    fi
    if [ ${#bad[@]} -eq 0 ]; then
      add_row "0.carry: libraries resolve" PASS "$(find "$BIN" "$TESTS" -type f | wc -l) programs, $(ls "$CARRY/lib" | wc -l) libs; glibc $sys_glibc" "no 'not found'"
    else
      add_row "0.carry: libraries resolve" FAIL "${bad[*]}" "no 'not found'"
    fi
  fi
  if [ -x "$TESTS/cuda_probe" ]; then
    read -r gpu_n gpu_why < <(timeout 60 "$TESTS/cuda_probe" 2>&1 || echo "0 cuda_probe failed")
    [[ $gpu_n =~ ^[0-9]+$ ]] || { gpu_why="cuda_probe: $gpu_n $gpu_why"; gpu_n=0; }
  else
    gpu_why="this build has no CUDA (no cuda_probe: GRADSYNC_WITH_CUDA=OFF)"
  fi
  if [ "$gpu_n" -gt 0 ]; then
    gpu_name=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
    add_row "0.gpu" INFO "$gpu_n device(s)${gpu_name:+: $gpu_name}" ""
  else
    add_row "0.gpu" SKIP "no usable CUDA device: $gpu_why" ""
  fi
  local nogpu="no usable CUDA device (see 0.gpu)"

  step "launch" 120 "$W/launch.log" "${MPI[@]}" -np 2 "$BIN/gradsync-bench" -b 8 -e 1M -f 16 -c 1 -n 5 -w 1 \
    --out "$W/launch.h5"
  bench_row "0.mpirun -np 2 gradsync-bench (CPU)" "$W/launch.log" "0 wrong"

  # ---- a. GPU unit tests ---------------------------------------------------------------------
  local name tmo env skip _kind cmd i=0
  while IFS=$'\t' read -r name tmo env skip _kind cmd; do
    [ -z "$name" ] || [[ $name == \#* ]] && continue
    i=$((i + 1))
    cmd=${cmd//@BIN@/$BIN}
    cmd=${cmd//@TESTS@/$TESTS}
    cmd=${cmd//@SRC@/$ROOT}
    cmd=${cmd//@MPIEXEC@/$MPIRUN}
    local envs=()
    [ "$env" != "-" ] && read -r -a envs <<<"$env"
    local words=()
    read -r -a words <<<"$cmd"
    [ "$tmo" -gt 150 ] && tmo=150
    step "a.$name" "$tmo" "$W/a.$name.log" env "${envs[@]}" "${words[@]}"
    local log=$W/a.$name.log passed skipped fig
    passed=$(grep -m1 -oE '\[  PASSED  \] [0-9]+ test' "$log" | grep -oE '[0-9]+')
    skipped=$(grep -m1 -oE '\[  SKIPPED \] [0-9]+ test' "$log" | grep -oE '[0-9]+')
    fig="${passed:+$passed passed}${skipped:+, $skipped skipped}"
    if [ "$STEP_RC" = 0 ]; then
      if [ "$skip" != "-" ] && grep -qE "$skip" "$log"; then
        local why
        why=$(grep -m1 -oE 'no usable CUDA device[^;]*' "$log" | cut -c1-110)
        [ "$gpu_n" = 0 ] && [ -n "$why" ] && why="no usable CUDA device (see 0.gpu)"
        add_row "a.$name" SKIP "${fig:+$fig; }${why:-skipped}" "all pass"
      else
        if [ -z "$fig" ]; then  # a script: its "ok ..." lines
          fig="$(grep -c '^ok ' "$log") checks ok, last: $(grep '^ok ' "$log" | tail -1 | cut -c6-60)"
          grep -q '^ok ' "$log" || fig=$(grep -vE '^\s*$' "$log" | tail -1 | cut -c1-80)
        fi
        add_row "a.$name" PASS "$fig" "all pass"
      fi
    else
      add_row "a.$name" FAIL "$(why_failed "$log")${fig:+ ($fig)}" "all pass"
    fi
  done < <(grep -v '^#' "$LIST" 2>/dev/null)
  [ "$i" -gt 0 ] || add_row "a.gpu unit tests" SKIP "no gpu-labelled tests in this build ($(head -c 100 "$W/ctest_list.err" 2>/dev/null))" ""

  # ---- b. 1-rank NCCL ------------------------------------------------------------------------
  if [ "$gpu_n" -gt 0 ]; then
    step "b.nccl" 90 "$W/b.nccl.log" "${MPI[@]}" -np 1 "$BIN/gradsync-bench" --device cuda --algo nccl -c 1 \
      -b 8 -e 256M -f 4 -n 20 -w 5 --out "$W/b.nccl.h5"
    bench_row "b.nccl all-reduce, 1 rank, checked" "$W/b.nccl.log" "0 wrong"
  else
    add_row "b.nccl all-reduce, 1 rank, checked" SKIP "$nogpu" "0 wrong"
  fi

  # ---- c. several ranks sharing the GPU ------------------------------------------------------
  local np
  for np in 2 4; do
    if [ "$gpu_n" -gt 0 ]; then
      step "c.ring.np$np" 120 "$W/c.ring.np$np.log" "${MPI[@]}" -np "$np" "$BIN/gradsync-bench" --device cuda \
        --algo ring -c 1 -b 8 -e 64M -f 4 -n 10 -w 2 --out "$W/c.ring.np$np.h5"
      bench_row "c.ring, $np ranks on 1 GPU (host staging)" "$W/c.ring.np$np.log" "0 wrong"
    else
      add_row "c.ring, $np ranks on 1 GPU (host staging)" SKIP "$nogpu" "0 wrong"
    fi
  done
  # gradsync-train on the GPU: --device cuda (when this build has it). Ranks sharing the
  # GPU go through host staging (--backend mpi); NCCL takes one rank. The GPU path may
  # run emulated compute only (then the zoo model resnet18-cifar with --compute emulated).
  local train_cuda=0 thelp=""
  [ -x "$BIN/gradsync-train" ] && thelp=$("$BIN/gradsync-train" --help 2>/dev/null)
  grep -q -- '--device' <<<"$thelp" && train_cuda=1
  if [ ! -x "$BIN/gradsync-train" ]; then
    add_row "c.train --device cuda" SKIP "gradsync-train not built" "runs"
  elif [ "$train_cuda" = 0 ]; then
    add_row "c.train --device cuda" SKIP "gradsync-train has no --device option (training computes on the CPU)" "runs"
  elif [ "$gpu_n" = 0 ]; then
    add_row "c.train --device cuda" SKIP "$nogpu" "runs"
  else
    local tcase tnp targs tname prec
    for tcase in "1|--backend nccl|fp32" "2|--backend mpi|fp32" "4|--backend mpi|bf16"; do
      IFS='|' read -r tnp targs prec <<<"$tcase"
      grep -q -- '--backend' <<<"$thelp" || targs=""
      tname="c.train cuda np$tnp ${targs#--backend } $prec (emulated)"
      # shellcheck disable=SC2086  # targs: zero or two words
      step "c.train.np$tnp" 120 "$W/c.train.np$tnp.log" "${MPI[@]}" -np "$tnp" "$BIN/gradsync-train" \
        --model resnet18-cifar --compute emulated --device cuda $targs --precision "$prec" --steps 30 --json \
        --out "$W/c.train.np$tnp.h5"
      if [ "$STEP_RC" = 0 ]; then
        add_row "$tname" PASS "$(awk -v s="$(json_field "$W/c.train.np$tnp.log" median_step_time_s)" \
          -v c="$(json_field "$W/c.train.np$tnp.log" median_comm_total_s)" \
          -v e="$(json_field "$W/c.train.np$tnp.log" median_comm_exposed_s)" \
          'BEGIN { printf "step %.2f ms, comm %.2f ms (%.2f exposed), median", 1e3 * s, 1e3 * c, 1e3 * e }')" "runs"
      else
        add_row "$tname" FAIL "$(why_failed "$W/c.train.np$tnp.log")" "runs"
      fi
    done
  fi

  # ---- d. mixed-precision training converging -------------------------------------------------
  # Real compute (mlp, 2 epochs) must reach the accuracy target in fp32, fp16 and bf16: on
  # the GPU when gradsync-train computes there; if it refuses (usage error, e.g. "only
  # emulated compute runs on the GPU so far") or there is no GPU, on the CPU, said so.
  if [ -x "$BIN/gradsync-train" ]; then
    local d_dev=() why_cpu="CPU path: gradsync-train has no --device; "
    if [ "$train_cuda" = 1 ] && [ "$gpu_n" -gt 0 ]; then d_dev=(--device cuda) why_cpu=""; fi
    [ "$train_cuda" = 1 ] && [ "$gpu_n" = 0 ] && why_cpu="CPU path: no GPU; "
    for prec in fp32 fp16 bf16; do
      local dlog=$W/d.train.$prec.log
      step "d.train.$prec" 120 "$dlog" "${MPI[@]}" -np 2 "$BIN/gradsync-train" --model mlp "${d_dev[@]}" \
        --precision "$prec" --epochs 2 --samples-per-epoch 4096 --seed 3 --json --out "$W/d.train.$prec.h5"
      if [ ${#d_dev[@]} -gt 0 ] && [ "$STEP_RC" = 2 ]; then
        why_cpu="CPU path ($(grep -m1 -o 'error: .*' "$dlog" | sed 's/^error: //; s/^option --device cuda: //; s/;.*//' |
          cut -c1-60)); "
        d_dev=()
        mv "$dlog" "$W/d.train.$prec.cuda-refused.log"
        step "d.train.$prec" 120 "$dlog" "${MPI[@]}" -np 2 "$BIN/gradsync-train" --model mlp \
          --precision "$prec" --epochs 2 --samples-per-epoch 4096 --seed 3 --json --out "$W/d.train.$prec.h5"
      fi
      local where=CPU acc
      [ ${#d_dev[@]} -gt 0 ] && where=GPU
      acc=$(json_field "$dlog" final_eval_accuracy)
      if [ "$STEP_RC" = 0 ] && awk -v a="$acc" 'BEGIN { exit !(a + 0 >= 0.85) }'; then
        add_row "d.train mlp $prec, 2 ranks, $where" PASS "$why_cpu$(train_fig "$dlog")" "eval acc >= 85%"
      elif [ "$STEP_RC" = 0 ]; then
        add_row "d.train mlp $prec, 2 ranks, $where" FAIL "$why_cpu$(train_fig "$dlog")" "eval acc >= 85%"
      else
        add_row "d.train mlp $prec, 2 ranks, $where" FAIL "$(why_failed "$dlog")" "eval acc >= 85%"
      fi
    done
  else
    add_row "d.train fp16/bf16" SKIP "gradsync-train not built" "eval acc >= 85%"
  fi

  # ---- e. kernel throughput vs device-to-device copy --------------------------------------------
  if [ ! -x "$BIN/gradsync-gpu-kernels-bench" ]; then
    add_row "e.gpu kernels vs D2D copy" SKIP "gradsync-gpu-kernels-bench not built (GRADSYNC_WITH_CUDA=OFF)" ""
  elif [ "$gpu_n" = 0 ]; then
    add_row "e.gpu kernels vs D2D copy" SKIP "$nogpu" "ratio >= target"
  else
    step "e.kernels" 90 "$W/e.kernels.log" "$BIN/gradsync-gpu-kernels-bench" --mib 64 --iters 20 --json "$W/e.kernels.json"
    if [ "$STEP_RC" != 0 ] && [ "$STEP_RC" != 3 ]; then
      add_row "e.gpu kernels vs D2D copy" FAIL "$(why_failed "$W/e.kernels.log")" ""
    else
      local kname kv res
      while read -r _ kname kv; do
        local gbps ratio target verified
        gbps=$(sed -n 's/.*gbps=\([^ ]*\).*/\1/p' <<<"$kv")
        ratio=$(sed -n 's/.*ratio=\([^ ]*\).*/\1/p' <<<"$kv")
        target=$(sed -n 's/.*target=\([^ ]*\).*/\1/p' <<<"$kv")
        verified=$(sed -n 's/.*verified=\([^ ]*\).*/\1/p' <<<"$kv")
        [ "$kname" = powersgd_resnet50 ] && continue  # step f, against torch's hook
        if [ "$kname" = memcpy_d2d ]; then
          add_row "e.D2D copy (cudaMemcpy, 64 MiB)" INFO "$gbps GB/s" ""
          continue
        fi
        if [ "$verified" = NO ]; then res=FAIL
        elif awk -v t="$target" 'BEGIN { exit !(t + 0 == 0) }'; then res=INFO
        elif awk -v r="$ratio" -v t="$target" 'BEGIN { exit !(r + 0 >= t + 0) }'; then res=PASS
        else res=WARN; fi
        local kfig="$gbps GB/s = $ratio x copy"
        [ "$verified" = yes ] && kfig="$kfig, bit-identical to CPU"
        [ "$verified" = NO ] && kfig="$kfig, NOT bit-identical to CPU"
        add_row "e.$kname" "$res" "$kfig" \
          "$(awk -v t="$target" 'BEGIN { if (t + 0 > 0) printf ">= %.2f x copy", t }')"
      done < <(grep '^result ' "$W/e.kernels.log")
    fi
  fi

  # ---- f. our compressors vs PyTorch's DDP hooks ----------------------------------------------
  step "f.compress-ref" 60 "$W/f.compress-ref.log" "$BIN/gradsync-compress-ref" --out "$W/f.compress-ref.h5" \
    --ranks 1,2,4 --steps 3
  if [ "$STEP_RC" = 0 ]; then
    add_row "f.gradsync-compress-ref (CPU)" PASS "$(grep -c '^powersgd rank' "$W/f.compress-ref.log") PowerSGD ranks + fp16/bf16, 3 steps" "runs"
    step "f.compare_torch" 180 "$W/f.compare_torch.log" env PATH="$ORIG_PATH" LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" \
      "$PYTHON" "$ROOT/scripts/gpu/compare_torch.py" "$W/f.compress-ref.h5" --json "$W/f.compare_torch.json"
    local rc=$STEP_RC
    if [ "$rc" = 77 ]; then
      add_row "f.PowerSGD/fp16/bf16 vs torch hooks" SKIP "$(sed -n 's/^SKIP: //p' "$W/f.compare_torch.log" | head -1 | cut -c1-110)" "rel <= 1e-4; casts bit-identical"
    elif grep -q '^compare ' "$W/f.compare_torch.log"; then
      local cname cres cfig ctgt
      while read -r _ cname cres cfig; do
        case "$cname" in powersgd*) ctgt="rel diff <= 1e-4" ;; *) ctgt="bit-identical" ;; esac
        add_row "f.$cname vs torch" "$cres" "${cfig%%  *}" "$ctgt"
      done < <(grep '^compare ' "$W/f.compare_torch.log")
      [ "$rc" = 0 ] || [ "$rc" = 1 ] || add_row "f.compare_torch.py" FAIL "$(why_failed "$W/f.compare_torch.log")" "exit 0"
    else
      add_row "f.PowerSGD/fp16/bf16 vs torch hooks" FAIL "$(why_failed "$W/f.compare_torch.log")" "rel <= 1e-4"
    fi
  else
    add_row "f.gradsync-compress-ref (CPU)" FAIL "$(why_failed "$W/f.compress-ref.log")" "runs"
  fi

  # ---- g. every compressor on device gradients vs the host path -------------------------------
  # The same run (real mlp, 20 steps, seed 3) on the CPU and with --device cuda: 1 rank on
  # NCCL (every compressor in place on the GPU: its CUDA kernels, PowerSGD's products on
  # cuBLAS) and 2 ranks sharing the GPU over MPI (every bucket staged). The GPU's gradients are
  # cuBLAS's (the CPU's to rounding), so the final parameter norm must agree to rel 1e-3
  # (lossless and PowerSGD) or 1e-2 (quantisers and sparsifiers, where rounding can flip a
  # code), and the bytes sent must be equal. Mixed precision: two compressors in fp16/bf16.
  if [ ! -x "$BIN/gradsync-train" ] || [ "$train_cuda" = 0 ]; then
    add_row "g.compressors on cuda vs cpu" SKIP "gradsync-train without --device" "same result"
  elif [ "$gpu_n" = 0 ]; then
    add_row "g.compressors on cuda vs cpu" SKIP "$nogpu" "same result"
  else
    local gspec gcomp gprec gtol gcfg gnp gback gargs gtag
    for gspec in none fp16 bf16 "powersgd:rank=2" "qsgd:levels=16" onebit "topk:ratio=0.1" \
      "powersgd:rank=2@fp16" "topk:ratio=0.1@bf16"; do
      gcomp=${gspec%@*} gprec=fp32
      [ "$gspec" != "$gcomp" ] && gprec=${gspec#*@}
      case "$gcomp" in qsgd* | onebit | topk*) gtol=1e-2 ;; *) gtol=1e-3 ;; esac
      for gcfg in "1|nccl" "2|mpi"; do
        IFS='|' read -r gnp gback <<<"$gcfg"
        gtag=$(tr -c 'a-z0-9\n' '_' <<<"$gspec")-np$gnp
        gargs=(--model mlp --steps 20 --batch-per-rank 64 --samples-per-epoch 4096 --seed 3 --compress "$gcomp"
          --precision "$gprec" --json)
        step "g.$gtag.cpu" 60 "$W/g.$gtag.cpu.log" "${MPI[@]}" -np "$gnp" "$BIN/gradsync-train" "${gargs[@]}" \
          --out "$W/g.$gtag.cpu.h5"
        local crc=$STEP_RC
        step "g.$gtag.cuda" 60 "$W/g.$gtag.cuda.log" "${MPI[@]}" -np "$gnp" "$BIN/gradsync-train" "${gargs[@]}" \
          --device cuda --backend "$gback" --out "$W/g.$gtag.cuda.h5"
        local grow="g.$gspec np$gnp $gback"
        if [ "$crc" != 0 ] || [ "$STEP_RC" != 0 ]; then
          add_row "$grow" FAIL "$(why_failed "$W/g.$gtag.$([ "$crc" != 0 ] && echo cpu || echo cuda).log")" "same result"
          continue
        fi
        local cn gn cb gb
        cn=$(json_field "$W/g.$gtag.cpu.log" final_param_norm) gn=$(json_field "$W/g.$gtag.cuda.log" final_param_norm)
        cb=$(json_field "$W/g.$gtag.cpu.log" median_bytes_sent) gb=$(json_field "$W/g.$gtag.cuda.log" median_bytes_sent)
        if awk -v a="$cn" -v b="$gn" -v t="$gtol" -v x="$cb" -v y="$gb" \
          'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a + 0 > 0 && d <= t * a && x == y) }'; then
          add_row "$grow" PASS "param norm $gn vs cpu $cn, $gb B/step" "rel <= $gtol, same bytes"
        else
          add_row "$grow" FAIL "param norm $gn vs cpu $cn, bytes $gb vs $cb" "rel <= $gtol, same bytes"
        fi
      done
    done
  fi

  # ---- f (last, after g: a speed row must not take g's budget). PowerSGD rank 4 on ResNet-50
  # shapes on the GPU: our device path (cuBLAS, Gram-Schmidt and error feedback on the GPU)
  # against torch's powerSGD_hook on the same GPU (issue 13's target).
  local prow="f.PowerSGD r4 ResNet-50 GPU vs hook" ptgt="faster than the hook"
  if [ ! -x "$BIN/gradsync-gpu-kernels-bench" ]; then
    add_row "$prow" SKIP "gradsync-gpu-kernels-bench not built" "$ptgt"
  elif [ "$gpu_n" = 0 ]; then
    add_row "$prow" SKIP "$nogpu" "$ptgt"
  else
    step "f.powersgd-gpu" 150 "$W/f.powersgd-gpu.log" env PATH="$ORIG_PATH" LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" \
      GRADSYNC_BIN="$BIN" GRADSYNC_BIN_PATH="$PATH" GRADSYNC_BIN_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" \
      "$PYTHON" "$ROOT/scripts/powersgd-vs-torch.py" --device cuda --rank 4 --rounds 1 --calls 10 --out "$W"
    local pline
    pline=$(grep '^result powersgd_vs_torch_cuda ' "$W/f.powersgd-gpu.log" | tail -1)
    if [ "$STEP_RC" = 77 ]; then
      add_row "$prow" SKIP "$(sed -n 's/^SKIP: //p' "$W/f.powersgd-gpu.log" | head -1 | cut -c1-64)" "$ptgt"
    elif [ "$STEP_RC" != 0 ] || [ -z "$pline" ]; then
      add_row "$prow" FAIL "$(why_failed "$W/f.powersgd-gpu.log")" "$ptgt"
    else
      local pg pt px
      pg=$(sed -n 's/.*gradsync_ms=\([^ ]*\).*/\1/p' <<<"$pline")
      pt=$(sed -n 's/.*torch_ms=\([^ ]*\).*/\1/p' <<<"$pline")
      px=$(sed -n 's/.*speedup=\([^ ]*\).*/\1/p' <<<"$pline")
      add_row "$prow" "$(awk -v x="$px" 'BEGIN { print (x + 0 > 1 ? "PASS" : "WARN") }')" \
        "gradsync $pg ms, hook $pt ms = ${px}x" "$ptgt"
    fi
  fi

  # ---- the table -----------------------------------------------------------------------------
  local table=$out_dir/gpu-check.txt nfail=0 r
  {
    echo "# gradsync GPU check — $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(($(date +%s) - T0)) s of ${BUDGET} s"
    echo "# mode: $mode"
    [ -n "$gpu_name" ] && echo "# GPU: $gpu_name"
    printf '%-46s  %-6s  %-64s  %s\n' check result figure target
    printf '%-46s  %-6s  %-64s  %s\n' "$(printf -- '-%.0s' {1..46})" ------ "$(printf -- '-%.0s' {1..64})" ------
    for r in "${ROWS[@]}"; do
      IFS=$'\t' read -r c res fig tgt <<<"$r"
      printf '%-46s  %-6s  %-64s  %s\n' "$c" "$res" "$fig" "$tgt"
      [ "$res" = FAIL ] && nfail=$((nfail + 1))
    done
    local counts
    counts=$(printf '%s\n' "${ROWS[@]}" | cut -f2 | sort | uniq -c | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }')
    echo "# $counts"
    if [ -f "$W/e.kernels.log" ]; then
      echo
      grep -v '^result ' "$W/e.kernels.log"
    fi
  } >"$table"
  echo
  cat "$table"
  cp "$FULL_LOG" "$out_dir/gpu-check.log"
  cp "$table" "$W/"
  (cd "$W" && tar czf "$out_dir/gpu-check-results.tar.gz" --exclude='*.tmp.*' .) 2>/dev/null
  echo
  note "table: $table; results: $out_dir/gpu-check-results.tar.gz; log: $out_dir/gpu-check.log"
  rm -rf "$W"
  [ "$nfail" = 0 ]
}

json_field() {  # log key -> value of "key": in the JSON object the log ends with
  sed -n "s/^ *\"$2\": *\"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" "$1" | tail -1
}
train_fig() {
  local log=$1 acc loss skipped scale
  acc=$(json_field "$log" final_eval_accuracy)
  loss=$(json_field "$log" final_loss)
  skipped=$(json_field "$log" skipped_steps)
  scale=$(json_field "$log" final_loss_scale)
  awk -v a="$acc" -v l="$loss" -v s="$skipped" -v c="$scale" \
    'BEGIN { printf "acc %.1f%%, loss %.4f, %s skipped steps, scale %s", 100 * a, l, s, c }'
}

# ==== main ===================================================================================

[ $# -ge 1 ] || usage 2
cmd=$1
shift
case "$cmd" in
  pack) pack "$@" ;;
  run) run "$@" ;;
  verify) verify ;;
  _verify_inner) verify_inner "$@" ;;
  -h | --help | help) usage 0 ;;
  *) usage 2 ;;
esac
