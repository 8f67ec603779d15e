"""Registering a DDP communication hook so that it runs on every backend.

PyTorch's PowerSGD hooks (powerSGD_hook, batched_powerSGD_hook) launch their second and
third all-reduces from the first one's future callbacks. On gloo two buckets whose chains
are in flight at once then issue those all-reduces in a different order on each rank: gloo
aborts with "Received data size doesn't match expected size" or the ranks hang (torch 2.15,
the example with --bucket-mb 1 --hook powersgd:rank=4 --no-record, 2026-12-05: one abort and
one hang in two runs). Serialised, a bucket's hook call first waits for the previous
bucket's future (on the autograd thread), so one chain is in flight at a time, as the
recorder runs them (serial_buckets).
"""
from __future__ import annotations

import functools

POWERSGD_HOOKS = ("powerSGD_hook", "batched_powerSGD_hook")


def needs_serial(hook, backend) -> bool:
    """True for a PowerSGD hook on gloo (its buckets must run one at a time)."""
    return getattr(hook, "__name__", "") in POWERSGD_HOOKS and str(backend) == "gloo"


def serialized(hook):
    """hook, each bucket's call waiting first for the previous bucket's future (bucket 0
    starts a step: DDP waited for the previous step's buckets before it ended)."""
    prev = [None]

    @functools.wraps(hook)
    def run(state, bucket):
        if prev[0] is not None and bucket.index() > 0:
            prev[0].wait()
        prev[0] = hook(state, bucket)
        return prev[0]

    return run


def register(model, state, hook):
    """model.register_comm_hook(state, hook), serialised where the backend needs it."""
    import torch.distributed as dist
    backend = dist.get_backend(getattr(state, "process_group", None))  # None: the default group
    model.register_comm_hook(state, serialized(hook) if needs_serial(hook, backend) else hook)
