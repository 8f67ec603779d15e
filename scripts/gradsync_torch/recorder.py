"""gradsync_torch.recorder — record a PyTorch DDP run as a gradsync-train result file.

Purpose: a researcher adds one call to a DDP script,

    rec = gradsync_torch.record(ddp_model, optimizer, out="run.h5", hook=fp16_compress_hook)
    ...training loop unchanged...
    rec.close()

and gets a file in the gradsync-train schema (results/README.md) that `gradsync-model
calibrate` and `compare` read like gradsync's own (netmodel/train_file.cpp).

Approach (nothing in the user's loop changes; everything comes from hooks):
  * step boundaries: the optimizer's step post-hook ends a step; the next step starts there
    (the first at record() / start()).
  * data_s     = step start -> the DDP module's forward pre-hook (waiting for the batch and
                 anything else the loop does between optimizer.step() and forward, e.g.
                 zero_grad);
  * forward_s  = forward pre-hook -> the first gradient reaching the model's output (a
                 tensor hook set in the forward hook, in C++ where the native log is in
                 use): forward plus the loss;
  * backward_s = that -> the moment DDP hands over its last bucket (then every gradient is
                 ready: DDP launches buckets in index order and the last needs all of them);
  * per bucket (from the communication hook that wraps the user's; without a user hook,
    with overlap, in C++ (native_hook.cpp), read once a step: DDP's own all-reduce observed
    by hooks on its process group where torch has them, else a C++ hook doing DDP's
    all-reduce; recorder_hook = pg|native|python in the file): ready = DDP calls the
    hook (pg: issues the bucket's all-reduce), start = the collective is launched
    (overlap: at ready, but not before the previous bucket's end, since one communication queue serves buckets in order; --no-overlap: the
    recorder's deferring wrapper launches all buckets one after the other once the last is
    handed over), end = the hook's future completes (its callback); a bucket that ended
    before its predecessor (gloo runs two at once on its worker threads) keeps its launch;
  * comm_exposed_s = backward end -> DDP's end of backward (an autograd callback queued after
    DDP's own: every bucket waited for and its gradients written back; at least the last
    bucket's end, at most the optimizer's start: a later stamp is a callback thread waiting for a
    core): what backward() waits for communication; reducer_s = DDP's end of backward
    -> the optimizer's pre-hook (the return from backward() to the caller: the step's time
    that is neither compute nor communication); optimizer_s = the optimizer's pre-hook ->
    post-hook; step_time_s = step start -> optimizer post-hook.
  * encode_s = a compressing hook's call up to its first collective (its synchronous part: a
    cast, PowerSGD's error feedback and P = M Q; the callbacks that run inside the call when
    that collective completed first are not counted); decode_s (serial buckets only: PowerSGD on gloo) = the buckets'
    time less their collectives (torch.distributed.all_reduce is wrapped while recording,
    launch -> future completion) less encode_s: the work in the hook's callbacks.
  * per bucket, codec_s (/buckets/codec_s) = the bucket's time (hook call -> its future's
    completion) not covered by its own collectives: a collective belongs to the bucket whose
    hook call launched it or, with serial buckets, to the one bucket in flight. 0 without a
    compressing hook; NaN where a collective of the step could not be attributed (a hook
    that launches collectives from its callbacks while buckets overlap: PowerSGD on NCCL).
    The trace draws the collectives as "all-reduce bucket k" and the rest as "codec bucket k".
  * tensor ready (/model/tensor_ready_s): a post-accumulate-grad hook on every parameter
    stamps when its gradient is ready; rank 0's median over the steps after warmup, from the
    step's start;
  * bucket membership (/model/tensor_bucket): GradBucket.parameters() of each bucket in the
    first three recorded steps (pg: of the reducer's buckets, _get_zeros_like_grad_buckets),
    i.e. DDP's own assignment after its rebuild at step 1 (DDP does not change it later).
  * close() gathers every rank's table (all_gather_object on the default group) and rank 0
    writes: step_time_s = max over ranks, the other /steps columns the mean, /buckets rank 0's
    timeline (as gradsync-train), and every rank's own columns as /ranks/<column> [steps,
    nranks] (step_time_s, data_s, forward_s, backward_s, backward_sync_s, comm_exposed_s,
    optimizer_s, reducer_s, encode_s, decode_s). The file is written atomically (gradsync_analysis.atomicfile).

Wire precision: torch.autocast leaves gradients and their all-reduce in fp32, so the file
says precision = fp32 and amp = bf16|fp16|none; a cast hook (fp16/bf16) is the compressor
of that name, PowerSGD is powersgd:rank=R,start=K (gradsync's spec, netmodel/compress.cpp).
Gradient accumulation: micro-steps whose backward runs under DDP's no_sync(), the last one
synchronized (as gradsync-train --accumulate K): `accumulate` = micro-steps per optimizer step
(the most common count after warmup), data_s, forward_s and backward_s summed over them (a
micro-step's backward under no_sync() ends with autograd's queue: a callback queued at its
start), backward_sync_s the synchronized micro-step's backward alone, the buckets and tensor ready times the synchronized backward's, from the step's start.
A forward after a synchronized backward with no optimizer step between them ends that step
as skipped (/steps/skipped = 1, optimizer_s = 0): GradScaler's step that found an inf, or a
loop that accumulates without no_sync() (each synchronizing micro-step is then a step of its
own, as its communication is). Limits: the default process group.
PowerSGD on gloo runs its buckets one at a time (serial_buckets = 1; see __init__).

Cost: per step, a tensor hook on the output and the optimizer's and forward's hooks (with
pg, about 75 us of Python a step on this project's 2-core host, timed per hook; 0.6% of the
example's 13 ms step). Per bucket, without a user hook: pg, two C++ stamps and a callback
on the work's future (DDP's reducer runs unchanged); native, the same and the hook's
division of the bucket by the world size (DDP's built-in all-reduce fuses it into the copy
into the bucket; a pass of its own under any hook, as in DDP's builtin ALLREDUCE hook). pg
reads DDP's bucket layout (parameters, sizes) from its reducer in the first three recorded
steps, a copy of the buckets each time. With the Python hook: one future callback (the end
stamp, which also unwraps a plain all-reduce's value: DDP's own Python allreduce_hook has
one too) and a few perf_counter() reads; with a compressing hook or serial buckets, per
async all_reduce one more callback (the collective's end). At close one all_gather_object
of the tables (O(steps x buckets) floats per rank).
"""
import collections
import json
import math
import os
import statistics
import sys
import threading
import time

import torch
import torch.distributed as dist

from gradsync_analysis.atomicfile import atomic_file, atomic_h5

from . import h5out
from .hooks import needs_serial
from .launch import comm_sched_now

now = time.perf_counter

MEMBERSHIP_STEPS = 3

# torch.distributed backend -> the gradsync algorithm name the model prices it with.
# Gloo's and NCCL's all-reduce are rings for the sizes DDP sends (on 2 ranks every
# algorithm is one exchange); MPI is the library's own (netmodel resolve_algo "mpi").
BACKEND_ALGO = {"gloo": "ring", "nccl": "ring", "mpi": "mpi"}

# Known DDP communication hooks -> gradsync compressor spec (netmodel/compress.cpp names).
def hook_spec(hook, state):
    """(name for the file, gradsync compress spec, params dict) for a DDP comm hook."""
    if hook is None:
        return "none", "none", {}
    name = getattr(hook, "__name__", type(hook).__name__)
    if name in ("allreduce_hook",):
        return "allreduce", "none", {}
    if name == "fp16_compress_hook":
        return "fp16", "fp16", {}
    if name == "bf16_compress_hook":
        return "bf16", "bf16", {}
    if name in ("powerSGD_hook", "batched_powerSGD_hook"):
        params = {"matrix_approximation_rank": int(state.matrix_approximation_rank),
                  "start_powerSGD_iter": int(state.start_powerSGD_iter),
                  "min_compression_rate": float(state.min_compression_rate),
                  "use_error_feedback": bool(state.use_error_feedback),
                  "warm_start": bool(state.warm_start)}
        spec = (f"powersgd:rank={params['matrix_approximation_rank']},start={params['start_powerSGD_iter']},"
                f"min_rate={params['min_compression_rate']:g}")
        return ("batched_powersgd" if name.startswith("batched") else "powersgd"), spec, params
    return name, "none", {}


def _wire_bytes(bucket_bytes, spec, p):
    """Bytes one rank sends per step for plain/cast all-reduces (ring: 2(p-1)/p x payload);
    NaN for compressors whose payload the recorder cannot see (PowerSGD)."""
    if p <= 1:
        return 0.0
    if spec == "none":
        scale = 1.0
    elif spec in ("fp16", "bf16"):
        scale = 0.5
    else:
        return math.nan
    return 2.0 * (p - 1) / p * scale * float(sum(bucket_bytes))



class _StampedWork:
    """A collective's Work whose future completes only after the collective's end time is
    stamped (span[1]). A done-callback on the Work's own future would run after its waiters
    woke: the hook, DDP and the optimizer step could all finish first, and the last step's
    span would still be open when the recorder writes (seen as decode_s NaN in CI)."""

    def __init__(self, work, span):
        self._work = work

        def stamp(f):
            span[1] = now()
            return f.value()
        self._fut = work.get_future().then(stamp)

    def get_future(self):
        return self._fut

    def wait(self, *args, **kwargs):
        self._work.wait(*args, **kwargs)
        self._fut.wait()
        return True

    def is_completed(self):
        return self._fut.done()

    def __getattr__(self, name):
        return getattr(self._work, name)

class Recorder:
    """See the module docstring. Create with record(); call close() once, on every rank."""

    def __init__(self, model, optimizer, out, hook=None, state=None, overlap=True, model_name=None,
                 batch_per_rank=None, amp="none", warmup_steps=2, loader_workers=0, seed=0,
                 trace=None, argv=None, extra=None, serial=None):
        if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
            raise TypeError("gradsync_torch.record: model must be a torch.nn.parallel.DistributedDataParallel")
        if not dist.is_initialized():
            raise RuntimeError("gradsync_torch.record: torch.distributed is not initialized")
        if getattr(model, "_comm_hooks", None):
            raise RuntimeError("gradsync_torch.record: the model already has a communication hook; pass it as "
                               "record(..., hook=HOOK, state=STATE) instead of register_comm_hook (DDP takes one)")
        self.model, self.optimizer, self.out = model, optimizer, out
        self.inner_hook, self.inner_state = hook, state
        self.overlap = bool(overlap)
        self.model_name = model_name or type(model.module).__name__.lower()
        self.batch_per_rank = batch_per_rank
        self.amp, self.warmup_steps, self.loader_workers, self.seed = amp, int(warmup_steps), loader_workers, seed
        self.trace_path, self.argv, self.extra = trace, argv, dict(extra or {})
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.backend = str(dist.get_backend())
        self.hook_name, self.compress, self.hook_params = hook_spec(hook, state)
        # PowerSGD's hook issues further all-reduces from its futures' callbacks; on gloo,
        # two buckets in flight at once then interleave differently on the ranks and gloo
        # aborts ("Received data size doesn't match", torch 2.15) or hangs (hooks.py). Serial:
        # a bucket is launched only after the previous one completed (waited for on the
        # autograd thread), as hooks.register runs such a hook without the recorder.
        self.serial = bool(serial) if serial is not None else needs_serial(hook, self.backend)
        self._prev_fut = None
        self.closed = False
        # The hooks' collectives are timed (launch -> its future's completion) by wrapping
        # torch.distributed.all_reduce while recording, and attributed to their bucket
        # (_launching: the bucket whose hook call is running, on that thread; _in_flight:
        # with buckets one at a time, the one not yet completed), so that a bucket's time
        # splits into collectives and codec work (codec_s). With serial buckets, decode_s is
        # the codec work after the hook calls returned (their callbacks: PowerSGD's
        # Q = M^T P, orthogonalisation, M = P Q^T and error feedback).
        # Only a compressing hook's or serial buckets' collectives are read (codec_s,
        # decode_s): otherwise torch.distributed.all_reduce stays as it is.
        self._launching, self._in_flight = None, None
        self._orig_all_reduce = dist.all_reduce
        if self.compress != "none" or self.serial:
            dist.all_reduce = self._timed_all_reduce

        # Parameter names in registration (forward) order, keyed by storage address.
        self.names = [n for n, p in model.module.named_parameters() if p.requires_grad]
        self.params = [p for p in model.module.parameters() if p.requires_grad]
        self.by_ptr = {p.data_ptr(): i for i, p in enumerate(self.params)}
        self.membership = {}  # param index -> bucket index (the first recorded steps)

        self.steps = []       # per step: dict of phase times (absolute perf_counter)
        self.buckets = []     # per step: list of [index, bytes, ready, start, end]
        self.losses = []
        self._new_step(now())
        self._pending = []    # --no-overlap: (bucket, future) handed over, not launched yet

        model.register_forward_pre_hook(self._fwd_pre)
        model.register_forward_hook(self._fwd_post)
        # Each parameter's gradient ready time (after autograd accumulated it: the moment DDP
        # marks it ready), for /model/tensor_ready_s: a prediction of this run's compute
        # under other buckets places each tensor where it was ready, not at the end of the
        # bucket it went to here. One Python call per parameter per step;
        # GRADSYNC_TORCH_TENSOR_READY=0 leaves them out (and the column).
        self.tensor_ready = os.environ.get("GRADSYNC_TORCH_TENSOR_READY", "1") != "0"
        if self.tensor_ready:
            for i, p in enumerate(self.params):
                p.register_post_accumulate_grad_hook(lambda _p, i=i: self._grad_ready(i))
        optimizer.register_step_pre_hook(self._opt_pre)
        optimizer.register_step_post_hook(self._opt_post)
        # Without a hook of the user's, with overlap: the native hook (DDP's all-reduce,
        # stamped in C++; native.py), else the Python one (_hook).
        self._native, self._observer, self.recorder_hook = None, None, "python"
        self._bucket_bytes = None  # pg: DDP's bucket sizes (bytes, by index), from its reducer
        if hook is None and self.overlap and not self.serial:
            from . import native
            got = native.install(model, self.rank)
            if got is not None:
                self.recorder_hook, self._native, self._observer = got
        if self._native is None:
            model.register_comm_hook(state, self._hook)

    # ---- hooks -------------------------------------------------------------------------------

    def _new_step(self, t):
        self.cur = {"start": t, "cpu": time.process_time(), "bwd": math.nan, "bwd_end": math.nan,
                    "bwd_done": math.nan, "opt": math.nan, "end": math.nan, "encode": 0.0, "colls": [], "tready": {},
                    "unattributed": 0,
                    # Every training forward of the step (gradient accumulation gives several):
                    # its start and end, whether DDP synchronizes its backward (not under
                    # no_sync()), and, under no_sync(), its backward's start and end (Python
                    # stamps); _micro_steps() sorts them out at close. "skipped": the step
                    # ended at the next forward without an optimizer step (_fwd_pre).
                    "recs": [], "skipped": 0}
        self.cur_buckets = []

    def _fwd_pre(self, module, args):
        if not module.training or not torch.is_grad_enabled():
            return
        t = now()
        # A forward after a synchronized backward with no optimizer step between: that step
        # was skipped (GradScaler found an inf; or a loop that accumulates without no_sync(),
        # every micro-step synchronizing): it ends here, without optimizer time.
        if not math.isnan(self.cur["bwd_end"]) or (self._native is not None and self._native.grad_seen):
            self._end_step(t, skipped=True)
        self.cur["recs"].append({"fwd": t, "fwd_end": math.nan, "sync": True, "bwd": math.nan, "end": math.nan})
        if self._observer is not None:
            self._observer.armed = True
        if self.batch_per_rank is None:
            for a in args:
                if torch.is_tensor(a) and a.dim() > 0:
                    self.batch_per_rank = int(a.shape[0])
                    break

    def _fwd_post(self, module, args, output):
        if not module.training or not torch.is_grad_enabled():
            return
        outs = output if isinstance(output, (tuple, list)) else [output]
        rec = self.cur["recs"][-1]  # _fwd_pre's, same conditions
        rec["fwd_end"] = now()
        rec["sync"] = getattr(self.model, "require_backward_grad_sync", True)
        for o in outs:
            if torch.is_tensor(o) and o.requires_grad:
                if not rec["sync"]:  # under no_sync(): no bucket marks its backward
                    o.register_hook(lambda grad, rec=rec: self._local_bwd_start(rec, grad))
                elif self._native is not None:
                    self._native.stamp_first_grad(o)  # C++ hook; read at take()
                else:
                    o.register_hook(self._bwd_start)
                break

    def _bwd_start(self, grad):
        if math.isnan(self.cur["bwd"]):
            self.cur["bwd"] = now()
        return grad

    def _local_bwd_start(self, rec, grad):
        """A micro-step under DDP's no_sync(): its backward ends when autograd's queue does."""
        if math.isnan(rec["bwd"]):
            rec["bwd"] = now()
            torch.autograd.Variable._execution_engine.queue_callback(lambda: rec.__setitem__("end", now()))
        return grad

    def _grad_ready(self, i):
        self.cur["tready"][i] = now()

    def _bwd_done(self):
        self.cur["bwd_done"] = now()

    def _opt_pre(self, opt, args, kwargs):
        self.cur["opt"] = now()

    def _opt_post(self, opt, args, kwargs):
        self._end_step(now())

    def _end_step(self, t, skipped=False):
        if self._observer is not None:
            self._observer.armed = False
        if self._native is not None:
            self._take_native()
        if skipped:
            self.cur["opt"] = t
            self.cur["skipped"] = 1
        self.cur["end"] = t
        self.cur["cpu"] = time.process_time() - self.cur["cpu"]  # the process's CPU over the step
        self.steps.append(self.cur)
        self.buckets.append(self.cur_buckets)
        self._new_step(t)

    def _take_native(self):
        """The native hook's rows since the last call, into the step (as _hook would have
        written them; the bucket's start is its launch, at ready)."""
        rows, done, first_grad = self._native.take(1.0)
        if first_grad > 0 and math.isnan(self.cur["bwd"]):
            self.cur["bwd"] = first_grad
        if self._observer is not None:
            rows = self._observed_buckets(rows)
        for idx, nbytes, ready, start, end, last, params, _ in rows:
            if params is not None:
                for ptr in params:
                    i = self.by_ptr.get(ptr)
                    if i is not None:
                        self.membership[i] = idx
            self.cur_buckets.append([idx, nbytes, ready, start, end if end > 0 else math.nan, []])
            if last:
                self.cur["bwd_end"] = ready
        if done:
            self.cur["bwd_done"] = max(done)
        # DDP's final assignment: the first three recorded steps (see _remember).
        self._native.want_params = len(self.steps) + 1 < MEMBERSHIP_STEPS

    def _observed_buckets(self, rows):
        """pg: the all-reduces seen in this step's backward, as bucket rows. They come in
        DDP's launch order, which is its bucket index order; in the first recorded steps DDP's
        reducer gives each bucket's parameters and size (it rebuilds the buckets once, at the
        second forward), later steps keep the last sizes and the buffers' addresses. A row
        that is not the next bucket's (another model's all-reduce in the same backward, where
        the size or, once learnt, the buffer differs) is left out."""
        learning = len(self.steps) < MEMBERSHIP_STEPS or self._bucket_bytes is None
        if learning:
            buckets = self.model.reducer._get_zeros_like_grad_buckets()
            self._bucket_bytes = [int(b.buffer().numel()) * b.buffer().element_size() for b in buckets]
            self._bucket_params = [[p.data_ptr() for p in b.parameters()] for b in buckets]
            self._bucket_buffers = [None] * len(buckets)
        out, k = [], 0
        for _, nbytes, ready, start, end, _, _, buffer in rows:
            if k >= len(self._bucket_bytes) or nbytes != self._bucket_bytes[k]:
                continue
            if learning:
                self._bucket_buffers[k] = buffer
            elif buffer != self._bucket_buffers[k]:
                continue
            out.append((k, nbytes, ready, start, end, k == len(self._bucket_bytes) - 1,
                        self._bucket_params[k] if learning else None, buffer))
            k += 1
        return out

    def note_loss(self, loss):
        """Optional: the step's loss (a tensor or float) for /steps/loss."""
        self.losses.append(float(loss.detach()) if torch.is_tensor(loss) else float(loss))

    def start(self):
        """Optional: mark the start of the first step (default: record() time)."""
        if self._native is not None:
            self._native.take()  # buckets of steps before this one
        self._new_step(now())

    def _timed_all_reduce(self, tensor, *args, **kwargs):
        t = now()
        work = self._orig_all_reduce(tensor, *args, **kwargs)
        if work is not None and kwargs.get("async_op", False):
            span = [t, math.nan]
            self.cur["colls"].append(span)
            # The hook call's own launches (same thread), else the one bucket in flight.
            launching = self._launching
            owner = launching[0] if launching is not None and launching[1] == threading.get_ident() else self._in_flight
            if owner is not None:
                owner[5].append(span)
            else:
                self.cur["unattributed"] += 1
            return _StampedWork(work, span)
        return work

    def _launch(self, bucket, row):
        """Runs the user's hook (or a plain all-reduce); the time its call takes is the
        synchronous part of the hook (a cast hook's cast, PowerSGD's P = M Q and the
        launches), counted as encode_s for compressing hooks."""
        t0 = now()
        self._launching = (row, threading.get_ident())
        try:
            fut = self._launch_inner(bucket)
        finally:
            self._launching = None
        if self.serial or not self.overlap:  # one bucket at a time: its callbacks' collectives are its own
            self._in_flight = row
        if self.compress != "none":
            # Up to the call's first collective: a hook's callbacks run inside the call when
            # that collective has already completed (PowerSGD's P and Q steps, waits
            # included), and they are not its synchronous part.
            self.cur["encode"] += (row[5][0][0] if row[5] else now()) - t0
        return fut

    def _launch_inner(self, bucket):
        """The hook's future; without a user hook the all-reduce's own future, whose value
        is a list ([tensor]: the caller's callback unwraps it, see _value)."""
        if self.inner_hook is None:
            return dist.all_reduce(bucket.buffer().div_(self.world), async_op=True).get_future()
        return self.inner_hook(self.inner_state, bucket)

    def _value(self, f):
        return f.value()[0] if self.inner_hook is None else f.value()

    def _remember(self, bucket):
        idx = bucket.index()
        # DDP assigns buckets once more, at the forward after the first backward, and then
        # keeps them: the first three recorded steps see the final assignment.
        if len(self.steps) < MEMBERSHIP_STEPS:
            for p in bucket.parameters():
                i = self.by_ptr.get(p.data_ptr())
                if i is not None:
                    self.membership[i] = idx
        row = [idx, int(bucket.buffer().numel()) * 4, now(), math.nan, math.nan, []]  # 5: its collectives
        self.cur_buckets.append(row)
        return row

    def _hook(self, state, bucket):
        row = self._remember(bucket)
        last = bucket.is_last()
        if last:
            self.cur["bwd_end"] = row[2]
            # Queued after DDP's own end-of-backward callback (queued at its first gradient):
            # runs when DDP has waited for every bucket and written the gradients back.
            torch.autograd.Variable._execution_engine.queue_callback(self._bwd_done)
        if self.overlap:
            if self.serial and self._prev_fut is not None and bucket.index() > 0:
                self._prev_fut.wait()
            row[3] = now()
            fut = self._launch(bucket, row)

            def done(f, row=row):
                row[4] = now()
                if self._in_flight is row:
                    self._in_flight = None
                return self._value(f)
            self._prev_fut = fut.then(done)
            return self._prev_fut
        # No overlap: hold every bucket until DDP hands over the last one (the end of
        # backward), then reduce them one after the other, in index order.
        placeholder = torch.futures.Future()
        self._pending.append((bucket, row, placeholder))
        if not last:
            return placeholder
        pending, self._pending = self._pending, []
        for b, r, ph in pending:
            r[3] = now()
            fut = self._launch(b, r)
            fut.wait()
            value = self._value(fut)
            r[4] = now()
            self._in_flight = None
            ph.set_result(value)
        return placeholder

    # ---- the file ----------------------------------------------------------------------------

    @staticmethod
    def _micro_steps(s):
        """The step's forwards sorted out: the synchronized one (it owns the backward that
        started at s["bwd"]: the last synchronizing forward before it), the micro-steps under
        no_sync() before it (forward and backward), and forwards without a backward (forward
        time). {"fwd": the synchronized forward's start, "data", "fwd_sum", "bwd_sum" (the
        earlier ones' waits before their forwards, up to and including the synchronized one's,
        and their forward and backward), "micro" (micro-steps with a backward), "spans"
        (absolute [forward, backward, end] of the earlier ones, for the trace)}. Forwards after
        the synchronized backward stay in the step's tail (reducer_s)."""
        recs = s["recs"]
        if not recs:
            return {"fwd": math.nan, "data": math.nan, "fwd_sum": 0.0, "bwd_sum": 0.0, "micro": 1, "spans": []}
        sync = [i for i, r in enumerate(recs) if r["sync"]]
        before = [i for i in sync if not math.isnan(s["bwd"]) and recs[i]["fwd"] <= s["bwd"]]
        own = before[-1] if before else (sync[-1] if sync else len(recs) - 1)
        out = {"fwd": recs[own]["fwd"], "data": 0.0, "fwd_sum": 0.0, "bwd_sum": 0.0, "micro": 1, "spans": []}
        mark = s["start"]
        for r in recs[:own]:
            out["data"] += r["fwd"] - mark
            if not r["sync"] and not math.isnan(r["bwd"]) and not math.isnan(r["end"]):
                out["fwd_sum"] += r["bwd"] - r["fwd"]
                out["bwd_sum"] += r["end"] - r["bwd"]
                out["micro"] += 1
                mark = r["end"]
                out["spans"].append([r["fwd"], r["bwd"], r["end"]])
            else:  # a forward without a backward
                mark = r["fwd_end"] if not math.isnan(r["fwd_end"]) else r["fwd"]
                out["fwd_sum"] += mark - r["fwd"]
                out["spans"].append([r["fwd"], mark, mark])
        out["data"] += recs[own]["fwd"] - mark
        return out

    def _local_table(self):
        rows = []
        for s, bs in zip(self.steps, self.buckets):
            t0 = s["start"]
            mi = self._micro_steps(s)
            bwd_end = s["bwd_end"] if not math.isnan(s["bwd_end"]) else s["opt"]
            ends = [b[4] for b in bs if not math.isnan(b[4])]
            comm_end = max(ends) if ends else bwd_end
            if not math.isnan(s["bwd_done"]):
                comm_end = max(comm_end, s["bwd_done"])
            # backward() returned, and the optimizer started, only once the communication was
            # done: an end stamped later is its future callback's thread waiting for a core
            # (seen under the default policy on 2 cores, up to 2 ms), so the phases still tile.
            if not math.isnan(s["opt"]):
                comm_end = min(comm_end, s["opt"])
            # One queue serves buckets in order: a bucket starts when launched and the
            # previous one has ended -- unless it ended first (gloo ran the two at once on
            # its worker threads), then it started at its launch.
            sync_bwd = bwd_end - s["bwd"]  # the synchronized micro-step's backward
            prev_end = -math.inf
            brows = []
            for b in sorted(bs, key=lambda r: r[0]):
                start = max(b[3], prev_end) if prev_end <= b[4] else b[3]
                prev_end = max(prev_end, b[4])
                codec, spans = self._bucket_codec(s, b)
                # 5: codec_s, 6: its collectives and 7: the hook call (trace.py), from the step start
                brows.append([b[0], b[1], b[2] - t0, start - t0, b[4] - t0, codec,
                              [[t - t0, e - t0] for t, e in spans], b[3] - t0])
            rows.append({
                "step_time_s": s["end"] - t0,
                # Summed over the step's micro-steps (gradient accumulation under no_sync(),
                # as gradsync-train --accumulate); the buckets are the synchronized one's.
                "data_s": mi["data"],
                "forward_s": mi["fwd_sum"] + s["bwd"] - mi["fwd"],
                "backward_s": mi["bwd_sum"] + sync_bwd,
                "backward_sync_s": sync_bwd,
                "comm_exposed_s": max(0.0, comm_end - bwd_end),
                "optimizer_s": s["end"] - s["opt"],
                # DDP's own work after the communication: from the last bucket's end (and
                # DDP's end-of-backward callback, which copies the reduced gradients back)
                # until the optimizer starts (autograd's return to the caller included).
                "reducer_s": max(0.0, s["opt"] - comm_end),
                "comm_total_s": sum(r[4] - r[3] for r in brows),
                "encode_s": s["encode"],
                "decode_s": self._decode_s(s, bs),
                "cpu_s": s["cpu"],
                "buckets": brows,
                "tready": [s["tready"].get(i, math.nan) - t0 for i in range(len(self.params))],
                "abs": [s["start"], mi["fwd"], s["bwd"], bwd_end, s["opt"], s["end"]],
                "micro": mi["micro"],
                "micro_spans": mi["spans"],  # absolute, the forwards before the synchronized one
                "skipped": s["skipped"],
            })
        return rows

    def _bucket_codec(self, s, b):
        """(codec_s, collective spans clipped to the bucket) of one bucket row; codec_s is
        0 without a compressing hook, NaN when some collective of the step has no bucket or
        did not complete (spans then empty)."""
        if self.compress == "none":
            return 0.0, []
        if s["unattributed"] or math.isnan(b[3]) or math.isnan(b[4]) or any(math.isnan(e) for _, e in b[5]):
            return math.nan, []
        spans = sorted([max(t, b[3]), min(e, b[4])] for t, e in b[5] if min(e, b[4]) > max(t, b[3]))
        covered, reach = 0.0, b[3]
        for t, e in spans:
            covered += max(0.0, e - max(t, reach))
            reach = max(reach, e)
        return max(0.0, b[4] - b[3] - covered), spans

    def _decode_s(self, s, bs):
        """Serial buckets: the codec work after the hook call returned = the buckets' time
        (launch -> future completion) less their collectives and the synchronous part; NaN
        when the hook's collectives were not timed or did not all complete."""
        if not self.serial or not bs:
            return math.nan
        spans = s["colls"]
        if any(math.isnan(b[4]) for b in bs) or any(math.isnan(e) for _, e in spans):
            return math.nan
        busy = sum(b[4] - b[3] for b in bs)
        return max(0.0, busy - sum(e - t for t, e in spans) - s["encode"])

    def stop(self):
        """Ends recording on this rank without writing: torch.distributed.all_reduce is
        restored, and this rank's table is returned (per step a dict of the /steps and /ranks
        columns, and "buckets": rows [index, bytes, ready, start, end, codec_s, collective
        spans, hook call], times from the step's start). gradsync_torch.codecs reads it."""
        if self._orig_all_reduce is not None:
            dist.all_reduce = self._orig_all_reduce
        if self._observer is not None:
            self._observer.detach()
        elif self._native is not None:
            self._native.recording = False  # the hook stays (DDP takes one), stamping nothing
        self.closed = True
        return self._local_table()

    def close(self):
        """Gathers the ranks' tables; rank 0 writes `out` (and `trace`). Call on every rank."""
        if self.closed:
            return self.out
        local = {"host": h5out.hostname(), "cpus": h5out.cpu_list(), "machine": h5out.machine_id(),
                 "rows": self.stop(), "losses": self.losses,
                 "comm_sched": comm_sched_now()}
        gathered = [None] * self.world
        dist.all_gather_object(gathered, local)
        if self.rank == 0:
            self._write(gathered)
            if self.trace_path:
                from .trace import measured_trace
                with atomic_file(self.trace_path, text=True) as f:
                    json.dump(measured_trace(gathered), f)
        dist.barrier()
        return self.out

    def _write(self, gathered):
        hosts = [g["host"] for g in gathered]
        nsteps = min(len(g["rows"]) for g in gathered)
        if nsteps == 0:
            raise RuntimeError("gradsync_torch: no optimizer step was recorded (nothing to write)")
        nnodes = len(set(hosts))
        rpn = int(os.environ.get("LOCAL_WORLD_SIZE", self.world // nnodes))
        if rpn * nnodes != self.world:
            rpn = self.world // nnodes if self.world % nnodes == 0 else self.world
            nnodes = self.world // rpn
        cols = ["data_s", "forward_s", "backward_s", "backward_sync_s", "comm_exposed_s", "optimizer_s", "comm_total_s",
                "reducer_s", "cpu_s"]
        table = {c: [sum(g["rows"][i][c] for g in gathered) / self.world for i in range(nsteps)] for c in cols}
        table["step_time_s"] = [max(g["rows"][i]["step_time_s"] for g in gathered) for i in range(nsteps)]
        rows0 = gathered[0]["rows"][:nsteps]
        last = rows0[-1]["buckets"]
        bucket_bytes = [b[1] for b in last]
        table["bytes_sent"] = [_wire_bytes([b[1] for b in r["buckets"]], self.compress, self.world) for r in rows0]
        losses = gathered[0]["losses"]
        table["loss"] = [losses[i] if i < len(losses) else math.nan for i in range(nsteps)]
        # encode_s: the synchronous part of a compressing hook's call (see _launch); the rest
        # of its work (decompression, PowerSGD's Q step) runs in its future's callbacks:
        # decode_s where the buckets are serial and the hook's collectives were timed
        # (_decode_s), else absent (NaN: overlapping buckets share the time), not zero.
        table["encode_s"] = [sum(g["rows"][i]["encode_s"] for g in gathered) / self.world for i in range(nsteps)]
        table["decode_s"] = [sum(g["rows"][i]["decode_s"] for g in gathered) / self.world for i in range(nsteps)]
        table["loss_scale"] = [1.0] * nsteps
        accumulate = _accumulate(rows0, min(self.warmup_steps, max(0, nsteps - 1)))
        table["skipped"] = [max(g["rows"][i]["skipped"] for g in gathered) for i in range(nsteps)]

        norm = math.sqrt(sum(float(p.detach().double().pow(2).sum()) for p in self.params))
        lr = float(self.optimizer.param_groups[0].get("lr", math.nan))
        ratio = {"fp16": 2.0, "bf16": 2.0, "none": 1.0}.get(self.compress, math.nan)
        cap_mb = float(self.model.bucket_bytes_cap) / (1 << 20)
        # DDP's first-bucket cap: 1 MiB only when bucket_cap_mb was left at its default,
        # else the bucket cap itself (torch.nn.parallel.distributed._BucketCapacityConfig).
        cfg = getattr(self.model, "_bucket_config", None)
        first_bytes = cfg.first_bucket_bytes_cap if cfg is not None else min(
            self.model.bucket_bytes_cap, getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", 1 << 20))
        first_mb = float(first_bytes) / (1 << 20)
        device = self.params[0].device.type if self.params else "cpu"
        chunk = h5out.backend_chunk(self.backend, nnodes)
        attrs = {
            "source": "pytorch", "torch_version": torch.__version__, "backend": self.backend,
            "model": self.model_name, "compute": "real", "compute_profile": "cpu" if device == "cpu" else "h200",
            "device": device, "nranks": self.world, "nnodes": nnodes, "ranks_per_node": rpn,
            "topology": f"{nnodes}x{rpn}", "batch_per_rank": int(self.batch_per_rank or 0),
            "bucket_mb": cap_mb, "bucket_cap_mb": cap_mb, "first_bucket_mb": first_mb,
            "overlap": int(self.overlap), "serial_buckets": int(self.serial), "recorder_hook": self.recorder_hook, "accumulate": accumulate, "algo": BACKEND_ALGO.get(self.backend, "ring"),
            "chunk_bytes": 0, "chunk_bytes_used": chunk[0], "chunk_reason": chunk[1],  # the backend's own pipelining
            "channels": 1, "hook": self.hook_name, "hook_params": json.dumps(self.hook_params),
            "compress": self.compress, "compress_effective": self.compress, "precision": "fp32",
            "amp": self.amp, "loss_scale_mode": "none", "loss_scale_spec": "",
            "loader_workers": int(self.loader_workers), "prefetch": 0, "data_time_s": 0.0,
            "optimizer": type(self.optimizer).__name__.lower(), "lr": lr, "seed": int(self.seed),
            "steps": nsteps, "epochs": 0, "samples_per_epoch": 0, "steps_per_epoch": 0,
            "warmup_steps": min(self.warmup_steps, max(0, nsteps - 1)), "num_buckets": len(bucket_bytes),
            "bucket_bytes": bucket_bytes, "final_param_norm": norm, "final_eval_accuracy": math.nan,
            "skipped_steps": sum(table["skipped"]), "compression_ratio": ratio, "compute_threads": int(torch.get_num_threads()),
            "comm_sched": _same_or_per_rank([g["comm_sched"] for g in gathered]),
            "emulation_overruns": 0, "emulation_overrun_s": 0.0,
        }
        attrs.update(self.extra)
        with atomic_h5(self.out) as f:
            h5out.write_provenance(f, "gradsync-train", hosts, self.argv,
                                   params={"GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "")},
                                   cpus=[g["cpus"] for g in gathered], machines=[g["machine"] for g in gathered])
            for k, v in attrs.items():
                h5out.set_attr(f, k, v)
            h5out.write_dataset(f, "steps/step", list(range(nsteps)), "int")
            for k in ["loss", "step_time_s", "data_s", "forward_s", "backward_s", "backward_sync_s", "comm_exposed_s",
                      "optimizer_s", "bytes_sent", "comm_total_s", "encode_s", "decode_s", "reducer_s", "cpu_s",
                      "loss_scale"]:
                h5out.write_dataset(f, "steps/" + k, table[k], "float")
            h5out.write_dataset(f, "steps/skipped", table["skipped"], "int")
            # Per rank, [steps, nranks]: the stragglers, and what a synchronous step waits for
            # (gradsync-model compare replays each step from these; netmodel/compare.cpp).
            for k in ["step_time_s", "data_s", "forward_s", "backward_s", "backward_sync_s", "comm_exposed_s",
                      "optimizer_s", "reducer_s", "encode_s", "decode_s", "cpu_s"]:
                h5out.write_dataset(f, "ranks/" + k, [[g["rows"][i][k] for g in gathered] for i in range(nsteps)],
                                    "float")
            brows = [(i, b) for i, r in enumerate(rows0) for b in r["buckets"]]
            h5out.write_dataset(f, "buckets/step", [i for i, _ in brows], "int")
            h5out.write_dataset(f, "buckets/bucket", [b[0] for _, b in brows], "int")
            h5out.write_dataset(f, "buckets/bytes", [b[1] for _, b in brows], "int")
            h5out.write_dataset(f, "buckets/ready_s", [b[2] for _, b in brows], "float")
            h5out.write_dataset(f, "buckets/start_s", [b[3] for _, b in brows], "float")
            h5out.write_dataset(f, "buckets/end_s", [b[4] for _, b in brows], "float")
            h5out.write_dataset(f, "buckets/codec_s", [b[5] for _, b in brows], "float")
            shapes = [list(p.shape) for p in self.params]
            h5out.write_dataset(f, "model/tensor_names", self.names, "str")
            h5out.write_dataset(f, "model/tensor_numel", [p.numel() for p in self.params], "int")
            h5out.write_dataset(f, "model/tensor_ndim", [len(s) for s in shapes], "int")
            h5out.write_dataset(f, "model/tensor_shape", [d for s in shapes for d in s], "int")
            h5out.write_dataset(f, "model/tensor_bucket", [self.membership.get(i, -1) for i in range(len(self.params))],
                                "int")
            # Rank 0's median over the steps after warmup of each gradient's ready time, from
            # the step's start (as /buckets/ready_s).
            if self.tensor_ready:
                h5out.write_dataset(f, "model/tensor_ready_s", _tensor_ready(rows0[attrs["warmup_steps"]:],
                                                                             len(self.params)), "float")


def _same_or_per_rank(values):
    """One value when every rank has it, else "rank 0: A; rank 1: B; ..." (e.g. gloo's threads'
    policy, comm_sched: a script that put only some ranks' threads under SCHED_RR)."""
    return values[0] if len(set(values)) == 1 else "; ".join(f"rank {i}: {v}" for i, v in enumerate(values))


def _accumulate(rows, warmup):
    """Micro-steps per optimizer step (forwards under no_sync() before the synchronized one, plus
    one): the most common count after warmup; a run whose steps differ says so on stderr (the
    model replays every step with that count)."""
    counts = collections.Counter(max(1, r["micro"]) for r in rows[warmup:] or rows)
    acc = counts.most_common(1)[0][0]
    if len(counts) > 1:
        print(f"gradsync_torch.record: steps ran {sorted(counts)} micro-steps; the file says accumulate = {acc}",
              file=sys.stderr)
    return acc


def _tensor_ready(rows, n):
    out = []
    for i in range(n):
        v = [r["tready"][i] for r in rows if not math.isnan(r["tready"][i])]
        out.append(statistics.median(v) if v else math.nan)
    return out


def record(model, optimizer, out, **kwargs):
    """Wraps a DDP model and its optimizer; see Recorder for the keyword arguments
    (hook, state, overlap, model_name, batch_per_rank, amp, warmup_steps, trace, ...)."""
    return Recorder(model, optimizer, out, **kwargs)
