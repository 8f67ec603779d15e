#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the main job on
# localhost ranks (no GPU needed). Today the main job is a gradsync-bench sweep of every
# all-reduce algorithm on 2 local ranks; each run writes an HDF5 file under results/.
#
#   scripts/demo.sh                  # 2 ranks
#   GRADSYNC_DEMO_RANKS=4 scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh >/dev/null
BIN=${BUILD_DIR:-build}/bin
ranks=${GRADSYNC_DEMO_RANKS:-2}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=results/demo-$stamp
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --bind-to none -np "$ranks")

echo "== gradsync demo: all-reduce algorithms on $ranks local ranks =="
for algo in ring rd rabenseifner tree hier mpi auto; do
  echo
  echo "-- --algo $algo"
  "${mpirun[@]}" "$BIN/gradsync-bench" --op allreduce --algo "$algo" -b 8 -e 16M -f 8 -n 10 -w 3 -c 1 \
    --out "$out/bench-allreduce-$algo.h5"
done
if ((ranks == 2)); then
  echo
  echo "-- pingpong (input for gradsync-model calibrate)"
  "${mpirun[@]}" "$BIN/gradsync-bench" --op pingpong -b 1 -e 16M -f 4 -n 10 -w 3 --out "$out/bench-pingpong.h5"
fi
echo
echo "Results (HDF5, open with h5py; schema in results/README.md):"
ls -1 "$out"/*.h5 | sed 's/^/  /'
