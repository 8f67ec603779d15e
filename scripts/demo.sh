#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the main job on
# localhost ranks (no GPU needed):
#   1. every all-reduce algorithm measured by gradsync-bench (nccl-tests tables, -c 1 checked);
#   2. when run as root: the same ring vs MPI's own all-reduce across a 2-host emulated
#      1 Gbit/s cluster (network namespaces), so traffic really crosses a shaped link;
#   3. the flagship study: bench sweep -> gradsync-model calibrate -> a small training grid
#      (emulated ResNet-50, bucket size x overlap) -> gradsync-model compare -> plots,
#      ending with the predicted-vs-measured table.
# Every run writes HDF5 under results/demo-<time>/; the last lines say where.
#
#   scripts/demo.sh                       # all of it (a few minutes on 2 cores)
#   GRADSYNC_DEMO_TESTBED=0 scripts/demo.sh   # skip the multi-host part
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh >/dev/null
BIN=$(cd "${BUILD_DIR:-build}/bin" && pwd)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=results/demo-$stamp
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --bind-to none -np 2)

echo "== 1/3 all-reduce algorithms on 2 local ranks (gradsync-bench, every result checked) =="
for algo in ring rd rabenseifner tree hier mpi auto; do
  echo
  echo "-- --algo $algo"
  "${mpirun[@]}" "$BIN/gradsync-bench" --op allreduce --algo "$algo" -b 8 -e 16M -f 16 -n 10 -w 3 -c 1 \
    --out "$out/bench-allreduce-$algo.h5" | grep -v '^# Results written'
done

echo
if [[ ${GRADSYNC_DEMO_TESTBED:-1} != 0 && $(id -u) -eq 0 ]] && scripts/testbed.sh probe >/dev/null 2>&1; then
  echo "== 2/3 ring vs MPI_Allreduce across 2 emulated hosts at 1 Gbit/s (line rate 125 MB/s) =="
  tb=(scripts/testbed.sh --name gsdemo)
  trap '"${tb[@]}" down >/dev/null 2>&1 || true' EXIT
  "${tb[@]}" up --hosts 2 --rate 1gbit --subnet 10.77.60 >/dev/null
  # btl_tcp_links 2: a second TCP connection per peer (the NCCL_NSOCKS_PERTHREAD analog);
  # with one, Open MPI's both-ways exchange stalls well below the line rate.
  for cfg in "ring 1" "ring 2" "mpi 1" "mpi 2"; do
    set -- $cfg
    "${tb[@]}" run --mca btl_tcp_links "$2" -- "$BIN/gradsync-bench" --algo "$1" -b 16M -e 16M -n 5 -w 1 -c 1 \
      --out "$PWD/$out/testbed-allreduce-$1-links$2.h5" >/dev/null 2> >(grep -v "^# testbed" >&2)
  done
  /usr/bin/python3 - "$out" <<'PY'
import sys, h5py
for algo in ("ring", "mpi"):
    for links in (1, 2):
        with h5py.File(f"{sys.argv[1]}/testbed-allreduce-{algo}-links{links}.h5") as f:
            bw = f["oop/busbw_GBps"][0] * 1e3
            print(f"  --algo {algo:4s} btl_tcp_links {links}: 16 MiB busbw {bw:6.1f} MB/s = {bw / 125:4.0%} of the "
                  f"1 Gbit/s line, #wrong {int(f['oop/nwrong'][0])}")
PY
  "${tb[@]}" down >/dev/null
  trap - EXIT
else
  echo "== 2/3 multi-host testbed skipped (needs root and network namespaces; GRADSYNC_DEMO_TESTBED=0 skips it) =="
fi

echo
echo "== 3/3 flagship: calibrate the model on this machine, train a small grid, compare =="
GRADSYNC_BIN="$BIN" /usr/bin/python3 scripts/study flagship --out "$out/flagship"

echo
echo "Results (HDF5, open with h5py; schema in results/README.md):"
find "$out" -maxdepth 1 -name '*.h5' | sort | sed 's/^/  /'
echo "  $out/flagship/   (study.h5, model/, plots/*.png, conclusions.md)"
