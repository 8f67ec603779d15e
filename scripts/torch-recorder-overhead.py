#!/usr/bin/python3
"""scripts/torch-recorder-overhead.py — step time of the example trainer with vs without the recorder.

    scripts/torch-recorder-overhead.py [--runs 5] [--steps 40] [-- EXAMPLE OPTIONS...]

Purpose: issue 12's target "recorder overhead within 2% (median of 5 runs)".
Approach: `runs` pairs of runs of gradsync_torch.example under scripts/torchrun (2 ranks),
recorded and --no-record alternating (the order swapped every other pair); each run's step
time is the median of the loop's own per-step times after warm-up (rank 0, --timing-json,
measured identically in both modes); overhead = median(recorded) / median(plain) - 1.
Prints each run and the summary; writes overhead.json under --out.
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
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--out", default=os.path.join("results", "recorder-overhead"))
    ap.add_argument("extra", nargs="*", help="options for gradsync_torch.example (after --)")
    o = ap.parse_args()
    if o.runs < 1:
        ap.error(f"option --runs: must be >= 1, got {o.runs}")
    os.makedirs(o.out, exist_ok=True)
    med = {"recorded": [], "plain": []}
    for i in range(o.runs):
        order = ["recorded", "plain"] if i % 2 == 0 else ["plain", "recorded"]
        for mode in order:
            tj = os.path.abspath(os.path.join(o.out, f"{mode}-{i}.json"))
            argv = [os.path.join(HERE, "torchrun"), "--nproc-per-node", "2", "-m", "gradsync_torch.example",
                    "--steps", str(o.steps), "--timing-json", tj] + o.extra
            argv += ["--out", os.path.abspath(os.path.join(o.out, f"run-{i}.h5"))] if mode == "recorded" else ["--no-record"]
            p = subprocess.run(argv, capture_output=True, text=True)
            if p.returncode != 0:
                print(f"torch-recorder-overhead: error: {mode} run {i} exited {p.returncode}: "
                      f"{(p.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
                return 1
            with open(tj) as fh:
                t = json.load(fh)
            m = statistics.median(t["step_time_s"][t["warmup"]:])
            med[mode].append(m)
            print(f"run {i + 1}/{o.runs} {mode:8s}: median step {m * 1e3:.2f} ms", flush=True)
    r, p = statistics.median(med["recorded"]), statistics.median(med["plain"])
    print(f"# median of {o.runs} runs: recorded {r * 1e3:.2f} ms, plain {p * 1e3:.2f} ms, overhead {100 * (r / p - 1):+.2f}%")
    with open(os.path.join(o.out, "overhead.json"), "w") as fh:
        json.dump({"runs": med, "recorded_s": r, "plain_s": p, "overhead_pct": 100 * (r / p - 1)}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
