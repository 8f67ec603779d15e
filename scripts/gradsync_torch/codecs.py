"""gradsync_torch.codecs — what PyTorch's DDP communication hooks cost in compute, as rates
`gradsync-model calibrate --kernels` fits.

    scripts/torchrun --nproc-per-node 2 -m gradsync_torch.codecs --out torch-codecs.json
    build/bin/gradsync-model calibrate --kernels torch-codecs.json --name torch-hooks --out torch-hooks.toml
    build/bin/gradsync-model compare run.h5 --fabric F --compute-from ref.h5 --kernels torch-hooks.toml

Purpose: gradsync's own compressors run as C++ kernels (gradsync-kernels-bench); PyTorch's
hooks run as Python and one ATen call per tensor (PowerSGD: an error-feedback pass and a
copy, a QR per matrix for P and for Q, three batched products, the copies back), several
times slower on a CPU. A prediction of a PyTorch run whose codec was never measured
(`compare --compute-from` a run with another hook, `predict` for a hook not yet tried) needs
the hooks' own rates.
Approach: each case is a DDP model whose parameters are `k` matrices of `side` x `side` (the
PowerSGD hook's `powersgd_encode/decode` cases; `matrix` = side, `matrices` = k and `rank`
in the JSON) or one vector of `MiB` (the fp16 and bf16 hooks: `fp16_encode/decode`,
`bf16_encode/decode`, with `bytes_per_second` of fp32 input), in one bucket, trained for
`--steps` steps through gradsync_torch's recorder with the hook on every rank at once (as in
training: the ranks share the host). The recorder splits each bucket's time into its
collectives and its codec: encode = the hook call up to its first collective, decode = the rest
(PowerSGD: its callbacks' work outside the collectives); the case's time is the median over
the steps after `--warmup` (and after PowerSGD's start_powerSGD_iter), the slowest rank's,
and the median of that over `--repeats` rounds (every case once per round, so a case's repeats
meet the host at different moments, and a stall that lasts one run of a case stays out).
Every case also gives `<hook>_collective/<case>`, the hook's collectives as it runs them
(launch -> the future's completion, per collective; `collectives` a step), and
`<hook>_allreduce/<case>`, a plain blocking torch.distributed.all_reduce of the same tensors
in the same process (mean per collective). Calibrate keeps the difference, what the hook
adds to each collective, and the model adds it to the fabric's price of the collective (at
4 MiB of fp32 the fp16 hook's all-reduce took 1.9 ms where the torch sweep's all-reduce of
the same 2 MiB of halves took 1.4 ms, 2026-12-05). `--comm-sched` as for the example (the
collectives depend on it).
Every case also gives `<hook>_codec_wait/<case>`: how much longer, in the median step, the
slowest rank's codec took than that rank's median (per step the largest of the ranks' encode +
decode; the repeats' median; counters `ranks` and `codec_s`, the slowest rank's median). A
synchronous step waits for it: PowerSGD's Python codec varies by about a quarter of its time
from step to step on this host. Calibrate turns it into the codec's jitter, which the model
prices as a wait for the slowest of any number of ranks.
Output: Google Benchmark JSON (the format gradsync-kernels-bench writes), on rank 0.
"""
import json
import math
import os
import statistics
import sys
import time

from .launch import Parser, add_comm_sched_option, parse_comm_sched

POWERSGD_CASES = [(64, 1), (128, 1), (256, 1), (512, 1), (1024, 1), (2048, 1), (64, 16), (128, 8), (32, 64), (256, 4),
                  (1024, 4)]
CAST_MIB = [0.25, 1, 4, 16]


def options(argv):
    from .example import parse_hook
    import argparse
    ap = Parser(prog="python -m gradsync_torch.codecs", description="\n\n".join(__doc__.split("\n\n")[1:3]),
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hook", action="append", default=None,
                    help="fp16 | bf16 | powersgd:rank=R (repeatable; default: fp16, bf16 and powersgd:rank=4)")
    ap.add_argument("--steps", type=int, default=12, help="timed steps per case (default 12)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per case after PowerSGD's start (default 3)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="rounds over all cases (a fresh DDP model each time); each figure is the median over the "
                         "rounds of the case's median step (default 3)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank (default 1)")
    ap.add_argument("--backend", default=None, help="gloo (default on cpu) | nccl | mpi")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--quick", action="store_true", help="fewer and smaller cases (tests)")
    ap.add_argument("--out", required=True, help="JSON file (Google Benchmark format) for calibrate --kernels")
    add_comm_sched_option(ap)
    o = ap.parse_args(argv)
    try:
        o.comm_sched_spec = parse_comm_sched(o.comm_sched)
    except ValueError as e:
        ap.error(str(e))
    o.hooks = []
    for text in o.hook or ["fp16", "bf16", "powersgd:rank=4"]:
        try:
            kind, params = parse_hook(text)
        except ValueError as e:
            ap.error(str(e))
        if kind not in ("fp16", "bf16", "powersgd"):
            ap.error(f"option --hook: '{text}' has no codec to time (fp16, bf16, powersgd:rank=R)")
        if any(k == kind for _, k, _ in o.hooks):
            ap.error(f"option --hook: {kind} given twice (one of each: the cases' names carry no parameters)")
        o.hooks.append((text, kind, params))
    if o.steps < 1:
        ap.error(f"option --steps: must be >= 1 (got {o.steps})")
    if o.warmup < 1:
        ap.error(f"option --warmup: must be >= 1 (got {o.warmup})")
    if o.repeats < 1:
        ap.error(f"option --repeats: must be >= 1 (got {o.repeats})")
    if not os.path.isdir(os.path.dirname(os.path.abspath(o.out))):
        ap.error(f"option --out: no directory for '{o.out}'")
    return o


def _hook(kind, params):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    if kind == "fp16":
        return default_hooks.fp16_compress_hook, None
    if kind == "bf16":
        return default_hooks.bf16_compress_hook, None
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=params["rank"],
                                        start_powerSGD_iter=params.get("start", 2), min_compression_rate=2,
                                        use_error_feedback=True, warm_start=True, random_seed=0)
    return powerSGD_hook.powerSGD_hook, state


def time_case(o, dev, shapes, kind, params):
    """Median (encode_s, decode_s) per step of the slowest rank, and the buckets per step, of
    DDP with `shapes` parameters and the hook; the recorder's timing (recorder.py)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .recorder import record

    class Params(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(s, device=dev)) for s in shapes])

        def forward(self, xs):
            return sum((w * x).sum() for w, x in zip(self.w, xs))

    net = Params()
    model = DDP(net, bucket_cap_mb=4096, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    hook, state = _hook(kind, params)
    start = params.get("start", 2) if kind == "powersgd" else 0
    warm = start + o.warmup
    # Nothing is written: stop() hands back this rank's table instead of close().
    rec = record(model, opt, None, hook=hook, state=state, warmup_steps=warm)
    gen = torch.Generator(device="cpu").manual_seed(dist.get_rank())
    rec.start()
    for _ in range(warm + o.steps):
        xs = [torch.randn(s, generator=gen).to(dev) for s in shapes]
        model(xs).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    rows = rec.stop()[warm:]
    del model
    # encode: the hook call up to its first collective; decode: the rest of the bucket's time
    # outside its collectives (the recorder's codec_s less encode).
    enc = [r["encode_s"] for r in rows]
    dec = [max(0.0, sum(b[5] for b in r["buckets"]) - r["encode_s"]) for r in rows]
    nb = statistics.median(len(r["buckets"]) for r in rows)
    # The hook's collectives as it runs them (launch -> the future's completion, launched
    # from the hook call or its callbacks): time per collective and collectives per step.
    spans = [[e - t for b in r["buckets"] for t, e in b[6]] for r in rows]
    per_coll = [sum(x) / len(x) for x in spans if x]
    ncoll = statistics.median(len(x) for x in spans)
    # The same all-reduces without the hook (a plain torch.distributed.all_reduce of each
    # collective's tensor, in this process): what the hook's collectives take beyond them
    # is the hook's own (its Python callbacks, fresh tensors), which stays on another fabric.
    if kind == "powersgd":
        r = min(shapes[0][0], params["rank"])
        pq = len(shapes) * shapes[0][0] * r  # P (and Q) of k square matrices, one batch each
        # Every rank must run the same all-reduces below, and ncoll is this rank's count (a
        # median over steps of what the recorder attributed): take the largest over ranks.
        # (A torch.codecs test run hung once, both ranks waiting in a collective, 2026-12-06.)
        n = torch.tensor([float(ncoll)], dtype=torch.float64)
        dist.all_reduce(n, op=dist.ReduceOp.MAX)
        sizes = ([(0, torch.float32)] if float(n) >= 3 else []) + [(pq, torch.float32)] * 2
    else:
        sizes = [(math.prod(shapes[0]), torch.float16 if kind == "fp16" else torch.bfloat16)]
    local = [statistics.median(enc), statistics.median(dec), nb,
             statistics.median(per_coll) if per_coll else 0.0, ncoll, _plain_allreduce_s(dev, sizes, o.steps)]
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, [local, [e + d for e, d in zip(enc, dec)]])
    # The wait for the slowest rank's codec: a synchronous step ends with its slowest rank,
    # so what a step takes is, per step, the largest of the ranks' codec times; the figures
    # above are the slowest rank's median. wait = median over steps of the per-step largest
    # less that (0 on one rank).
    per_step = [max(e[1][s] for e in every) for s in range(len(enc))]
    slowest = max(statistics.median(e[1]) for e in every)
    return tuple(max(e[0][i] for e in every) for i in range(len(local))) + (statistics.median(per_step) - slowest,
                                                                            slowest)


def _plain_allreduce_s(dev, sizes, iters):
    """Mean over `sizes` [(numel, dtype)] of the median time of a blocking all_reduce of
    such a tensor (two untimed calls first)."""
    import torch
    import torch.distributed as dist
    per = []
    for numel, dtype in sizes:
        t = torch.zeros(numel, dtype=dtype, device=dev)
        times = []
        for i in range(iters + 2):
            t0 = time.perf_counter()
            dist.all_reduce(t)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            if i >= 2:
                times.append(time.perf_counter() - t0)
        per.append(statistics.median(times))
    return sum(per) / len(per) if per else 0.0


def main(argv=None):
    o = options(sys.argv[1:] if argv is None else argv)
    import torch
    import torch.distributed as dist

    from gradsync_analysis.atomicfile import atomic_file

    from . import h5out
    from .example import device_of
    from .launch import init_distributed

    backend = init_distributed("codecs", o)
    if backend is None:
        return 2
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = device_of(o)
    psgd_cases = POWERSGD_CASES[:3] + [(32, 16)] if o.quick else POWERSGD_CASES
    cast_mib = CAST_MIB[:2] if o.quick else CAST_MIB
    bench = []
    cases = []  # (hook text, kind, params, shape, k, label, counters)
    for text, kind, params in o.hooks:
        if kind == "powersgd":
            cases += [(text, kind, params, (side, side), k, f"{side}/{k}",
                       {"matrix": side, "matrices": k, "rank": params["rank"]}) for side, k in psgd_cases]
        else:
            cases += [(text, kind, params, (int(mib * (1 << 20)) // 4,), 1, f"{mib:g}", {"MiB": mib})
                      for mib in cast_mib]
    # Rounds over all cases: this host's speed drifts over tens of seconds (one study's codecs
    # run, 2026-12-05 12:40 UTC, timed the fp16 hook's collectives at 1.3-2.4x another's of
    # ten minutes before, at every size), and a stall can last a whole run of a case (the bf16 hook's 16 MiB collective once took 54.6 ms where
    # eight other studies' runs took 3.9-7.8): each figure is the median over the rounds.
    timed = [[] for _ in cases]
    for _ in range(o.repeats):
        for c, (text, kind, params, shape, k, label, counters) in enumerate(cases):
            timed[c].append(time_case(o, dev, [shape] * k, kind, params))
    for (text, kind, params, shape, k, label, counters), runs in zip(cases, timed):
        enc, dec, nb, coll, ncoll, plain, wait, codec = (statistics.median(r[i] for r in runs) for i in range(8))
        in_bytes = 4.0 * k * math.prod(shape)
        parts = [("encode", enc), ("decode", dec)] + ([("collective", coll), ("allreduce", plain)] if coll > 0 else [])
        for part, t in parts:
            row = {"name": f"{kind}_{part}/{label}", "run_name": f"{kind}_{part}/{label}",
                   "run_type": "iteration", "iterations": o.steps, "real_time": t * 1e9,
                   "cpu_time": t * 1e9, "time_unit": "ns", "buckets": nb, "hook": text, **counters}
            if part in ("collective", "allreduce"):
                row["collectives"] = ncoll
            elif kind != "powersgd" and t > 0:
                row["bytes_per_second"] = in_bytes / t
            bench.append(row)
        bench.append({"name": f"{kind}_codec_wait/{label}", "run_name": f"{kind}_codec_wait/{label}",
                      "run_type": "iteration", "iterations": o.steps, "real_time": wait * 1e9,
                      "cpu_time": wait * 1e9, "time_unit": "ns", "buckets": nb, "hook": text,
                      "ranks": world, "codec_s": codec, **counters})
        if rank == 0:
            print(f"gradsync_torch.codecs: {text:>16} {label:>8}: encode {enc * 1e3:8.3f} ms  "
                  f"decode {dec * 1e3:8.3f} ms  {ncoll:g} collectives of {coll * 1e3:.3f} ms "
                  f"(plain all_reduce {plain * 1e3:.3f} ms)  slowest rank's codec {wait * 1e3:+.3f} ms "
                  f"a step beyond its median", flush=True)
    if rank == 0:
        doc = {"context": {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "host_name": h5out.hostname(), "executable": "gradsync_torch.codecs",
                           "library": f"torch {torch.__version__}", "backend": backend, "ranks": world,
                           "threads": o.threads, "device": dev.type, "comm_sched": o.comm_sched,
                           "note": "PyTorch DDP hooks' codec time per step (recorder split), slowest rank"},
               "benchmarks": bench}
        with atomic_file(o.out, text=True) as f:
            json.dump(doc, f, indent=1)
        print(f"gradsync_torch.codecs: wrote {o.out} ({len(bench)} cases); fit with: gradsync-model calibrate "
              f"--kernels {o.out} --name torch-hooks --out torch-hooks.toml")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    from gradsync_torch.launch import exit_now
    exit_now(main() or 0)
