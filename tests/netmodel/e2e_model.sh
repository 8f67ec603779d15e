#!/bin/bash
# End-to-end tests of gradsync-model: usage errors exit 2 and name the option, run-time
# errors exit 1, every --json output is one parseable JSON object with the agreed keys,
# the hand-checkable Hockney numbers come out exactly, and a 10^5-configuration grid runs.
# usage: e2e_model.sh GRADSYNC_MODEL PYTHON WORKDIR
set -u
M=$1; PY=$2; W=$3
rm -rf "$W"; mkdir -p "$W"
fail=0
expect_rc() {  # expect_rc RC PATTERN cmd...
  local want=$1 pat=$2; shift 2
  "$@" >"$W/out" 2>"$W/err"; local rc=$?
  if [ "$rc" != "$want" ]; then echo "FAIL (rc $rc, want $want): $*"; cat "$W/err"; fail=1; return; fi
  if [ -n "$pat" ] && ! grep -q -- "$pat" "$W/err" "$W/out"; then echo "FAIL (no '$pat'): $*"; cat "$W/err"; fail=1; fi
}
json_keys() {  # json_keys KEY... : stdout of the last command parses and has the keys
  "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); missing=[k for k in sys.argv[2:] if k not in d]; sys.exit(1 if missing else 0)' "$W/out" "$@" \
    || { echo "FAIL: JSON without $*:"; cat "$W/out"; fail=1; }
}

expect_rc 0 "seed-roce" "$M" fabrics
expect_rc 0 "" "$M" fabrics --json; json_keys fabrics
expect_rc 0 "alpha_us" "$M" fabrics --show tcp-100g
expect_rc 2 "unknown command" "$M" frobnicate
expect_rc 2 "" "$M"

# collective: the Hockney formula by hand (ring, 8 ranks, 1 MiB, 10 us, 1 GB/s = 1975.008 us)
expect_rc 0 "" "$M" collective --op allreduce --algo ring --ranks 8 --bytes 1M --alpha-us 10 --bw-GBps 1 --json
json_keys time_us algbw_GBps busbw_GBps
"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if abs(d["time_us"]-1975.008)<1e-6 else 1)' "$W/out" \
  || { echo "FAIL: ring time"; cat "$W/out"; fail=1; }
# rd, 8 ranks: 3 (10 us + 1 MiB / 1 GB/s) = 3175.728 us
expect_rc 0 "" "$M" collective --algo rd --ranks 8 --bytes 1048576 --alpha-us 10 --bw-GBps 1 --json
"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if abs(d["time_us"]-3175.728)<1e-6 else 1)' "$W/out" \
  || { echo "FAIL: rd time"; cat "$W/out"; fail=1; }
expect_rc 0 "algo_used" "$M" collective --algo auto --ranks 16 --nodes 2 --bytes 8,64K,1M,64M --fabric ib-hdr
expect_rc 2 "--ranks" "$M" collective --bytes 1M --fabric ib-hdr
expect_rc 2 "--bw-GBps" "$M" collective --ranks 4 --bytes 1M --alpha-us 10 --bw-GBps -1
expect_rc 2 "--nodes" "$M" collective --ranks 6 --nodes 4 --bytes 1M --fabric ib-hdr
expect_rc 2 "butterfly" "$M" collective --algo butterfly --ranks 4 --bytes 1M --fabric ib-hdr
expect_rc 2 "no-such-fabric" "$M" collective --ranks 4 --bytes 1M --fabric no-such-fabric
expect_rc 2 "--bytes" "$M" collective --ranks 4 --bytes 1Q --fabric ib-hdr
printf 'name = "bad"\n[inter]\nalpha_us = 3\nbw_GBps = 0\n' > "$W/bad.toml"
expect_rc 2 "bad.toml:4" "$M" collective --ranks 4 --bytes 1M --fabric "$W/bad.toml"
expect_rc 2 "" "$M" collective --ranks 4 --bytes 1M --fabric ib-hdr --unknown-option

# tune: a recommendation, JSON keys, knobs fixed, one-line errors naming the option
expect_rc 0 "recommended:" "$M" tune --model resnet50 --fabric seed-tcp --nodes 4 --batch-per-rank 32
expect_rc 0 "" "$M" tune --model resnet50 --fabric seed-tcp,ib-hdr --nodes 2 --ranks-per-node 2 --algo ring,hier --compress "none;powersgd:rank=4" --json
json_keys recommended default predicted_gain_pct top best_per_compressor bound evaluated seconds
expect_rc 2 "--nodes" "$M" tune --model resnet50 --fabric seed-tcp --nodes 2,4
expect_rc 2 "--fabric" "$M" tune --model resnet50
expect_rc 2 "butterfly" "$M" tune --model resnet50 --fabric seed-tcp --algo butterfly
expect_rc 2 "--compress" "$M" tune --model resnet50 --fabric seed-tcp --compress "none;"

# predict: single configuration, JSON keys, HDF5 output
expect_rc 0 "epoch" "$M" predict --model resnet50 --fabric roce-100g --nodes 16 --ranks-per-node 8 --batch-per-rank 32
expect_rc 0 "" "$M" predict --model resnet50 --fabric roce-100g --nodes 2 --ranks-per-node 8 --compress powersgd:rank=4 --precision fp16 --json --out "$W/pred.h5"
json_keys step_time_s epoch_time_s comm_exposed_s buckets
[ -s "$W/pred.h5" ] || { echo "FAIL: no pred.h5"; fail=1; }
expect_rc 2 "--fabric" "$M" predict --model resnet50
expect_rc 2 "--nodes" "$M" predict --fabric ib-hdr --nodes 0
expect_rc 2 "--nodes" "$M" predict --fabric ib-hdr --nodes 5..1
expect_rc 2 "--compress" "$M" predict --fabric ib-hdr --compress zip
expect_rc 2 "--precision" "$M" predict --fabric ib-hdr --precision fp8
expect_rc 2 "unknown model" "$M" predict --fabric ib-hdr --model alexnet
# grid: 10^5 configurations in one HDF5 table (correctness only; timing is a benchmark)
expect_rc 0 "100000 configurations" "$M" predict --model resnet50 --fabric roce-100g --ranks-per-node 8 --nodes 1..1000 --bucket-mb 1..100 --out "$W/grid.h5"
expect_rc 0 "" "$M" predict --fabric seed-tcp,seed-roce,ib-hdr --nodes 8 --json
json_keys configs best rows

# calibrate / compare refusals (the unit tests cover the fits themselves)
expect_rc 2 "no input files" "$M" calibrate -o "$W/x.toml"
expect_rc 2 "" "$M" calibrate "$W/pred.h5" -o "$W/x.toml"
expect_rc 2 "does-not-exist.h5" "$M" calibrate "$W/does-not-exist.h5" -o "$W/x.toml"
expect_rc 2 "--fabric" "$M" compare "$W/pred.h5"
expect_rc 2 "not a gradsync-train file" "$M" compare "$W/pred.h5" --fabric ib-hdr
exit $fail
