#!/usr/bin/env python3
"""Compare gradsync's PowerSGD and fp16/bf16 compressors with PyTorch's DDP hooks.

    compare_torch.py REF.h5 [--json OUT.json] [--rtol 1e-4] [--device cpu|cuda|all]

REF.h5 is written by gradsync-compress-ref (runtime/tools/compress_ref.cpp): one bucket of
gradient tensors for S steps, and our outputs at world size 1. This script rebuilds the
same bucket in PyTorch, runs, with torch.distributed at world size 1 (gloo on the CPU;
NCCL on the GPU too with --device all/cuda when CUDA is available):

  * torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.powerSGD_hook with
    PowerSGDState(rank R, start_powerSGD_iter=2, min_compression_rate from the file,
    use_error_feedback=True, warm_start=True, orthogonalization_epsilon=0). The hook runs
    its two vanilla all-reduce iterations first (that is how its counter reaches the
    compression phase: state.iter counts calls on the last bucket), then our initial Q is
    put into state.q_memory_dict for the bucket (with a P buffer in p_memory_dict, so the
    hook takes the warm-start branch and does not draw its own Q), and S compressed steps
    run on the file's gradients. Compared per step: the bucket after the hook (the
    averaged approximation), the error-feedback memory (state.error_dict) and Q (up to the
    sign of each column: for rank > 2 PyTorch orthogonalises with a Householder QR, whose
    columns may differ in sign from Gram-Schmidt's; P Q^T does not depend on those signs).
  * default_hooks.fp16_compress_hook and bf16_compress_hook: must be bit-identical.

Equivalence notes. PyTorch orthogonalises Q before P = M Q; gradsync does not. Both
orthogonalise P = M Q before Q = M^T P, and orthogonalising Q first changes P = M Q only
by an upper-triangular factor on the right, which leaves the Gram-Schmidt basis of P
unchanged: the results agree up to rounding. Compressed tensors have distinct shapes in
the generated bucket, so PyTorch's grouping of same-shaped tensors does not reorder its
Q memory against ours (the script lays Q out the way the hook does, by shape groups).

Tolerance: per tensor, max |ours - torch| / max |torch| <= --rtol (fp32 rounding).
Exit status: 0 all agree, 1 a difference or an error, 77 skipped (no torch, h5py or
numpy here). Prints one line per comparison, "compare <name> <PASS|FAIL> <figure>".
"""

import argparse
import collections
import inspect
import json
import os
import shutil
import sys
import tempfile
import time

SKIP = 77


def skip(msg):
    print(f"SKIP: {msg}")
    sys.exit(SKIP)


try:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
except Exception as e:  # ImportError, or a broken install
    skip(f"torch / torch.distributed not importable by {sys.executable} ({type(e).__name__}: {e})")

try:
    import h5py
    import numpy as np
except ImportError as e:
    skip(f"h5py/numpy not importable by {sys.executable} ({e})")


class Bucket:
    """Duck-typed dist.GradBucket: one flat buffer, per-parameter views into it."""

    def __init__(self, index, buffer, shapes, offsets):
        self._index, self._buf, self._shapes, self._offsets = index, buffer, shapes, offsets

    def index(self):
        return self._index

    def buffer(self):
        return self._buf

    get_tensor = buffer  # PyTorch < 1.10

    def gradients(self):
        out = []
        for shape, off in zip(self._shapes, self._offsets):
            n = int(np.prod(shape))
            out.append(self._buf[off : off + n].view(*shape))
        return out

    get_per_parameter_tensors = gradients  # PyTorch < 1.10

    def parameters(self):
        return [torch.zeros(s, dtype=self._buf.dtype, device=self._buf.device) for s in self._shapes]

    def is_last(self):
        return True

    is_the_last_bucket_to_allreduce = is_last  # PyTorch < 1.10

    def set_buffer(self, t):
        self._buf.copy_(t)


def wait(fut):
    v = fut.wait()
    if isinstance(v, (list, tuple)):
        v = v[0]
    return v


def rel_diff_by_tensor(ours, ref, spans):
    """Worst relative difference over tensors (and steps): per tensor, max |diff| divided by
    max |ref| of that tensor, so one large tensor cannot hide errors in a small one. A
    tensor whose reference is all zero contributes its absolute difference."""
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if ours.shape != ref.shape:
        return float("inf")
    worst = 0.0
    for off, n in spans:
        a, b = ours[..., off : off + n], ref[..., off : off + n]
        both_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
        d = np.where(both_inf, 0.0, np.abs(a - b))
        d = float(np.max(d)) if d.size else 0.0
        scale = float(np.max(np.where(np.isfinite(b), np.abs(b), 0.0))) if b.size else 0.0
        worst = max(worst, d / scale if scale > 0 else d)
    return worst


def align_q_signs(q_ours, q_ref, layout):
    """Flip columns of q_ours (per matrix, m x r row-major) to the sign of q_ref's."""
    q = np.array(q_ours, dtype=np.float64, copy=True)
    for off, m, r in layout:
        a = q[off : off + m * r].reshape(m, r)
        b = np.asarray(q_ref[off : off + m * r], dtype=np.float64).reshape(m, r)
        for j in range(r):
            if np.dot(a[:, j], b[:, j]) < 0:
                a[:, j] *= -1
    return q


class Ref:
    def __init__(self, path):
        self.f = h5py.File(path, "r")
        inp = self.f["input"]
        self.names = [n.decode() if isinstance(n, bytes) else str(n) for n in inp["names"][()]]
        ndim = inp["ndim"][()]
        dims = inp["dims"][()]
        self.offsets = [int(o) for o in inp["offsets"][()]]
        self.shapes, k = [], 0
        for d in ndim:
            self.shapes.append(tuple(int(x) for x in dims[k : k + d]))
            k += int(d)
        self.grads = np.asarray(inp["grads"][()], dtype=np.float32)
        self.steps, self.n = self.grads.shape
        self.min_rate = float(self.f.attrs.get("min_rate", 2.0))


def torch_powersgd(ref, R, q0, compressed_ours, device, group):
    """Run PyTorch's powerSGD_hook on the file's gradients with our initial Q."""
    kwargs = dict(
        process_group=group,
        matrix_approximation_rank=R,
        start_powerSGD_iter=2,
        min_compression_rate=ref.min_rate,
        use_error_feedback=True,
        warm_start=True,
    )
    params = inspect.signature(psgd.PowerSGDState.__init__).parameters
    if "orthogonalization_epsilon" in params:
        kwargs["orthogonalization_epsilon"] = 0
    state = psgd.PowerSGDState(**kwargs)

    # Which tensors the hook compresses, and its P/Q layout (grouped by shape, in order of
    # first appearance, as the hook's shape_to_tensors; a plain order on older versions
    # coincides because our compressed shapes are distinct).
    compress, groups = [], collections.OrderedDict()
    for i, shape in enumerate(ref.shapes):
        n = shape[0]
        m = int(np.prod(shape)) // n
        r = min(n, m, R)
        ok = (n + m) * r * ref.min_rate < n * m
        compress.append(ok)
        if ok:
            groups.setdefault((n, m), []).append((i, r))
    mismatch = [ref.names[i] for i in range(len(compress)) if bool(compress[i]) != bool(compressed_ours[i])]
    layout, p_total, q_total = {}, 0, 0  # tensor index -> (q offset, m, r)
    for (n, m), items in groups.items():
        for i, r in items:
            layout[i] = (q_total, m, r)
            p_total += n * r
            q_total += m * r
    # Our q0 is laid out in bucket order; the hook's in group order.
    order = sorted(layout)
    q_hook = np.zeros(q_total, dtype=np.float32)
    pos = 0
    for i in order:
        off, m, r = layout[i]
        q_hook[off : off + m * r] = q0[pos : pos + m * r]
        pos += m * r
    if pos != len(q0):
        raise RuntimeError(f"our q0 has {len(q0)} values, the hook's layout needs {pos}")

    # Two vanilla iterations: the hook's counter reaches start_powerSGD_iter.
    for _ in range(2):
        b = Bucket(0, torch.zeros(ref.n, dtype=torch.float32, device=device), ref.shapes, ref.offsets)
        wait(psgd.powerSGD_hook(state, b))
    if state.iter < state.start_powerSGD_iter:
        raise RuntimeError(f"hook counter at {state.iter} after 2 calls, start is {state.start_powerSGD_iter}")
    state.p_memory_dict[0] = torch.empty(p_total, dtype=torch.float32, device=device)
    state.q_memory_dict[0] = torch.from_numpy(q_hook).to(device)

    outs, mems, qs = [], [], []
    for s in range(ref.steps):
        buf = torch.from_numpy(ref.grads[s].copy()).to(device)
        b = Bucket(0, buf, ref.shapes, ref.offsets)
        out = wait(psgd.powerSGD_hook(state, b))
        outs.append(out.detach().cpu().numpy().copy())
        mems.append(state.error_dict[0].detach().cpu().numpy().copy())
        qh = state.q_memory_dict[0].detach().cpu().numpy()
        q_bucket = np.concatenate([qh[layout[i][0] : layout[i][0] + layout[i][1] * layout[i][2]] for i in order]) \
            if order else np.zeros(0, dtype=np.float32)
        qs.append(q_bucket)
    q_layout, pos = [], 0
    for i in order:
        _, m, r = layout[i]
        q_layout.append((pos, m, r))
        pos += m * r
    return np.array(outs), np.array(mems), np.array(qs), mismatch, q_layout


def torch_cast(ref, hook, device, group):
    outs = []
    for s in range(ref.steps):
        buf = torch.from_numpy(ref.grads[s].copy()).to(device)
        b = Bucket(0, buf, ref.shapes, ref.offsets)
        out = wait(hook(group, b))
        outs.append(out.detach().float().cpu().numpy().copy())
    return np.array(outs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ref")
    ap.add_argument("--json")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    a = ap.parse_args()

    ref = Ref(a.ref)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 matmuls stay fp32 on the GPU
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(min(8, os.cpu_count() or 1))

    devices = []
    if a.device in ("cpu", "all"):
        devices.append(("cpu", "gloo"))
    if a.device in ("cuda", "all"):
        if torch.cuda.is_available() and dist.is_nccl_available():
            devices.append(("cuda", "nccl"))
        elif a.device == "cuda":
            skip("CUDA or NCCL not available to torch")
    results = []
    failed = False
    summary = {"torch": torch.__version__, "ref": os.path.abspath(a.ref), "rtol": a.rtol, "results": results}

    def record(name, ok, figure, detail=""):
        nonlocal failed
        failed = failed or not ok
        results.append({"name": name, "ok": ok, "figure": figure, "detail": detail})
        print(f"compare {name} {'PASS' if ok else 'FAIL'} {figure}{'  ' + detail if detail else ''}", flush=True)

    for device, backend in devices:
        tmp = tempfile.mkdtemp(prefix="gs-torch-pg.")
        t0 = time.time()
        if device == "cuda":
            torch.cuda.set_device(0)
        dist.init_process_group(backend, init_method=f"file://{tmp}/init", rank=0, world_size=1)
        try:
            group = dist.group.WORLD
            tag = f"{device}/{backend}"
            for key in sorted(ref.f["powersgd"].keys(), key=lambda k: int(k[4:])):
                g = ref.f["powersgd"][key]
                R = int(g.attrs["rank"])
                name = f"powersgd.rank{R}[{tag}]"
                try:
                    outs, mems, qs, mismatch, q_layout = torch_powersgd(
                        ref, R, np.asarray(g["q0"][()], dtype=np.float32), g["compressed"][()], device, group)
                except Exception as e:
                    record(name, False, "error", f"{type(e).__name__}: {e}")
                    continue
                if mismatch:
                    record(name, False, "plan", f"compressed by one side only: {', '.join(mismatch)}")
                    continue
                spans = [(off, int(np.prod(shape))) for off, shape in zip(ref.offsets, ref.shapes)]
                r_out = rel_diff_by_tensor(g["out"][()], outs, spans)
                r_mem = rel_diff_by_tensor(g["memory"][()], mems, spans)
                q_ours = np.stack([align_q_signs(g["q"][s], qs[s], q_layout) for s in range(ref.steps)])
                r_q = rel_diff_by_tensor(q_ours, qs, [(off, m * r) for off, m, r in q_layout])
                worst = max(r_out, r_mem, r_q)
                record(name, worst <= a.rtol, f"{worst:.2e}",
                       f"out {r_out:.2e}, memory {r_mem:.2e}, Q(sign-aligned) {r_q:.2e}; {ref.steps} steps")
            for hook_name, grp in (("fp16_compress_hook", "fp16"), ("bf16_compress_hook", "bf16")):
                name = f"{grp}[{tag}]"
                hook = getattr(default_hooks, hook_name, None)
                if hook is None:
                    print(f"compare {name} SKIP default_hooks.{hook_name} not in torch {torch.__version__}")
                    results.append({"name": name, "ok": None, "figure": "skip", "detail": "hook missing"})
                    continue
                try:
                    theirs = torch_cast(ref, hook, device, group)
                except Exception as e:  # e.g. a backend without all-reduce of that dtype
                    msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    print(f"compare {name} SKIP torch could not run the hook here ({msg})")
                    results.append({"name": name, "ok": None, "figure": "skip", "detail": msg})
                    continue
                ours = np.asarray(ref.f[grp]["out"][()], dtype=np.float32)
                same = ours.shape == theirs.shape and np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))
                nbad = int(np.sum(ours.view(np.uint32) != theirs.view(np.uint32))) if ours.shape == theirs.shape else -1
                record(name, same, "bit-identical" if same else f"{nbad} differ",
                       f"{ours.size} values incl. rounding edge cases")
        finally:
            dist.destroy_process_group()
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"# {device}/{backend}: {time.time() - t0:.1f} s", flush=True)

    # Every comparison must have passed on at least one backend (a hook torch cannot run
    # on gloo, e.g. bf16, may still run on NCCL).
    bases = collections.OrderedDict()
    for r in results:
        bases.setdefault(r["name"].split("[")[0], []).append(r["ok"])
    for base, oks in bases.items():
        if True not in oks and False not in oks:
            record(base, False, "not compared", "no backend could run it")
    summary["failed"] = failed
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=2)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
