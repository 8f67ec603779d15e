#!/bin/bash
# End-to-end: the commands of issue #11 as written, on the public logs of
# tests/data/nccl-tests/ (copied to the names the issue uses), their exit codes and
# messages, and (when mpiexec and gradsync-bench are given) gradsync-bench -J: the
# nccl-tests JSON it writes is read back by calibrate with the same sizes and times as its
# stdout table and its HDF5 file.
# usage: e2e_nccl_logs.sh GRADSYNC_MODEL PYTHON DATA_DIR WORKDIR [GRADSYNC_BENCH MPIEXEC]
set -u
M=$1; PY=$2; D=$3; W=$4; B=${5:-}; MPI=${6:-}
rm -rf "$W"; mkdir -p "$W"; cd "$W" || exit 1
fail=0
expect_rc() {  # expect_rc RC PATTERN cmd...
  local want=$1 pat=$2; shift 2
  "$@" >"$W/out" 2>"$W/err"; local rc=$?
  if [ "$rc" != "$want" ]; then echo "FAIL (rc $rc, want $want): $*"; cat "$W/err" "$W/out"; fail=1; return; fi
  if [ -n "$pat" ] && ! grep -q -- "$pat" "$W/err" "$W/out"; then echo "FAIL (no '$pat'): $*"; cat "$W/err" "$W/out"; fail=1; fi
}

cp "$D/tcpxo_h100_2x8.log" all_reduce_2x8.log
cp "$D/socket_rtx5090_2x1.log" tcp_2x1.log
# The three commands of the issue, as written.
expect_rc 0 "2 node(s) x 8 rank(s) (devices block)" "$M" calibrate all_reduce_2x8.log --intra nvlink-h100 -o mycluster.toml
grep -q 'intra level from nvlink-h100' mycluster.toml || { echo "FAIL: mycluster.toml does not say where intra came from"; fail=1; }
expect_rc 0 "(--nodes/--ranks-per-node)" "$M" calibrate tcp_2x1.log --nodes 2 --ranks-per-node 1 -o tcp.toml
expect_rc 0 "" "$M" collective --op allreduce --algo nccl --ranks 32 --nodes 4 --bytes 1G --fabric mycluster.toml --json
"$PY" - "$W/out" <<'EOF' || { echo "FAIL: collective --algo nccl JSON"; cat "$W/out"; fail=1; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["algo"] == "nccl" and d["algo_used"].startswith("nccl:"), d
assert d["ranks"] == 32 and d["nodes"] == 4 and d["time_us"] > 0, d
EOF
# One calibrate, one predict: the step time of a model on 2x and 4x the nodes.
expect_rc 0 "fastest step" "$M" predict --model resnet50 --fabric mycluster.toml --nodes 2,4,8 --ranks-per-node 8 \
  --batch-per-rank 64 --algo nccl --compute-profile h200

# Bad input (an unusable log, a bad override): one line naming the file and line, exit 2.
printf '#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n 1024 256 float sum -1 3.0\n' > all_reduce_perf_cut.log
expect_rc 2 "all_reduce_perf_cut.log:2: row has 6 columns" "$M" calibrate all_reduce_perf_cut.log -o x.toml
expect_rc 2 "give --op" "$M" calibrate "$D/layouts/unnamed_table.log" -o x.toml
expect_rc 0 "op alltoall (--op)" "$M" calibrate "$D/layouts/unnamed_table.log" --op alltoall -o x.toml
expect_rc 2 "--nics-per-node" "$M" calibrate tcp_2x1.log --nics-per-node 0 -o x.toml
expect_rc 2 "unknown collective op" "$M" calibrate tcp_2x1.log --op allscatter -o x.toml
expect_rc 2 "no nccl-tests table header" "$M" calibrate "$D/README.md" -o x.toml
# JSON output lists what was inferred.
expect_rc 0 "" "$M" calibrate "$D/layouts/all_reduce_perf.json" -o j.toml --json
"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert "nccl-tests json" in d["inputs"][0], d["inputs"]' "$W/out" \
  || { echo "FAIL: calibrate --json inputs"; cat "$W/out"; fail=1; }

# gradsync-bench -J round trip (needs MPI; skipped when not given).
if [ -n "$B" ] && [ -n "$MPI" ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  "$MPI" --oversubscribe --bind-to none -np 2 "$B" -b 1K -e 256K -f 4 -n 3 -w 1 --out gb.h5 -J gb.json >gb.txt 2>gb.err \
    || { echo "FAIL: gradsync-bench -J"; cat gb.err; fail=1; }
  "$PY" - gb.json <<'EOF' || { echo "FAIL: -J is not nccl-tests' JSON format"; head -c 600 gb.json; fail=1; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["version"] == 2
for k in ("start_time", "args", "env", "config", "results", "out_of_bounds", "average_bus_bandwidth", "errors", "end_time"):
    assert k in d, k
assert len(d["config"]["devices"]) == 2 and "hostname" in d["config"]["devices"][0]
r = d["results"][0]
for k in ("size", "count", "type", "redop", "root", "out_of_place", "in_place"):
    assert k in r, k
for k in ("time", "alg_bw", "bus_bw", "nwrong"):
    assert k in r["out_of_place"], k
assert r["size"] == 1024 and r["redop"] == "sum" and r["root"].strip() == "-1"
EOF
  for f in gb.json gb.txt gb.h5; do
    "$M" calibrate "$f" --points-only --json >"$f.pts" 2>"$f.err" || { echo "FAIL: calibrate --points-only $f"; cat "$f.err"; fail=1; }
  done
  "$PY" - gb.json.pts gb.txt.pts gb.h5.pts <<'EOF' || { echo "FAIL: -J / table / HDF5 points differ"; fail=1; }
import json, sys
def pts(p):
    return [(x["bytes"], x["algo"], x["nodes"], x["ranks_per_node"], x["time_us"]) for x in json.load(open(p))["points"]]
j, t, h = (pts(p) for p in sys.argv[1:])
assert [x[:4] for x in j] == [x[:4] for x in t] == [x[:4] for x in h], (j, t, h)
assert len(j) == 5, j  # 1K, 4K, 16K, 64K, 256K
for a, b in zip(j, t):  # the same mean: the table prints 4 significant digits
    assert abs(a[4] - b[4]) <= 0.01 * a[4] + 0.01, (a, b)
EOF
fi
[ $fail = 0 ] && echo "e2e_nccl_logs: all passed"
exit $fail
