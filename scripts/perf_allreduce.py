#!/usr/bin/python3
"""Foundation performance check: our all-reduce algorithms against the MPI library's own,
measured in the same session, alternating, median of several runs; and memcpy bandwidth on
the same machine as the bound. Prints ratios (the targets are ratios, never wall times).

  scripts/perf_allreduce.py [--build build] [--runs 5] [--ranks 2]

Targets (issue "Foundation"): 2 ranks, 16 MiB float: ring busbw >= 0.9 x mpi busbw;
8-byte allreduce: rd time <= 1.5 x mpi time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def bench(binary, ranks, algo, size, iters, warmup):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks), binary,
               "--op", "allreduce", "--algo", algo, "-b", size, "-e", size, "-n", str(iters),
               "-w", str(warmup), "-c", "1", "--json", "--out", os.path.join(tmp, "b.h5")]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    row = json.loads(out)["rows"][0]
    assert row["oop"]["nwrong"] == 0, f"{algo} {size}: wrong results"
    return row["oop"]


def memcpy_GBps(build):
    """memcpy bandwidth from the kernel benchmark's baseline (same binary family)."""
    kb = os.path.join(build, "bin", "gradsync-kernels-bench")
    if not os.path.exists(kb):
        return None
    out = subprocess.run([kb, "--benchmark_filter=memcpy", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True).stdout
    # the 16 MiB case: the same size as the all-reduce, out of cache like it
    rates = [b["bytes_per_second"] for b in json.loads(out)["benchmarks"] if b["name"].startswith("memcpy/MiB:16/")
             and b.get("run_type", "iteration") == "iteration"]
    return rates[0] / 1e9 if rates else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin", "gradsync-bench")

    big = {"ring": [], "mpi": []}
    small = {"rd": [], "mpi": []}
    for _ in range(args.runs):  # alternate so drift hits both alike
        for algo in ("ring", "mpi"):
            big[algo].append(bench(binary, args.ranks, algo, "16M", 20, 5)["busbw_GBps"])
        for algo in ("rd", "mpi"):
            small[algo].append(bench(binary, args.ranks, algo, "8", 2000, 200)["time_us"])

    ring, mpi = statistics.median(big["ring"]), statistics.median(big["mpi"])
    rd, mpi_small = statistics.median(small["rd"]), statistics.median(small["mpi"])
    print(f"# {args.ranks} ranks, medians of {args.runs} alternating runs")
    print(f"16 MiB float busbw: ring {ring:.3f} GB/s, mpi {mpi:.3f} GB/s, ratio ring/mpi {ring / mpi:.2f} (target >= 0.90)")
    print(f"   runs ring {['%.3f' % v for v in big['ring']]}  mpi {['%.3f' % v for v in big['mpi']]}")
    print(f"8 B float time: rd {rd:.2f} us, mpi {mpi_small:.2f} us, ratio rd/mpi {rd / mpi_small:.2f} (target <= 1.50)")
    mc = memcpy_GBps(args.build)
    if mc:
        # A 2-rank all-reduce of n bytes moves, per rank, n/2 in and out of the peer plus a
        # reduction reading 2 x n/2 and writing n/2: several memcpy-equivalents of traffic.
        print(f"memcpy of 16 MiB {mc:.2f} GB/s on one core; ring busbw is {ring / mc:.2f} x memcpy")
    ok = ring / mpi >= 0.9 and rd / mpi_small <= 1.5
    print("targets met" if ok else "targets NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
