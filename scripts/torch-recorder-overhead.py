#!/usr/bin/python3
"""scripts/torch-recorder-overhead.py — step time of the example trainer with vs without the recorder.

    scripts/torch-recorder-overhead.py [--runs 5] [--pairs 20] [--block 5] [--order both] [-- EXAMPLE OPTIONS...]

Purpose: issue 12's target "recorder overhead within 2% (median of 5 runs)".
Approach: `runs` jobs of gradsync_torch.overhead under scripts/torchrun (2 ranks). Each job
trains a plain and a recorded copy of the example's network in alternating blocks of
`block` steps (`pairs` pairs after warm-up), so that both copies see the same host state,
and gives overhead = median(recorded steps) / median(plain steps) - 1. Separate runs of
the example move by 10-15% between each other on a shared 2-core host, more than the
effect measured; inside one job the two copies share that noise.
The block order is not neutral: with neither copy recorded (`-- --control`, an A/A run)
the copy whose block opens the first pair read 0.3-1.8% faster under `--comm-sched rr`
(2026-12-05, gradsync_torch/overhead.py). So by default (`--order both`) a run is two
jobs, one opening with the plain copy's block and one with the recorded copy's, and its
overhead is the mean of the two, in which that difference cancels. Prints each job and
run and the median over runs; writes overhead.json under --out.
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
    ap.add_argument("--runs", type=int, default=5, help="runs (default 5; a run is two jobs with --order both)")
    ap.add_argument("--pairs", type=int, default=20, help="pairs of blocks per job (default 20)")
    ap.add_argument("--block", type=int, default=5, help="steps per block (default 5)")
    ap.add_argument("--order", choices=["both", "plain", "recorded"], default="both",
                    help="which copy's block opens the pairs: both (a run = one job each way, their mean; "
                         "default), or always plain / recorded")
    ap.add_argument("--out", default=os.path.join("results", "recorder-overhead"),
                    help="folder for the jobs' JSON and overhead.json (default results/recorder-overhead)")
    ap.add_argument("extra", nargs="*", help="options for gradsync_torch.overhead / example (after --)")
    o = ap.parse_args()
    for name in ("runs", "pairs", "block"):
        if getattr(o, name) < 1:
            ap.error(f"option --{name}: must be >= 1, got {getattr(o, name)}")
    os.makedirs(o.out, exist_ok=True)
    firsts = ["plain", "recorded"] if o.order == "both" else [o.order]
    jobs, runs = [], []
    for i in range(o.runs):
        run = []
        # Alternate which way goes first from run to run.
        for first in (firsts if i % 2 == 0 else firsts[::-1]):
            tj = os.path.abspath(os.path.join(o.out, f"job-{i}-{first}-first.json"))
            argv = [os.path.join(HERE, "torchrun"), "--nproc-per-node", "2", "-m", "gradsync_torch.overhead",
                    "--pairs", str(o.pairs), "--block", str(o.block), "--first-block", first, "--json", tj] + o.extra
            p = subprocess.run(argv, capture_output=True, text=True)
            if p.returncode != 0:
                print(f"torch-recorder-overhead: error: run {i + 1} (first block {first}) exited {p.returncode}: "
                      f"{(p.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
                return 1
            with open(tj) as fh:
                j = json.load(fh)
            job = {k: j[k] for k in ("plain_s", "recorded_s", "overhead_pct", "pair_ratio_median",
                                     "pair_ratio_p10", "pair_ratio_p90")}
            job.update(run=i, first_block=first)
            jobs.append(job)
            run.append(j["overhead_pct"])
            print(f"run {i + 1}/{o.runs}, first block {first}: plain {j['plain_s'] * 1e3:.2f} ms, recorded "
                  f"{j['recorded_s'] * 1e3:.2f} ms, overhead {j['overhead_pct']:+.2f}% (pair ratios p10 "
                  f"{j['pair_ratio_p10']:.3f} .. p90 {j['pair_ratio_p90']:.3f})", flush=True)
        runs.append(statistics.mean(run))
        if len(run) > 1:
            print(f"run {i + 1}/{o.runs}: overhead {runs[-1]:+.2f}% (mean of both orders)", flush=True)
    med = statistics.median(runs)
    by_first = {c: statistics.median(j["overhead_pct"] for j in jobs if j["first_block"] == c) for c in firsts}
    print(f"# median over {o.runs} runs: overhead {med:+.2f}% (runs {min(runs):+.2f}% .. {max(runs):+.2f}%)"
          + ("" if len(firsts) == 1 else
             f"; plain block first {by_first['plain']:+.2f}%, recorded block first {by_first['recorded']:+.2f}%"))
    with open(os.path.join(o.out, "overhead.json"), "w") as fh:
        json.dump({"jobs": jobs, "runs": runs, "overhead_pct": med, "by_first_block": by_first, "order": o.order,
                   "pairs": o.pairs, "block": o.block, "extra": o.extra}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
