#!/usr/bin/env bash
# Model fidelity from microbenchmarks alone, on shared memory (one host):
#   1. per rank count N: one sweep each of pingpong (2 ranks), sendrecv and ring all-reduce
#      (N ranks), 1 KiB .. 32 MiB;
#   2. `gradsync-model calibrate` on those sweeps only -> fabric-N.toml (it says in words
#      what it fitted: alpha, bandwidth, duplex per regime);
#   3. fresh gradsync-bench measurements (REPEATS times) of ring, rabenseifner and rd at
#      1 MiB and 16 MiB on N ranks, each compared with the fabric's prediction.
# Prints one line per (N, algo, size, repeat): measured, predicted, error; and the
# median and largest |error| per N (also in OUT/fidelity.txt). Writes everything under OUT
# (default results/fidelity-<UTC>).
#   scripts/sweep_fidelity.sh [--ranks "2 3 4"] [--repeats 3] [--out DIR] [--iters 10]
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS="2 3 4"; REPEATS=3; ITERS=10; OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) RANKS="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --iters) ITERS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    *) echo "sweep_fidelity.sh: unknown option '$1' (known: --ranks, --repeats, --iters, --out)" >&2; exit 2 ;;
  esac
done
BIN=${BUILD_DIR:-build}/bin
OUT=${OUT:-results/fidelity-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI="mpirun --oversubscribe --bind-to none"
PY=/usr/bin/python3
bench() {  # np out args...
  local np=$1 out=$2; shift 2
  $MPI -np "$np" "$BIN/gradsync-bench" -n "$ITERS" -w 3 --out "$out" "$@" >/dev/null
}
for n in $RANKS; do
  bench 2 "$OUT/pp-$n.h5" --op pingpong -b 1K -e 32M -f 2
  bench "$n" "$OUT/sr-$n.h5" --op sendrecv -b 1K -e 32M -f 2
  bench "$n" "$OUT/ring-$n.h5" --op allreduce --algo ring -b 1K -e 32M -f 2
  "$BIN/gradsync-model" calibrate --name "shm-sweep-$n" -o "$OUT/fabric-$n.toml" \
    "$OUT/pp-$n.h5" "$OUT/sr-$n.h5" "$OUT/ring-$n.h5" > "$OUT/calibrate-$n.txt" 2>&1 || {
    cat "$OUT/calibrate-$n.txt" >&2; exit 1; }
  for r in $(seq 1 "$REPEATS"); do
    for algo in ring rabenseifner rd; do
      bench "$n" "$OUT/fresh-$n-$algo-$r.h5" --op allreduce --algo "$algo" -b 1M -e 16M -f 16
    done
  done
done
"$PY" - "$OUT" "$BIN/gradsync-model" $RANKS <<'PYEOF' | tee "$OUT/fidelity.txt"
import glob, json, subprocess, sys
import h5py, numpy as np
out, model, ranks = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3:]]
rows = []
for n in ranks:
    worst = 0.0
    for f in sorted(glob.glob(f"{out}/fresh-{n}-*.h5")):
        h = h5py.File(f, "r")
        algo = h.attrs["algo"]
        algo = algo.decode() if isinstance(algo, bytes) else algo
        for s, t in zip(h["size_bytes"][:], np.median(h["oop/time_us"][:], axis=1)):
            p = json.loads(subprocess.check_output([model, "collective", "--fabric", f"{out}/fabric-{n}.toml",
                "--algo", algo, "--ranks", str(n), "--bytes", str(int(s)), "--json"]))
            pred = p["results"][0]["time_us"] if "results" in p else p["time_us"]
            err = (pred - t) / t
            worst = max(worst, abs(err))
            rows.append((n, algo, int(s), f, t, pred, err))
            print(f"N={n} {algo:13s} {int(s):>9d} B  measured {t:10.1f} us  predicted {pred:10.1f} us  "
                  f"error {100 * err:+6.1f}%  ({f.rsplit('/', 1)[-1]})")
    errs = [abs(r[6]) for r in rows if r[0] == n]
    if errs:
        print(f"N={n}: median |error| {100 * float(np.median(errs)):.1f}%, largest {100 * worst:.1f}%, "
              f"within 15%: {sum(e <= 0.15 for e in errs)}/{len(errs)}")
PYEOF
