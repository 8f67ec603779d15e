"""gradsync_torch.example — a small DDP trainer that records itself.

    scripts/torchrun --nproc-per-node 2 -m gradsync_torch.example --bucket-mb 25 --hook fp16 --steps 40 --out run.h5

Purpose: a real PyTorch DDP job (gloo on CPU, or nccl on GPUs) whose every step the
recorder (recorder.py) writes in the gradsync-train schema, so `gradsync-model compare`
can be checked against PyTorch itself.
Approach: a four-layer convolutional network on a learnable synthetic data set: class c
has a fixed random smooth prototype image, a sample is its prototype plus Gaussian noise;
each rank draws its own batches (seeded by seed, rank and step), so the loss falls and the
held-out accuracy at the end says the run learned. Options choose the DDP bucket size,
the communication hook (none, fp16, bf16, powersgd:rank=R[,start=K]), overlap (default) or
communication after backward (--no-overlap, the recorder defers every bucket to the end of
backward), autocast (--amp: bf16 on CPU, fp16 + GradScaler on CUDA), gradient accumulation
(--accumulate K: K micro-steps of --batch samples per optimizer step, the first K-1 under
DDP's no_sync()).
Cost: about 1.15 M parameters (4.6 MB of fp32 gradients) at the default --width 32.
--no-record runs the same loop without the recorder; both modes print the median step time
measured by the loop itself (gradsync_torch.overhead measures the recorder's cost).
"""
import json
import os
import statistics
import sys
import time

from .launch import Parser, add_comm_sched_option, parse_comm_sched


def parse_hook(text):
    """'none' | 'fp16' | 'bf16' | 'powersgd:rank=R[,start=K]' -> (kind, params)."""
    name, _, rest = text.partition(":")
    params = {}
    for kv in filter(None, rest.split(",")):
        k, eq, v = kv.partition("=")
        if not eq:
            raise ValueError(f"option --hook: '{kv}' is not key=value")
        try:
            params[k] = int(v)
        except ValueError as e:
            raise ValueError(f"option --hook: {k}={v} is not an integer") from e
    allowed = {"none": set(), "allreduce": set(), "fp16": set(), "bf16": set(), "powersgd": {"rank", "start"}}
    if name not in allowed:
        raise ValueError(f"option --hook: unknown hook '{name}' (known: none, fp16, bf16, powersgd:rank=R[,start=K])")
    extra = set(params) - allowed[name]
    if extra:
        raise ValueError(f"option --hook: {name} takes no {', '.join(sorted(extra))}")
    if name == "powersgd" and params.get("rank", 0) < 1:
        raise ValueError("option --hook: powersgd needs rank=R with R >= 1")
    if name == "powersgd" and params.get("start", 2) < 2:
        raise ValueError("option --hook: powersgd start must be >= 2 (torch's PowerSGD with error feedback)")
    return name, params


def add_options(ap, loop=True):
    """The trainer's options (gradsync_torch.overhead takes them without the loop's own:
    --steps, --no-overlap, --trace, --timing-json)."""
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb (default 25)")
    ap.add_argument("--hook", default="none", help="none | fp16 | bf16 | powersgd:rank=R[,start=K] (default none)")
    if loop:
        ap.add_argument("--no-overlap", action="store_true", help="all-reduce the buckets after backward")
    ap.add_argument("--amp", action="store_true", help="autocast (bf16 on CPU, fp16 + GradScaler on CUDA)")
    if loop:
        ap.add_argument("--steps", type=int, default=40)
        ap.add_argument("--accumulate", type=int, default=1,
                        help="micro-steps per optimizer step, of --batch samples each: gradient accumulation "
                        "under DDP's no_sync(), the last one synchronizes (default 1)")
    ap.add_argument("--warmup", type=int, default=5,
                    help="steps left out of the file's statistics (default 5)" if loop else
                    "untimed steps of each copy before the blocks (default 5)")
    ap.add_argument("--batch", type=int, default=32, help="samples per rank per step (default 32)")
    ap.add_argument("--width", type=int, default=32, help="channels of the first convolution (default 32)")
    ap.add_argument("--image", type=int, default=16, help="image side in pixels (default 16)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank (default 1)")
    ap.add_argument("--backend", default=None, help="gloo (default on CPU) | nccl | mpi")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    add_comm_sched_option(ap)
    ap.add_argument("--out", default=None, help="result file (default results/torch-cnn-<UTC>.h5)" if loop else
                    "keep the recorded copy's file here (default: none is written)")
    if loop:
        ap.add_argument("--trace", default=None, help="also write the measured Chrome trace JSON here")
        ap.add_argument("--timing-json", default=None, help="rank 0 writes the loop's own step times here")


def check_options(ap, o):
    try:
        o.hook_kind, o.hook_params = parse_hook(o.hook)
        o.comm_sched_spec = parse_comm_sched(o.comm_sched)
    except ValueError as e:
        ap.error(str(e))
    steps = getattr(o, "steps", None)  # None: a program without the loop's --steps
    for name in ("steps", "accumulate", "batch", "width", "image", "threads"):
        if getattr(o, name, None) is not None and getattr(o, name) < 1:
            ap.error(f"option --{name}: must be >= 1, got {getattr(o, name)}")
    if o.bucket_mb <= 0:
        ap.error(f"option --bucket-mb: must be > 0, got {o.bucket_mb}")
    if o.warmup < 0 or (steps is not None and o.warmup >= steps):
        ap.error(f"option --warmup: must be in 0..steps-1, got {o.warmup}")
    if o.image % 8:
        ap.error(f"option --image: must be a multiple of 8, got {o.image}")
    return o


def options(argv):
    ap = Parser(prog="python -m gradsync_torch.example", description=__doc__.split("\n\n")[0])
    add_options(ap)
    ap.add_argument("--no-record", action="store_true", help="run without the recorder (overhead baseline; PowerSGD on gloo "
                    "then runs its buckets one at a time, as the recorder does: gradsync_torch.hooks)")
    o = check_options(ap, ap.parse_args(argv))
    if o.no_record and o.no_overlap:
        ap.error("option --no-overlap: needs the recorder (it defers the buckets); drop --no-record")
    return o


def build(o, dev):
    """The network (weights seeded by o.seed) and batch(step, rank, n) -> (x, y): class c has a
    fixed random smooth prototype image, a sample is its prototype plus Gaussian noise."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class CNN(nn.Module):
        def __init__(self, w, side, classes=10):
            super().__init__()
            self.conv1 = nn.Conv2d(3, w, 3, padding=1)
            self.conv2 = nn.Conv2d(w, 2 * w, 3, padding=1)
            self.conv3 = nn.Conv2d(2 * w, 4 * w, 3, padding=1)
            self.fc1 = nn.Linear(4 * w * (side // 8) ** 2, 64 * w)
            self.fc2 = nn.Linear(64 * w, classes)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = F.max_pool2d(F.relu(self.conv3(x)), 2)
            return self.fc2(F.relu(self.fc1(x.flatten(1))))

    g = torch.Generator().manual_seed(o.seed)
    protos = F.avg_pool2d(torch.randn(10, 3, o.image + 2, o.image + 2, generator=g), 3, stride=1)

    def batch(step, r, n):
        gg = torch.Generator().manual_seed(o.seed * 1_000_003 + r * 10_007 + step)
        y = torch.randint(0, 10, (n,), generator=gg)
        x = protos[y] + 0.8 * torch.randn(n, 3, o.image, o.image, generator=gg)
        return x.to(dev), y.to(dev)

    torch.manual_seed(o.seed)
    return CNN(o.width, o.image).to(dev), batch


def make_hook(o):
    """(hook, state) for o.hook, (None, None) for none; a fresh state on every call (PowerSGD's
    error feedback and warm start belong to one model)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    if o.hook_kind == "allreduce":
        return default_hooks.allreduce_hook, None
    if o.hook_kind == "fp16":
        return default_hooks.fp16_compress_hook, None
    if o.hook_kind == "bf16":
        return default_hooks.bf16_compress_hook, None
    if o.hook_kind == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=o.hook_params["rank"],
                                            start_powerSGD_iter=o.hook_params.get("start", 2),
                                            use_error_feedback=True, warm_start=True, random_seed=o.seed)
        return powerSGD_hook.powerSGD_hook, state
    return None, None


class Stepper:
    """One training step as the example runs it (autocast with --amp, GradScaler on CUDA)."""

    def __init__(self, o):
        import torch
        self.o = o
        self.amp = ("fp16" if o.device == "cuda" else "bf16") if o.amp else "none"
        self.scaler = torch.amp.GradScaler("cuda") if (o.amp and o.device == "cuda") else None
        self.dtype = torch.float16 if o.device == "cuda" else torch.bfloat16

    def __call__(self, model, opt, x, y, early=()):
        """One optimizer step on (x, y); `early`: the batches of the micro-steps before it
        (gradient accumulation: their backward under DDP's no_sync(), the last one's
        synchronizes; each loss divided by the micro-step count). Returns the last loss."""
        k = len(early) + 1
        for xe, ye in early:
            with model.no_sync():
                self._backward(self._loss(model, xe, ye), k)
        loss = self._loss(model, x, y)
        self._backward(loss, k)
        if self.scaler is not None:
            self.scaler.step(opt)
            self.scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    def _loss(self, model, x, y):
        import torch
        import torch.nn.functional as F
        with torch.autocast(self.o.device, dtype=self.dtype, enabled=self.o.amp):
            return F.cross_entropy(model(x), y)

    def _backward(self, loss, k):
        (loss / k if self.scaler is None else self.scaler.scale(loss / k)).backward()


def wrap(o, dev, net):
    """net in DistributedDataParallel with o's bucket size, and its SGD optimizer."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(net, bucket_cap_mb=o.bucket_mb, device_ids=[dev.index] if o.device == "cuda" else None)
    return model, torch.optim.SGD(model.parameters(), lr=o.lr, momentum=0.9)


def record_args(o, argv, amp, **extra):
    """The recorder's keyword arguments for a run of o (argv: main's, None for sys.argv)."""
    return dict(model_name="torch-cnn", batch_per_rank=o.batch, amp=amp, warmup_steps=o.warmup, seed=o.seed,
                argv=[sys.argv[0]] + (sys.argv[1:] if argv is None else list(argv)),
                extra={"image": o.image, "width": o.width, "threads": o.threads, **extra})


def device_of(o):
    import torch
    if o.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def main(argv=None):
    o = options(sys.argv[1:] if argv is None else argv)
    import torch
    import torch.distributed as dist

    from . import hooks
    from .launch import init_distributed
    from .recorder import record

    backend = init_distributed("example", o)
    if backend is None:
        return 2
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = device_of(o)
    net, batch = build(o, dev)
    model, opt = wrap(o, dev, net)
    hook, state = make_hook(o)
    step_fn = Stepper(o)
    amp = step_fn.amp

    out = o.out
    if out is None and not o.no_record:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        out = os.path.join("results", f"torch-cnn-{stamp}.h5")
    rec = None
    if o.no_record:
        if hook is not None:
            hooks.register(model, state, hook)
    else:
        rec = record(model, opt, out, hook=hook, state=state, overlap=not o.no_overlap, trace=o.trace,
                     **record_args(o, argv, amp))

    step_times = []
    model.train()
    t_prev = time.perf_counter()
    if rec is not None:
        rec.start()
    for step in range(o.steps):
        k = o.accumulate
        early = [batch(step * k + i, rank, o.batch) for i in range(k - 1)]
        x, y = batch(step * k + k - 1, rank, o.batch)
        loss = step_fn(model, opt, x, y, early)
        if rec is not None:
            rec.note_loss(loss)
        t = time.perf_counter()
        step_times.append(t - t_prev)
        t_prev = t

    # Held-out accuracy (a data set the run never saw: other seeds' stream).
    model.eval()
    with torch.no_grad():
        xe, ye = batch(10**6, world + rank, 256)
        acc = float((net(xe).argmax(1) == ye).float().mean())
    accs = [None] * world
    dist.all_gather_object(accs, acc)
    if rec is not None:
        rec.extra["final_eval_accuracy"] = sum(accs) / world
        rec.close()
    if rank == 0:
        med = statistics.median(step_times[o.warmup:])
        print(f"gradsync_torch.example: {world} ranks, hook {o.hook}, bucket {o.bucket_mb:g} MB, "
              f"{'overlap' if not o.no_overlap else 'no overlap'}, amp {amp}: loss {float(loss.detach()):.4f}, "
              f"held-out accuracy {sum(accs) / world:.3f}, median step {med * 1e3:.2f} ms"
              + (f", wrote {out}" if rec is not None else ""))
        if o.timing_json:
            with open(o.timing_json, "w") as f:
                json.dump({"step_time_s": step_times, "warmup": o.warmup, "recorded": rec is not None}, f)
    # Tear down in order: both ranks done with the group, DDP's reducer (which holds the
    # group) gone, then the group (the process then ends through launch.exit_now).
    dist.barrier()
    del model
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    from gradsync_torch.launch import exit_now
    exit_now(main() or 0)
