#!/usr/bin/python3
"""scripts/ring-vs-gloo.py — gradsync's ring all-reduce over MPI vs gloo's, same ranks, alternating.

    scripts/ring-vs-gloo.py [--rounds 3] [-b 1K] [-e 64M] [-f 4] [-n 10] [--ranks 2]
                            [--comm-sched other,rr] [--out DIR]

Purpose: the ratio table of issue 12's target: per size, gradsync-bench --algo ring (mpirun)
over the torch bench on gloo (scripts/torchrun), 1 KiB .. 64 MiB.
Approach: `rounds` rounds; each round runs the gradsync sweep then the torch sweep (order
swapped every other round), so slow phases of a shared machine hit both alike. Per size the
time is the median over all rounds' raw iterations (slowest rank per iteration, as both
files store it); ratio = gloo / gradsync (> 1: gradsync is faster). --comm-sched runs the
torch sweep once per listed policy of gloo's threads (the bench's --comm-sched; `rr`
needs root or CAP_SYS_NICE), each its own column; the first is `gloo`, the others
`gloo-<policy>`. Needs build/bin (or
GRADSYNC_BIN) and the PyTorch venv. Writes the files and ratio.json under --out.
"""
import argparse
import json
import os
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-b", default="1K")
    ap.add_argument("-e", default="64M")
    ap.add_argument("-f", default="4")
    ap.add_argument("-n", default="10")
    ap.add_argument("-w", default="2")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--comm-sched", default="other",
                    help="comma list of policies for gloo's threads, one torch sweep each (default other)")
    ap.add_argument("--out", default=os.path.join("results", "ring-vs-gloo"))
    o = ap.parse_args()
    if o.rounds < 1:
        ap.error(f"option --rounds: must be >= 1, got {o.rounds}")
    bindir = os.environ.get("GRADSYNC_BIN", os.path.join(REPO, "build", "bin"))
    bench = os.path.join(bindir, "gradsync-bench")
    if not os.access(bench, os.X_OK):
        print(f"ring-vs-gloo: error: {bench} not found; build first (scripts/build.sh) or set GRADSYNC_BIN",
              file=sys.stderr)
        return 2
    os.makedirs(o.out, exist_ok=True)
    sweep = ["-b", o.b, "-e", o.e, "-f", o.f, "-n", o.n, "-w", o.w]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    scheds = [x.strip() for x in o.comm_sched.split(",") if x.strip()]
    if not scheds or len(set(scheds)) != len(scheds):
        ap.error(f"option --comm-sched: a comma list of distinct policies, got '{o.comm_sched}'")
    glo = {x: "gloo" if i == 0 else "gloo-" + x.replace(":", "") for i, x in enumerate(scheds)}
    files = {"gradsync": [], **{k: [] for k in glo.values()}}
    for r in range(o.rounds):
        runs = [("gradsync", ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(o.ranks), bench,
                              "--op", "allreduce", "--algo", "ring", "-c", "1"] + sweep)]
        runs += [(kind, [os.path.join(HERE, "torchrun"), "--nproc-per-node", str(o.ranks), "-m",
                         "gradsync_torch.bench", "--op", "allreduce", "-c", "1", "--comm-sched", x] + sweep)
                 for x, kind in glo.items()]
        if r % 2:
            runs.reverse()
        for kind, argv in runs:
            path = os.path.abspath(os.path.join(o.out, f"{kind}-{r}.h5"))
            p = subprocess.run(argv + ["--out", path], env=env, capture_output=True, text=True)
            if p.returncode != 0:
                print(f"ring-vs-gloo: error: round {r} {kind} exited {p.returncode}: "
                      f"{(p.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
                return 1
            files[kind].append(path)
            print(f"round {r + 1}/{o.rounds}: {kind} done", file=sys.stderr, flush=True)
    med = {}
    for kind, paths in files.items():
        per = {}
        for path in paths:
            with h5py.File(path, "r") as f:
                for s, row in zip(f["size_bytes"][:], f["oop/time_us"][:]):
                    per.setdefault(int(s), []).extend(row.tolist())
        med[kind] = {s: float(np.median(v)) for s, v in per.items()}
    sizes = sorted(set.intersection(*(set(m) for m in med.values())))
    keys = {kind: kind.replace("-", "_") for kind in glo.values()}  # ratio.json's column names
    rows = []
    for s in sizes:
        row = {"bytes": s, "gradsync_ring_us": med["gradsync"][s]}
        for kind, key in keys.items():
            row[f"{key}_us"] = med[kind][s]
            row[f"ratio_{key}_over_ring"] = med[kind][s] / med["gradsync"][s]
        rows.append(row)
    print(f"# {o.ranks} ranks, {o.rounds} alternating rounds x {o.n} iterations; median of the slowest rank per iteration"
          f"; gloo's threads: {', '.join(f'{k} = {x}' for x, k in glo.items())}")
    head = "".join(f"  {k + ' (us)':>14s}  {k + '/ring':>14s}" for k in glo.values())
    print(f"# {'bytes':>10s}  {'gradsync ring (us)':>18s}{head}")
    for r in rows:
        cols = "".join(f"  {r[key + '_us']:>14.1f}  {r['ratio_' + key + '_over_ring']:>14.2f}" for key in keys.values())
        print(f"  {r['bytes']:>10d}  {r['gradsync_ring_us']:>18.1f}{cols}")
    with open(os.path.join(o.out, "ratio.json"), "w") as fh:
        json.dump({"rounds": o.rounds, "ranks": o.ranks, "comm_sched": glo, "rows": rows, "files": files}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
