#!/bin/bash
# End-to-end test of gradsync-bench --device cuda (label gpu).
#
#   bench_cuda.sh BENCH PROBE MPIEXEC [FLAGS...]
#
# Without a usable GPU (PROBE says 0 devices): --device cuda must exit 1 with one line
# "gradsync-bench: error: no CUDA device found (...)" on stderr — one line for 2 ranks too —
# print nothing on stdout and leave no result file. With a GPU: small runs with -c 1 must
# exit 0 with "Out of bounds values : 0 OK" (NCCL on 1 rank; host staging on 1 and on 2
# ranks sharing the GPU). Either way a --device cpu run records device = "cpu" in its file
# (checked with h5py when /usr/bin/python3 has it).
set -u
bench=$1
probe=$2
shift 2
launcher=("$@")

work=$(mktemp -d "${TMPDIR:-/tmp}/gs-gpu-e2e.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

fail() {
  echo "FAIL: $*"
  for f in out err; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
  exit 1
}

read -r ndev reason < <("$probe")
[ -n "${ndev:-}" ] || fail "cuda_probe printed nothing"

if [ "$ndev" = 0 ]; then
  echo "no usable CUDA device ($reason): checking the refusal"
  for np in 1 2; do
    for extra in "" "--algo nccl" "--op pingpong"; do
      [ "$extra" = "--op pingpong" ] && [ "$np" != 2 ] && continue
      rm -f out err
      # shellcheck disable=SC2086
      "${launcher[@]}" -np "$np" "$bench" --device cuda -e 1K $extra --out "$work/never.h5" >out 2>err
      rc=$?
      [ "$rc" = 1 ] || fail "np=$np $extra: exit status $rc, expected 1"
      n=$(grep -c '^gradsync-bench: error: no CUDA device found (' err)
      [ "$n" = 1 ] || fail "np=$np $extra: expected one 'no CUDA device found' line, got $n"
      grep -q "$reason" err || fail "np=$np $extra: the message does not carry CUDA's reason ($reason)"
      [ -s out ] && fail "np=$np $extra: printed on stdout"
      [ -e never.h5 ] && fail "np=$np $extra: left a result file"
    done
  done
  echo "ok   --device cuda refused with status 1 and one line (np 1 and 2)"
else
  echo "$ndev CUDA device(s): small checked runs"
  run_ok() {  # np, args...
    local np=$1
    shift
    rm -f out err r.h5
    "${launcher[@]}" -np "$np" "$bench" --device cuda -n 2 -w 1 -c 1 "$@" --out "$work/r.h5" >out 2>err ||
      fail "np=$np $*: exit status $?"
    grep -q '^# Out of bounds values : 0 OK' out || fail "np=$np $*: results not all right"
    grep -q '^# device: cuda' out || fail "np=$np $*: no '# device: cuda' header line"
    [ -e r.h5 ] || fail "np=$np $*: no result file"
    echo "ok   np=$np $*"
  }
  run_ok 1 --algo nccl -b 8 -e 4M -f 8
  run_ok 1 --algo nccl -b 8 -e 1M -f 16 -d half -o avg
  run_ok 1 --algo nccl --op reducescatter -b 8 -e 1M -f 16
  run_ok 1 --algo nccl --op allgather -b 8 -e 1M -f 16
  run_ok 1 --algo nccl --op alltoall -b 8 -e 1M -f 16
  run_ok 1 --algo nccl --op broadcast -b 8 -e 1M -f 16
  run_ok 1 --algo ring -b 8 -e 1M -f 16
  run_ok 1 --algo mpi -b 8 -e 1M -f 16
  # Host staging: two ranks share the GPU.
  run_ok 2 --algo ring -b 8 -e 1M -f 16 -d bfloat16
  run_ok 2 --algo mpi --op allgather -b 8 -e 256K -f 16
  run_ok 2 --algo pairwise --op alltoall -b 8 -e 256K -f 16
  run_ok 2 --op pingpong -b 0 -e 64K -f 16
fi

# --device cpu records device = "cpu".
rm -f out err c.h5
"${launcher[@]}" -np 1 "$bench" -e 64 -n 1 -w 0 --out "$work/c.h5" >out 2>err || fail "--device cpu run: status $?"
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  dev=$(/usr/bin/python3 -c 'import h5py,sys; print(h5py.File(sys.argv[1],"r").attrs["device"])' c.h5) ||
    fail "no device attribute in the cpu run's file"
  [ "$dev" = cpu ] || fail "device attribute is '$dev', expected cpu"
  echo "ok   device attribute 'cpu'"
else
  echo "(h5py not available: device attribute not checked)"
fi
echo PASS
