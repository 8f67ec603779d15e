"""gradsync_torch.bench — torch.distributed collectives, measured like gradsync-bench.

    scripts/torchrun --nproc-per-node 2 -m gradsync_torch.bench -b 8 -e 64M -f 4 --out bench.h5
    scripts/torchrun --nproc-per-node 2 -m gradsync_torch.bench --op all -b 1K -e 1M -f 4 --out b.h5

Purpose: fit a gradsync fabric to exactly what PyTorch gets (`gradsync-model calibrate
bench.h5`): the file is a gradsync-bench file (results/README.md) and stdout is the
nccl-tests table.
Approach (as gradsync-bench's harness, runtime/bench/harness.cpp): per size, `-w` untimed
calls, then `-n` timed iterations of: (with --off-cache B: write B bytes of a buffer of
one's own, evicting the call's buffers from the caches, as gradsync-bench --off-cache),
barrier, one blocking call timed on every rank with
perf_counter (CUDA: synchronize after the call); an iteration's time is the maximum over
ranks (one all-reduce MAX of the per-iteration times at the end of each size). Buffers are
filled with small integers so sums stay exact; with `-c 1` the last iteration's result is
compared exactly on every rank and wrong elements are counted (#wrong; any wrong element
exits 1 after the table and the file).
The calls: all_reduce and broadcast are in place (torch has no out-of-place form);
all_gather_into_tensor, reduce_scatter_tensor and all_to_all_single are out of place.
Either way the one measured call is stored as /oop (there is no /ip group).
Sizes follow nccl-tests: allgather's size is the gathered result, reducescatter's the
input, alltoall's one rank's buffer; rounded down to whole elements (x ranks for those three).
An operation the backend lacks (gloo on CPU has no reduce_scatter in some builds) is
reported on one line per operation and skipped; with --op all the others still run.
With --busy-threads N each rank keeps N processes spinning on the CPU for the whole sweep
(processes: Python threads would hold the interpreter lock the timed calls need), as
backward's compute does while DDP's buckets all-reduce; the file's busy_threads attribute
says so and `gradsync-model calibrate` fits the level's contention from such a sweep.
The file's `algo` is the gradsync algorithm that prices the backend's collective
(recorder.BACKEND_ALGO: gloo and nccl -> ring, mpi -> mpi) and `backend` names the backend.
"""
import os
import re
import subprocess
import sys
import time

from .launch import Parser, add_comm_sched_option, parse_comm_sched

OPS = {  # gradsync op name -> (torch name, bus factor(p), has reduction)
    "allreduce": ("all_reduce", lambda p: 2.0 * (p - 1) / p, True),
    "allgather": ("all_gather", lambda p: (p - 1) / p, False),
    "reducescatter": ("reduce_scatter", lambda p: (p - 1) / p, True),
    "broadcast": ("broadcast", lambda p: 1.0, False),
    "alltoall": ("all_to_all", lambda p: (p - 1) / p, False),
}
TORCH_TO_OP = {v[0]: k for k, v in OPS.items()}
DTYPES = {"float": 4, "half": 2, "bfloat16": 2}


# A spinner asks the kernel to kill it when its parent (the rank) dies, however it dies
# (PR_SET_PDEATHSIG), then checks that the rank did not die before that. It does so itself,
# after exec: a preexec_fn would run Python between fork and exec in a rank whose gloo threads
# may hold locks.
SPIN = ("import ctypes, os, signal, sys\n"
        "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
        "if os.getppid() != int(sys.argv[1]):\n    sys.exit(0)\n"
        "while True: pass\n")


class Spinners:
    """N processes spinning on the CPU until close() (or until the rank that started them dies)."""

    def __init__(self, n):
        self.procs = []
        try:
            for _ in range(n):
                self.procs.append(subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())],
                                                   stdin=subprocess.DEVNULL))
        except BaseException:
            self.close()
            raise

    def close(self):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []


def parse_size(text, opt):
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"option {opt}: '{text}' is not a size (e.g. 8, 1K, 64M, 1G)")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]


def options(argv):
    ap = Parser(prog="python -m gradsync_torch.bench", description=__doc__.split("\n\n")[1])
    ap.add_argument("--op", default="allreduce",
                    help="allreduce|allgather|reducescatter|broadcast|alltoall (or torch's all_reduce, ...), "
                         "a comma list, or all (default allreduce)")
    ap.add_argument("-b", "--minbytes", default="8")
    ap.add_argument("-e", "--maxbytes", default="64M")
    ap.add_argument("-f", "--stepfactor", type=int, default=2)
    ap.add_argument("-n", "--iters", type=int, default=20)
    ap.add_argument("-w", "--warmup_iters", type=int, default=5)
    ap.add_argument("-c", "--check", type=int, default=1, choices=[0, 1])
    ap.add_argument("--off-cache", default="0",
                    help="before every iteration each rank writes this many bytes of its own (e.g. 256M, past the "
                         "last-level cache), so the call finds its buffers out of cache, as a training step finds "
                         "its gradient buckets (gradsync-bench's --off-cache, Intel MPI Benchmarks' -off_cache; "
                         "default 0: off)")
    ap.add_argument("--busy-threads", type=int, default=0,
                    help="N processes per rank spin on the CPU during the sweep, as backward's compute does while "
                         "DDP's buckets all-reduce: what a collective costs while the host computes (gradsync-model "
                         "calibrate fits the level's contention from such a sweep; default 0)")
    ap.add_argument("-d", "--datatype", default="float", choices=sorted(DTYPES))
    ap.add_argument("--root", type=int, default=0)
    ap.add_argument("--backend", default=None, help="gloo (default on cpu) | nccl | mpi")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank (default 1)")
    add_comm_sched_option(ap)
    ap.add_argument("--out", default=None, help="result file; with several ops, -<op> is inserted before .h5")
    o = ap.parse_args(argv)
    try:
        o.min_bytes = parse_size(o.minbytes, "-b")
        o.max_bytes = parse_size(o.maxbytes, "-e")
        o.off_cache_bytes = parse_size(o.off_cache, "--off-cache")
        o.comm_sched_spec = parse_comm_sched(o.comm_sched)
    except ValueError as e:
        ap.error(str(e))
    if o.off_cache_bytes > (64 << 30):
        ap.error(f"option --off-cache: must be between 0 and 64G bytes (got {o.off_cache})")
    if o.max_bytes < o.min_bytes:
        ap.error(f"option -e: {o.max_bytes} is below -b {o.min_bytes}")
    if o.stepfactor < 2:
        ap.error(f"option -f: the factor must be an integer >= 2 (got {o.stepfactor})")
    if o.iters < 1:
        ap.error(f"option -n: must be >= 1 (got {o.iters})")
    if o.warmup_iters < 0:
        ap.error(f"option -w: must be >= 0 (got {o.warmup_iters})")
    if not 0 <= o.busy_threads <= 256:
        ap.error(f"option --busy-threads: must be between 0 and 256 (got {o.busy_threads})")
    names = list(OPS) if o.op == "all" else [s.strip() for s in o.op.split(",") if s.strip()]
    o.ops = []
    for n in names:
        n = TORCH_TO_OP.get(n, n)
        if n not in OPS:
            ap.error(f"option --op: unknown operation '{n}' (known: {', '.join(OPS)}, all)")
        o.ops.append(n)
    return o


def sweep(o):
    sizes, s = [], o.min_bytes
    while s <= o.max_bytes:
        sizes.append(s)
        s = s * o.stepfactor if s > 0 else 1
    return sizes


def out_path(o, op):
    if o.out is None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        return os.path.join("results", f"bench-torch-{op}-{o.backend}-{stamp}.h5")
    if len(o.ops) == 1:
        return o.out
    root, ext = os.path.splitext(o.out)
    return f"{root}-{op}{ext or '.h5'}"


def main(argv=None):
    o = options(sys.argv[1:] if argv is None else argv)
    import torch
    import torch.distributed as dist

    from gradsync_analysis.atomicfile import atomic_h5

    from . import h5out
    from .recorder import BACKEND_ALGO

    from .launch import comm_sched_now, init_distributed
    o.backend = init_distributed("bench", o)
    if o.backend is None:
        return 2
    rank, p = dist.get_rank(), dist.get_world_size()
    if o.root >= p:
        if rank == 0:
            print(f"gradsync_torch.bench: error: option --root: {o.root} is not a rank (0..{p - 1})", file=sys.stderr)
        dist.destroy_process_group()
        return 2
    if o.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dev = torch.device("cuda", torch.cuda.current_device()) if o.device == "cuda" else torch.device("cpu")
    dtype = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16}[o.datatype]
    esize = DTYPES[o.datatype]
    hosts = [None] * p
    dist.all_gather_object(hosts, h5out.hostname())
    cpus = [None] * p
    dist.all_gather_object(cpus, h5out.cpu_list())
    nnodes = len(set(hosts))
    rpn = p // nnodes if p % nnodes == 0 else p
    sync = torch.cuda.synchronize if o.device == "cuda" else (lambda: None)
    algo = BACKEND_ALGO.get(o.backend, "ring")
    status = 0
    flush = torch.empty(o.off_cache_bytes, dtype=torch.uint8) if o.off_cache_bytes > 0 else None

    def fill(n, salt):
        # Small non-negative integers: exact in float/half/bfloat16 and their sums over ranks.
        return ((torch.arange(n, dtype=torch.int64) * 7 + salt) % 5).to(dtype).to(dev)

    # Spinners die with this rank however it ends (PR_SET_PDEATHSIG); close() stops them when
    # the sweep is done.
    comm_sched = comm_sched_now()  # gloo's threads' policy (--comm-sched), e.g. "rr:1 (gloo_tcp_loop, ...)"
    spin = Spinners(o.busy_threads)
    for op in o.ops:
        tname, busf, reduces = OPS[op]
        blocked = op in ("allgather", "reducescatter", "alltoall")
        unit = esize * (p if blocked else 1)
        sizes = [s - s % unit for s in sweep(o)]
        sizes = sorted({s for s in sizes if s > 0})

        def make(nbytes):
            n = nbytes // esize
            if op == "allreduce":
                buf = fill(n, rank)
                want = sum(((torch.arange(n, dtype=torch.int64) * 7 + r) % 5) for r in range(p)).to(dtype)
                return (lambda: dist.all_reduce(buf)), (lambda: buf), want, (lambda: buf.copy_(fill(n, rank)))
            if op == "broadcast":
                buf = fill(n, rank)
                want = ((torch.arange(n, dtype=torch.int64) * 7 + o.root) % 5).to(dtype)
                return (lambda: dist.broadcast(buf, o.root)), (lambda: buf), want, (lambda: buf.copy_(fill(n, rank)))
            if op == "allgather":
                src, dst = fill(n // p, rank), torch.empty(n, dtype=dtype, device=dev)
                want = torch.cat([((torch.arange(n // p, dtype=torch.int64) * 7 + r) % 5) for r in range(p)]).to(dtype)
                return (lambda: dist.all_gather_into_tensor(dst, src)), (lambda: dst), want, (lambda: None)
            if op == "reducescatter":
                src, dst = fill(n, rank), torch.empty(n // p, dtype=dtype, device=dev)
                full = sum(((torch.arange(n, dtype=torch.int64) * 7 + r) % 5) for r in range(p))
                want = full[rank * (n // p):(rank + 1) * (n // p)].to(dtype)
                return (lambda: dist.reduce_scatter_tensor(dst, src)), (lambda: dst), want, (lambda: None)
            # alltoall: block j of rank r's input goes to block r of rank j's output.
            src, dst = fill(n, rank), torch.empty(n, dtype=dtype, device=dev)
            blk = n // p
            want = torch.cat([((torch.arange(rank * blk, rank * blk + blk, dtype=torch.int64) * 7 + r) % 5)
                              for r in range(p)]).to(dtype)
            return (lambda: dist.all_to_all_single(dst, src)), (lambda: dst), want, (lambda: None)

        # Does the backend have this operation at all?
        try:
            call, _, _, reset = make(unit)
            call()
            sync()
            dist.barrier()
        except (RuntimeError, NotImplementedError, ValueError) as e:
            if rank == 0:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                print(f"gradsync_torch.bench: op {op} ({tname}): not supported by backend {o.backend} "
                      f"on {o.device}: {first}", file=sys.stderr)
            status = max(status, 1 if len(o.ops) == 1 else 0)
            dist.barrier()
            continue

        times = []
        nwrong = []
        for s in sizes:
            call, result, want, reset = make(s)
            for _ in range(o.warmup_iters):
                reset()
                call()
            sync()
            local = torch.zeros(o.iters, dtype=torch.float64)
            for i in range(o.iters):
                reset()
                if flush is not None:
                    flush.fill_(i & 0xFF)  # evict the caches: every byte written
                sync()
                dist.barrier()
                t0 = time.perf_counter()
                call()
                sync()
                local[i] = (time.perf_counter() - t0) * 1e6
            g = local.to(dev)  # nccl reduces device tensors only
            dist.all_reduce(g, op=dist.ReduceOp.MAX)
            local = g.cpu()
            wrong = -1
            if o.check:
                w = torch.tensor([int((result().cpu() != want).sum())], dtype=torch.int64, device=dev)
                dist.all_reduce(w)
                wrong = int(w.item())
            times.append(local.tolist())
            nwrong.append(wrong)

        if rank == 0:
            avg = [sum(t) / len(t) for t in times]
            algbw = [s / (a * 1e-6) / 1e9 for s, a in zip(sizes, avg)]
            busbw = [a * busf(p) for a in algbw]
            print(f"# gradsync_torch.bench: {op} ({tname}), backend {o.backend} (priced as algo {algo}), {p} rank"
                  f"{'s' if p != 1 else ''} on {nnodes} node{'s' if nnodes != 1 else ''} ({rpn} per node), "
                  f"dtype {o.datatype}, redop {'sum' if reduces else 'none'}, torch {torch.__version__}")
            print(f"# minBytes {o.min_bytes} maxBytes {o.max_bytes} step: {o.stepfactor}(factor) warmup iters: "
                  f"{o.warmup_iters} iters: {o.iters} validation: {o.check}"
                  + (f" off-cache: {o.off_cache_bytes} bytes" if o.off_cache_bytes else "")
                  + (f" busy-threads: {o.busy_threads}" if o.busy_threads else ""))
            print("# time: barrier, then one call; the slowest rank's time, mean over iterations; busbw factor "
                  f"{busf(p):g}; {'in place' if op in ('allreduce', 'broadcast') else 'out of place'} (torch's call)")
            print("#\n# Using ranks")
            for r, h in enumerate(hosts):
                print(f"#  Rank {r:2d} on {h:>10s}")
            print("#")
            print(f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}  {'time':>7s}  "
                  f"{'algbw':>6s}  {'busbw':>6s} {'#wrong':>6s}")
            print(f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}  {'(us)':>7s}  "
                  f"{'(GB/s)':>6s}  {'(GB/s)':>6s}")
            counts = [s // esize // (p if blocked else 1) for s in sizes]
            for s, c, a, ab, bb, w in zip(sizes, counts, avg, algbw, busbw, nwrong):
                t = f"{a:7.0f}" if a >= 10000 else (f"{a:7.1f}" if a >= 100 else f"{a:7.2f}")
                print(f"  {s:>10d}  {c:>12d}  {o.datatype:>8s}  {('sum' if reduces else 'none'):>6s}  "
                      f"{(o.root if op == 'broadcast' else -1):>6d}  {t}  {ab:6.2f}  {bb:6.2f} "
                      f"{(str(w) if w >= 0 else 'N/A'):>6s}")
            mean_bus = sum(busbw) / len(busbw) if busbw else 0.0
            wrong_total = sum(w for w in nwrong if w > 0) if o.check else -1
            print(f"# Out of bounds values : {wrong_total} {'OK' if wrong_total <= 0 else 'FAILED'}")
            print(f"# Avg bus bandwidth    : {mean_bus:.6g}")
            print("#")
            path = out_path(o, op)
            chunk = h5out.backend_chunk(o.backend, nnodes, op)
            with atomic_h5(path) as f:
                h5out.write_provenance(f, "gradsync-bench", hosts, cpus=cpus)
                attrs = {"source": "pytorch", "torch_version": torch.__version__, "backend": o.backend,
                         "op": op, "algo": algo, "device": o.device, "dtype": o.datatype,
                         "redop": "sum" if reduces else "none", "root": o.root if op == "broadcast" else -1,
                         "ranks_per_node": rpn, "chunk_bytes": 0, "chunk_bytes_used": chunk[0], "chunk_reason": chunk[1],
                         "channels": 1, "iters": o.iters,
                         "warmup": o.warmup_iters, "check": o.check, "min_bytes": o.min_bytes,
                         "max_bytes": o.max_bytes, "step_factor": o.stepfactor, "step_bytes": 0,
                         "bus_factor": busf(p), "timing": "barrier, then one blocking torch.distributed call "
                         "timed on every rank (perf_counter; cuda: synchronize after); max over ranks",
                         "off_cache_bytes": o.off_cache_bytes, "busy_threads": o.busy_threads,
                         "comm_sched": comm_sched, "out_of_bounds": wrong_total, "avg_busbw_GBps": mean_bus, "in_place": int(op in ("allreduce", "broadcast"))}
                for k, v in attrs.items():
                    h5out.set_attr(f, k, v)
                h5out.write_dataset(f, "size_bytes", sizes, "int")
                h5out.write_dataset(f, "count", counts, "int")
                h5out.write_dataset(f, "algo_used", [algo] * len(sizes), "str")
                f.create_dataset("oop/time_us", data=times)
                h5out.write_dataset(f, "oop/time_us_avg", avg, "float")
                h5out.write_dataset(f, "oop/algbw_GBps", algbw, "float")
                h5out.write_dataset(f, "oop/busbw_GBps", busbw, "float")
                h5out.write_dataset(f, "oop/nwrong", nwrong, "int")
            print(f"# wrote {path}")
            if wrong_total > 0:
                status = 1
    spin.close()
    st = torch.tensor([status], dtype=torch.int64, device=dev)
    dist.all_reduce(st, op=dist.ReduceOp.MAX)
    dist.destroy_process_group()
    return int(st.item())


if __name__ == "__main__":
    from gradsync_torch.launch import exit_now
    exit_now(main() or 0)
