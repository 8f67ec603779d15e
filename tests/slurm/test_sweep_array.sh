#!/usr/bin/env bash
# tests/slurm/test_sweep_array.sh SLURM_SCRIPTS_DIR BENCH
#
# Starts a private local Slurm (own folder, own ports 16837/16838, own munged), submits a
# 2-task job array through sweep-array.sbatch (each task: a 2-rank MPI ping-pong over
# `srun --mpi=pmix` writing an HDF5 file), waits for it (bounded), checks that both result
# files exist and open with h5py, and stops the cluster on every exit.
# Exit: 0 pass, 1 fail, 77 skip (not root, or slurm-wlm/munge not installed).
set -uo pipefail

SD=${1:?usage: test_sweep_array.sh SLURM_SCRIPTS_DIR BENCH}
BENCH=${2:?usage: test_sweep_array.sh SLURM_SCRIPTS_DIR BENCH}
CTLD_PORT=${GS_TEST_SLURM_CTLD_PORT:-16837}
SLURMD_PORT=${GS_TEST_SLURM_SLURMD_PORT:-16838}
PY=/usr/bin/python3    # the python3 first on PATH may lack h5py

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }

[[ $(id -u) -eq 0 ]] || skip "needs root (SlurmUser=root)"
for t in munged slurmctld slurmd sbatch; do
  command -v "$t" >/dev/null 2>&1 || [[ -x /usr/sbin/$t ]] || skip "$t not found (Debian packages slurm-wlm munge)"
done
[[ -x $BENCH ]] || fail "benchmark program not found: $BENCH"
$PY -c 'import h5py' 2>/dev/null || fail "$PY cannot import h5py (Debian package python3-h5py)"

WORK=$(mktemp -d /tmp/gs-slurm-test.XXXXXX)
chmod 755 "$WORK"
CL=(bash "$SD/local-cluster.sh" --dir "$WORK/cluster" --ctld-port "$CTLD_PORT" --slurmd-port "$SLURMD_PORT")
cleanup() {
  if [[ -n ${FAILED:-} && -d $WORK ]]; then
    for f in "$WORK"/*.out "$WORK"/cluster/log/*.log; do
      [[ -f $f ]] && { echo "---- $f"; tail -n 20 "$f"; }
    done >&2
  fi
  "${CL[@]}" stop >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT
failx() { FAILED=1; fail "$@"; }

exp=$("${CL[@]}" start) || failx "local-cluster.sh start"
eval "$exp"
[[ ${SLURM_CONF:-} == "$WORK/cluster/slurm.conf" ]] || failx "start did not print the SLURM_CONF line: $exp"
"${CL[@]}" start >/dev/null || failx "a second start should be a no-op"
"${CL[@]}" status || failx "status"

cat >"$WORK/plan.txt" <<EOF
# test plan: two 2-rank ping-pongs, one result file per task
\$GS_LAUNCH $BENCH --op pingpong -b 1K -e 64K -n 5 -w 1 --out {out}

\$GS_LAUNCH $BENCH --op pingpong -b 4K -e 16K -n 5 -w 1 --out {out}
EOF

cd "$WORK" || failx "cd $WORK"
t0=$SECONDS
timeout 100 sbatch --wait --array=1-2 --ntasks=2 --time=2 -o "$WORK/task-%A_%a.out" \
  "$SD/sweep-array.sbatch" "$WORK/plan.txt" "$WORK/results"
rc=$?
echo "sbatch --wait returned $rc after $((SECONDS - t0)) s"
((rc == 124)) && failx "the job array did not finish within 100 s"
((rc == 0)) || failx "the job array failed (sbatch --wait exit status $rc)"
cat "$WORK"/task-*.out

for k in 1 2; do
  f=$WORK/results/task-$k.h5
  [[ -s $f ]] || failx "missing result $f"
  [[ $(cat "$WORK/results/task-$k.rc") == 0 ]] || failx "task $k recorded a non-zero status"
  $PY - "$f" <<'EOF' || failx "$f does not open as HDF5 with h5py"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    names = []
    f.visit(names.append)
    assert names or f.attrs, "empty file"
    print(f"{sys.argv[1]}: {len(names)} objects, {len(f.attrs)} root attributes")
EOF
done
echo "PASS"
