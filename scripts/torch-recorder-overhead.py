#!/usr/bin/python3
"""scripts/torch-recorder-overhead.py — step time of the example trainer with vs without the recorder.

    scripts/torch-recorder-overhead.py [--runs 5] [--pairs 20] [--block 5] [-- EXAMPLE OPTIONS...]

Purpose: issue 12's target "recorder overhead within 2% (median of 5 runs)".
Approach: `runs` jobs of gradsync_torch.overhead under scripts/torchrun (2 ranks). Each job
trains a plain and a recorded copy of the example's network in alternating blocks of
`block` steps (`pairs` pairs after warm-up), so that both copies see the same host state,
and gives overhead = median(recorded steps) / median(plain steps) - 1. Separate runs of
the example move by 10-15% between each other on a shared 2-core host, more than the
effect measured; inside one job the two copies share that noise. Prints each job and the
median over jobs; writes overhead.json under --out.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--runs", type=int, default=5, help="jobs (default 5)")
    ap.add_argument("--pairs", type=int, default=20, help="pairs of blocks per job (default 20)")
    ap.add_argument("--block", type=int, default=5, help="steps per block (default 5)")
    ap.add_argument("--out", default=os.path.join("results", "recorder-overhead"))
    ap.add_argument("extra", nargs="*", help="options for gradsync_torch.overhead / example (after --)")
    o = ap.parse_args()
    for name in ("runs", "pairs", "block"):
        if getattr(o, name) < 1:
            ap.error(f"option --{name}: must be >= 1, got {getattr(o, name)}")
    os.makedirs(o.out, exist_ok=True)
    jobs = []
    for i in range(o.runs):
        tj = os.path.abspath(os.path.join(o.out, f"job-{i}.json"))
        argv = [os.path.join(HERE, "torchrun"), "--nproc-per-node", "2", "-m", "gradsync_torch.overhead",
                "--pairs", str(o.pairs), "--block", str(o.block), "--json", tj] + o.extra
        p = subprocess.run(argv, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"torch-recorder-overhead: error: job {i} exited {p.returncode}: "
                  f"{(p.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
            return 1
        with open(tj) as fh:
            j = json.load(fh)
        jobs.append({k: j[k] for k in ("plain_s", "recorded_s", "overhead_pct", "pair_ratio_median",
                                       "pair_ratio_p10", "pair_ratio_p90")})
        print(f"job {i + 1}/{o.runs}: plain {j['plain_s'] * 1e3:.2f} ms, recorded {j['recorded_s'] * 1e3:.2f} ms, "
              f"overhead {j['overhead_pct']:+.2f}% (pair ratios p10 {j['pair_ratio_p10']:.3f} .. "
              f"p90 {j['pair_ratio_p90']:.3f})", flush=True)
    med = statistics.median(j["overhead_pct"] for j in jobs)
    print(f"# median over {o.runs} jobs: overhead {med:+.2f}% "
          f"(jobs {min(j['overhead_pct'] for j in jobs):+.2f}% .. {max(j['overhead_pct'] for j in jobs):+.2f}%)")
    with open(os.path.join(o.out, "overhead.json"), "w") as fh:
        json.dump({"jobs": jobs, "overhead_pct": med, "pairs": o.pairs, "block": o.block, "extra": o.extra}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
