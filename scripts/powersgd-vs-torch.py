#!/usr/bin/python3
"""scripts/powersgd-vs-torch.py — gradsync's PowerSGD codec vs PyTorch's powerSGD_hook on the
same ResNet-50 gradient shapes, same machine, alternating.

    scripts/powersgd-vs-torch.py [--rank 4] [--rounds 3] [--calls 5] [--threads 1,2] [--out DIR]
    scripts/powersgd-vs-torch.py --device cuda [--rank 4] [--rounds 3] [--calls 20] [--out DIR]

Purpose: issue 15's codec target: PowerSGD rank 4 on ResNet-50 shapes (encode + decode) at
least 2x faster than PyTorch's powerSGD_hook.
Approach: the shapes are ResNet-50's parameter tensors as gradsync knows them (models/zoo.hpp,
read back from the /model group of a 2-step emulated `gradsync-train --model resnet50` run).
Ours: gradsync-kernels-bench's `powersgd_resnet50_encode+decode/threads:T` cases (all tensors
as one bucket, rank R, P = M Q, Gram-Schmidt, Q = M^T P, M = P Q^T with error feedback, at the
spec's threads=T for each T of --threads; a fresh gradient is copied in before each call,
untimed, as the hook's fresh clone; a bench from before threads=T has one single-threaded
case, which then stands for every T).
Theirs: torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook on one GradBucket holding the
same tensors (world size 1, gloo: its all-reduces are local copies), matrix_approximation_rank
R, start_powerSGD_iter 2 (the smallest the hook accepts with error feedback; the two plain
all-reduce calls before it are not timed) so every timed call compresses, min_compression_rate 2 (its default;
small matrices go uncompressed, as gradsync's min_rate), error feedback and warm start on
(the hook's defaults), with torch's intra-op threads set to each of --threads in turn. Each
round runs ours, then theirs for every thread count; per side and thread count the time is
the median over all rounds. Ratios are like for like (the hook at T torch threads over ours
at threads=T), plus the best of each side. Runs with the PyTorch venv's python (started
with another python, it runs itself again under scripts/torch-python: set
GRADSYNC_TORCH_VENV) and build/bin (or GRADSYNC_BIN). Writes powersgd-vs-torch.json under --out.
--device cuda (issue 13's GPU target: ours faster than the hook on the same GPU): ours is
gradsync-gpu-kernels-bench's PowerSGD case (the compressor's device path: cuBLAS products,
Gram-Schmidt and error feedback on the GPU; median of --calls calls between CUDA events, the
fresh gradient copied in outside them); theirs is the hook on CUDA tensors with an NCCL
process group of world size 1, timed with torch.cuda.synchronize() around each call.
Measured 2026-12-02 on the 2-core development VM (shared; disturbed_seconds 8 and 23), with
/work/quiet.sh /work/meas/psgd-bench.log env GRADSYNC_TORCH_VENV=/work/torchenv
scripts/powersgd-vs-torch.py --rank 4 --rounds 3 --threads 1,2:
  before (HEAD 7a2dfb9, one thread): gradsync 188.4 ms; hook 238.6 ms at 1 thread (1.27x),
                                     177.9 ms at 2 threads (0.94x)
  after (fused codec, threads=T):    1 thread: gradsync 63.3 ms, hook 204.5 ms = 3.23x;
                                     2 threads: gradsync 34.2 ms, hook 124.9 ms = 3.65x
(the before bench also timed a ~15 ms copy of a fresh gradient; with it timed, after is 86.1
ms = 2.53x and 56.8 ms = 3.06x.) Issue 15's 2x target is met at both thread counts.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def bin_env():
    """The environment of gradsync's programs: GRADSYNC_BIN_PATH / GRADSYNC_BIN_LD_LIBRARY_PATH
    replace PATH / LD_LIBRARY_PATH when set (scripts/gpu-check.sh runs this script with the
    machine's own paths for PyTorch and the carried ones for gradsync)."""
    env = dict(os.environ)
    for var in ("PATH", "LD_LIBRARY_PATH"):
        if os.environ.get("GRADSYNC_BIN_" + var):
            env[var] = os.environ["GRADSYNC_BIN_" + var]
    return env


def resnet50_shapes(bindir, tmp):
    out = os.path.join(tmp, "shapes.h5")
    subprocess.run([os.path.join(bindir, "gradsync-train"), "--model", "resnet50", "--compute", "emulated",
                    "--compute-profile", "h200", "--steps", "2", "--warmup-steps", "1", "--out", out],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=bin_env())
    import h5py
    with h5py.File(out, "r") as f:
        ndim = f["model/tensor_ndim"][:]
        flat = f["model/tensor_shape"][:]
    shapes, i = [], 0
    for d in ndim:
        shapes.append(tuple(int(x) for x in flat[i:i + d]))
        i += d
    return shapes


def ours_ms(bindir, min_time, threads):
    """{T: ms} of gradsync-kernels-bench's powersgd_resnet50_encode+decode/threads:T cases (a
    bench from before threads=T has one single-threaded case: it stands for every T)."""
    p = subprocess.run([os.path.join(bindir, "gradsync-kernels-bench"),
                        "--benchmark_filter=powersgd_resnet50_encode\\+decode", f"--benchmark_min_time={min_time}",
                        "--benchmark_format=json"], check=True, capture_output=True, text=True, env=bin_env())
    out = {}
    for b in json.loads(p.stdout)["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        if b.get("error_occurred"):
            raise RuntimeError(f"gradsync-kernels-bench: {b['name']}: {b.get('error_message')}")
        m = re.search(r"/threads:(\d+)", b["name"])
        t = int(m.group(1)) if m else 1
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
        out[t] = b["real_time"] * scale
    if list(out) == [1]:  # a bench from before threads=T: single-threaded whatever T
        return {t: out[1] for t in threads}
    missing = [t for t in threads if t not in out]
    if missing:
        raise RuntimeError(f"gradsync-kernels-bench: no powersgd_resnet50_encode+decode result for threads "
                           f"{missing} (has {sorted(out)}): {p.stdout[-300:]}")
    return out


def theirs_ms(shapes, rank, calls, threads=None, device="cpu"):
    """Times (ms) of powerSGD_hook calls on one bucket of `shapes` on `device` (cpu: at
    `threads` torch intra-op threads; cuda: synchronised around each call)."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps
    sys.path.insert(0, os.path.join(HERE, "gpu"))
    from compare_torch import Bucket  # the duck-typed GradBucket the torch comparison uses
    if threads is not None:
        torch.set_num_threads(threads)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    offsets, off = [], 0
    for s in shapes:
        offsets.append(off)
        off += int(torch.tensor(s).prod())
    g = torch.Generator().manual_seed(1)
    fresh = ((torch.rand(off, generator=g) * 2 - 1) * 1e-3).to(device)
    state = ps.PowerSGDState(process_group=None, matrix_approximation_rank=rank, start_powerSGD_iter=2,
                             min_compression_rate=2, use_error_feedback=True, warm_start=True)
    times = []
    for i in range(calls + 3):  # calls 0 and 1 are plain all-reduces (iter < start), call 2 warms up
        bucket = Bucket(0, fresh.clone(), shapes, offsets)
        sync()
        t0 = time.perf_counter()
        out = ps.powerSGD_hook(state, bucket).wait()
        sync()
        t1 = time.perf_counter()
        if not torch.isfinite(out).all():
            raise RuntimeError("powerSGD_hook returned non-finite values")
        if i >= 3:
            times.append((t1 - t0) * 1e3)
    return times


def init_world_of_one(dist, backend):
    """The hook's process group: this process alone (its all-reduces are local copies)."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group(backend, rank=0, world_size=1)


def write_json(out_dir, name, res):
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(res, f, indent=1)


def ours_cuda_ms(bindir, rank, calls, tmp):
    out = os.path.join(tmp, "gpu-kernels.json")
    subprocess.run([os.path.join(bindir, "gradsync-gpu-kernels-bench"), "--mib", "1", "--iters", str(calls),
                    "--powersgd-rank", str(rank), "--json", out], check=True, stdout=subprocess.DEVNULL,
                   env=bin_env())
    with open(out) as f:
        return json.load(f)["powersgd_resnet50"]["ms_per_call"]


def main_cuda(o, bindir):
    import numpy as np
    import torch
    import torch.distributed as dist
    if not torch.cuda.is_available():
        print("SKIP: powersgd-vs-torch.py: --device cuda: torch sees no CUDA device", flush=True)
        sys.exit(77)
    torch.cuda.set_device(0)
    init_world_of_one(dist, "nccl")
    ours, theirs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        shapes = resnet50_shapes(bindir, tmp)
        for r in range(o.rounds):
            ours.append(ours_cuda_ms(bindir, o.rank, o.calls, tmp))
            theirs += theirs_ms(shapes, o.rank, o.calls, device="cuda")
            print(f"round {r + 1}: gradsync {ours[-1]:.2f} ms, powerSGD_hook {np.median(theirs[-o.calls:]):.2f} ms",
                  flush=True)
    res = {"device": torch.cuda.get_device_name(0), "tensors": len(shapes),
           "elements": int(sum(int(np.prod(s)) for s in shapes)), "rank": o.rank,
           "gradsync_ms": float(np.median(ours)), "torch_ms": float(np.median(theirs))}
    res["speedup"] = res["torch_ms"] / res["gradsync_ms"]
    print(f"ResNet-50 ({res['tensors']} tensors, {res['elements']} elements), rank {o.rank}, {res['device']}: "
          f"gradsync {res['gradsync_ms']:.2f} ms, powerSGD_hook {res['torch_ms']:.2f} ms = {res['speedup']:.2f}x")
    print(f"result powersgd_vs_torch_cuda gradsync_ms={res['gradsync_ms']:.4f} torch_ms={res['torch_ms']:.4f} "
          f"speedup={res['speedup']:.3f}")
    write_json(o.out, "powersgd-vs-torch-cuda.json", res)
    dist.destroy_process_group()


def main():
    try:
        import torch  # noqa: F401
    except ImportError:  # run again under the project's PyTorch venv (scripts/torch-python)
        if os.environ.get("GRADSYNC_TORCH_REEXEC"):
            raise
        os.environ["GRADSYNC_TORCH_REEXEC"] = "1"
        tp = os.path.join(HERE, "torch-python")
        os.execv(tp, [tp, os.path.abspath(__file__)] + sys.argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--calls", type=int, default=None,
                    help="timed calls per round (and thread count); default 5 on cpu, 20 on cuda")
    ap.add_argument("--threads", default="1,2", help="thread counts: torch intra-op threads and gradsync's threads=T")
    ap.add_argument("--min-time", type=float, default=1.0, help="gradsync-kernels-bench --benchmark_min_time")
    ap.add_argument("--out", default=None)
    o = ap.parse_args()
    bindir = os.environ.get("GRADSYNC_BIN", os.path.join(REPO, "build", "bin"))
    if o.calls is None:
        o.calls = 20 if o.device == "cuda" else 5
    if o.device == "cuda":
        return main_cuda(o, bindir)
    if o.rank != 4:
        sys.exit("powersgd-vs-torch.py: --rank: gradsync-kernels-bench's ResNet-50 case is rank 4")
    import numpy as np
    import torch.distributed as dist
    init_world_of_one(dist, "gloo")
    threads = [int(t) for t in o.threads.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        shapes = resnet50_shapes(bindir, tmp)
    ours, theirs = {t: [] for t in threads}, {t: [] for t in threads}
    for r in range(o.rounds):
        got = ours_ms(bindir, o.min_time, threads)
        for t in threads:
            ours[t].append(got[t])
        for t in threads:
            theirs[t] += theirs_ms(shapes, o.rank, o.calls, t)
        print(f"round {r + 1}: " + "; ".join(f"{t} thread(s): gradsync {ours[t][-1]:.1f} ms, powerSGD_hook "
                                              f"{np.median(theirs[t][-o.calls:]):.1f} ms" for t in threads), flush=True)
    res = {"tensors": len(shapes), "elements": int(sum(int(np.prod(s)) for s in shapes)), "rank": o.rank,
           "gradsync_ms": {str(t): float(np.median(v)) for t, v in ours.items()},
           "torch_ms": {str(t): float(np.median(v)) for t, v in theirs.items()}}
    # like for like: the hook at T torch threads over ours at threads=T
    res["speedup"] = {k: v / res["gradsync_ms"][k] for k, v in res["torch_ms"].items()}
    best_ours, best_theirs = min(res["gradsync_ms"].values()), min(res["torch_ms"].values())
    res["speedup_best"] = best_theirs / best_ours
    print(f"ResNet-50 ({res['tensors']} tensors, {res['elements']} elements), rank {o.rank}: " +
          "; ".join(f"{k} thread(s): gradsync {res['gradsync_ms'][k]:.1f} ms, powerSGD_hook {v:.1f} ms = "
                    f"{res['speedup'][k]:.2f}x" for k, v in res["torch_ms"].items()) +
          f"; best of each: {best_ours:.1f} vs {best_theirs:.1f} ms = {res['speedup_best']:.2f}x")
    write_json(o.out, "powersgd-vs-torch.json", res)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
