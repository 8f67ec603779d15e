"""gradsync_torch.overhead — the recorder's cost, measured inside one job.

    scripts/torchrun --nproc-per-node 2 -m gradsync_torch.overhead --pairs 20 --block 5 [EXAMPLE OPTIONS] --json o.json

Purpose: issue 12's target "step time with the recorder within 2% of without". Between
separate runs of the example the step time moves by 10-15% on a shared 2-core host (where
the ranks' threads land, what else runs), more than the effect to be measured.
Approach: one process per rank holds two copies of the example's network with the same
weights, each in its own DistributedDataParallel with its own optimizer and hook state:
one plain (the user's hook registered as usual), one wrapped by the recorder (which also
times torch.distributed.all_reduce while its steps run, and only then). After --warmup
steps of each, they train in alternating blocks of --block steps (the order of each pair
of blocks swapped every other pair), so both see the same host state. Rank 0 times every
step the same way in both modes. Overhead = median(recorded steps) / median(plain steps)
- 1, with the per-pair ratios' median and spread. With --out the recorder writes its file at
the end (its data time includes the plain blocks, so the file is a by-product, not a
measurement); without, it writes nothing (its stop(): a killed job leaves no scratch file).
--plain-hook allreduce (with --hook none): the plain copy runs PyTorch's own Python
allreduce_hook instead of DDP's built-in all-reduce, so the figure is the recorder's cost
beyond what any Python communication hook costs. With --hook none the recorder times the
recorded copy's buckets in C++ (native.py: process-group hooks, or the C++ comm hook with
GRADSYNC_TORCH_NATIVE_HOOK=hook) unless GRADSYNC_TORCH_NATIVE_HOOK=0. Both copies share
the default process group: the process-group hooks fire for the plain copy's all-reduces
too, and return at once (the observer is armed only during the recorded copy's steps).
--control records neither copy: an A/A run, whose "overhead" is what the method itself
reads between two copies that differ in nothing but their place in the block sequence.
Under `--comm-sched rr` on this project's 2-core host that was not zero: the copy whose
block opens the first pair ran faster, by 0.3-1.5% (--first-block plain: the plain copy)
and by 0.5-1.8% with the order flipped (2026-12-05); the same model object in both slots
read -0.7 .. +0.2%. --first-block chooses the order; the driver runs both.
"""
import json
import os
import statistics
import sys
import time

from . import hooks
from .example import Stepper, add_options, build, check_options, device_of, make_hook, record_args, wrap
from .launch import Parser


def options(argv):
    ap = Parser(prog="python -m gradsync_torch.overhead", description=__doc__.split("\n\n")[0])
    add_options(ap, loop=False)
    ap.add_argument("--pairs", type=int, default=20, help="pairs of blocks (plain, recorded) after warm-up (default 20)")
    ap.add_argument("--block", type=int, default=5, help="steps per block (default 5)")
    ap.add_argument("--json", default=None, help="rank 0 writes the step times and the summary here")
    ap.add_argument("--plain-hook", choices=["builtin", "allreduce"], default="builtin",
                    help="with --hook none, what the plain copy all-reduces with: DDP's built-in (default) or "
                         "PyTorch's Python allreduce_hook")
    ap.add_argument("--first-block", choices=["plain", "recorded"], default="plain",
                    help="which copy's block opens the first pair (then every other pair; default plain); "
                         "scripts/torch-recorder-overhead.py runs both")
    ap.add_argument("--control", action="store_true",
                    help="record neither copy (an A/A run): the method's own bias between the two copies")
    o = check_options(ap, ap.parse_args(argv))
    if o.control and o.out:
        ap.error("option --out: --control records neither copy, so there is no file to write")
    if o.plain_hook != "builtin" and o.hook != "none":
        ap.error(f"option --plain-hook: applies to --hook none only (got --hook {o.hook})")
    for name in ("pairs", "block"):
        if getattr(o, name) < 1:
            ap.error(f"option --{name}: must be >= 1, got {getattr(o, name)}")
    return o


def summarize(plain, recorded, pair_ratios):
    """Medians (s) and the overhead in percent; pair ratios' median and 10/90th percentiles."""
    p, r = statistics.median(plain), statistics.median(recorded)
    q = sorted(pair_ratios)

    def pct(f):
        return q[min(len(q) - 1, int(f * len(q)))]
    return {"plain_s": p, "recorded_s": r, "overhead_pct": 100 * (r / p - 1),
            "pair_ratio_median": statistics.median(q), "pair_ratio_p10": pct(0.1), "pair_ratio_p90": pct(0.9)}


def measure(o, rank, plain, opt_p, recorded, opt_r, batch, out, argv):
    """The alternating blocks; rank 0 prints the summary (and writes --json)."""
    import torch.distributed as dist

    from .recorder import record

    hook, state = make_hook(o)
    step_fn = Stepper(o)
    untimed = dist.all_reduce
    rec = None
    if o.control:  # the "recorded" copy trains exactly as the plain one
        if hook is not None:
            hooks.register(recorded, state, hook)
    else:
        rec = record(recorded, opt_r, out, hook=hook, state=state, overlap=True,
                     **record_args(o, argv, step_fn.amp, overhead_ab=1))
    timed = dist.all_reduce
    models = {"plain": (plain, opt_p, untimed), "recorded": (recorded, opt_r, timed)}
    times = {"plain": [], "recorded": []}
    step = 0

    def run(mode, n, keep):
        nonlocal step
        model, opt, all_reduce = models[mode]
        dist.all_reduce = all_reduce  # the recorder times the collectives of its own steps only
        t_prev = time.perf_counter()
        for _ in range(n):
            x, y = batch(step, rank, o.batch)
            step += 1
            loss = step_fn(model, opt, x, y)
            if mode == "recorded" and rec is not None:
                rec.note_loss(loss)
            t = time.perf_counter()
            if keep:
                times[mode].append(t - t_prev)
            t_prev = t
        return statistics.median(times[mode][-n:]) if keep else None

    plain.train()
    recorded.train()
    run("plain", o.warmup, False)
    if rec is not None:
        rec.start()
    run("recorded", o.warmup, False)
    pair_ratios = []
    for i in range(o.pairs):
        order = ("plain", "recorded") if (i % 2 == 0) == (o.first_block == "plain") else ("recorded", "plain")
        med = {mode: run(mode, o.block, True) for mode in order}
        pair_ratios.append(med["recorded"] / med["plain"])
    dist.all_reduce = timed
    if rec is not None and out:
        rec.close()
    elif rec is not None:
        rec.stop()  # no --out: nothing written (no scratch file to leave)
    if rank == 0:
        s = summarize(times["plain"], times["recorded"], pair_ratios)
        print(f"gradsync_torch.overhead: {dist.get_world_size()} ranks, hook {o.hook}"
              f"{' (control: neither copy recorded)' if o.control else ''}, first block {o.first_block}"
              f"{' (plain: allreduce_hook)' if o.plain_hook != 'builtin' else ''}, bucket {o.bucket_mb:g} MB, "
              f"{o.pairs} pairs of {o.block} steps: plain {s['plain_s'] * 1e3:.2f} ms, recorded "
              f"{s['recorded_s'] * 1e3:.2f} ms, overhead {s['overhead_pct']:+.2f}% (pair ratios median "
              f"{s['pair_ratio_median']:.3f}, p10 {s['pair_ratio_p10']:.3f}, p90 {s['pair_ratio_p90']:.3f})")
        if o.json:
            with open(o.json, "w") as f:
                json.dump(dict(s, step_time_s=times, pair_ratios=pair_ratios, hook=o.hook, plain_hook=o.plain_hook,
                               control=bool(o.control), first_block=o.first_block,
                               bucket_mb=o.bucket_mb,
                               pairs=o.pairs, block=o.block), f)


def main(argv=None):
    o = options(sys.argv[1:] if argv is None else argv)
    import torch.distributed as dist

    from .launch import init_distributed

    if init_distributed("overhead", o) is None:
        return 2
    rank = dist.get_rank()
    dev = device_of(o)
    net_p, batch = build(o, dev)
    plain, opt_p = wrap(o, dev, net_p)
    recorded, opt_r = wrap(o, dev, build(o, dev)[0])
    hook, state = make_hook(o)
    if hook is not None:
        hooks.register(plain, state, hook)
    elif o.plain_hook == "allreduce":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        plain.register_comm_hook(dist.group.WORLD, default_hooks.allreduce_hook)

    measure(o, rank, plain, opt_p, recorded, opt_r, batch, o.out, argv)
    dist.barrier()
    del plain, recorded
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    from gradsync_torch.launch import exit_now
    exit_now(main() or 0)
