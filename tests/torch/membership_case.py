"""Run under torchrun (2 ranks, gloo): a DDP model recorded by gradsync_torch, then rank 0
writes DDP's own bucket assignment as JSON next to the result, for test_torch.py to compare
(a plain twin model on the same process group steps between the recorded steps):
  reducer     _get_ddp_logging_data()["rebuilt_per_bucket_param_indices"] (the reducer's record)
  computed    dist._compute_bucket_assignment_by_size over the parameters in gradient-ready
              order with DDP's limits [first_bucket_bytes_cap, bucket_bytes_cap]
  membership_case.py OUT.h5 OUT.json HOOK(none|fp16|powersgd) OVERLAP(1|0) BUCKET_MB
"""
import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

import gradsync_torch

out, out_json, hook_name, overlap, cap_mb = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", float(sys.argv[5])
dist.init_process_group("gloo")
torch.manual_seed(0)
# Odd sizes and a parameter-free layer, registration order != size order.
net = torch.nn.Sequential(torch.nn.Linear(37, 129), torch.nn.ReLU(), torch.nn.Linear(129, 61),
                          torch.nn.Linear(61, 203), torch.nn.Linear(203, 7))
model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=cap_mb)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
hook, state = None, None
if hook_name == "fp16":
    hook = default_hooks.fp16_compress_hook
elif hook_name == "powersgd":
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=2)
    hook = powerSGD_hook.powerSGD_hook
# A plain twin on the same process group, stepped between the recorded model's steps (as
# gradsync_torch.overhead does): its buckets have the same sizes and must not enter the file.
twin = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(*[type(m)(m.in_features, m.out_features) if isinstance(m, torch.nn.Linear) else m
                          for m in net]), bucket_cap_mb=cap_mb)
opt_twin = torch.optim.SGD(twin.parameters(), lr=0.01)
rec = gradsync_torch.record(model, opt, out, hook=hook, state=state, overlap=overlap, warmup_steps=1)
for step in range(4):
    for m, o in ((model, opt), (twin, opt_twin)):
        x = torch.randn(8, 37)
        loss = m(x).pow(2).mean()
        loss.backward()
        o.step()
        o.zero_grad()
rec.close()
# DDP takes one communication hook: registering one now succeeds only if the recorder
# registered none (the process-group observer), and fails after its C++ or Python hook.
try:
    model.register_comm_hook(None, default_hooks.allreduce_hook)
    comm_hook = "no comm hook"
except RuntimeError:
    comm_hook = "a comm hook registered"
if dist.get_rank() == 0:
    print(f"membership_case: {comm_hook}", flush=True)
    ld = model._get_ddp_logging_data()
    reducer = [[int(i) for i in b.split()] for b in ld["rebuilt_per_bucket_param_indices"].split(",")]
    order = [int(i) for i in ld["prev_iteration_grad_ready_order_indices"].split(",")]
    params = list(net.parameters())
    cfg = model._bucket_config
    limits = [cfg.first_bucket_bytes_cap, cfg.bucket_bytes_cap]
    computed, _ = dist._compute_bucket_assignment_by_size([params[i] for i in order], limits,
                                                          [False] * len(order))
    computed = [[order[j] for j in b] for b in computed]
    sizes = [int(s) for s in ld["rebuilt_bucket_sizes"].split(",")]
    with open(out_json, "w") as f:
        json.dump({"reducer": reducer, "computed": computed, "bucket_sizes": sizes}, f)
dist.destroy_process_group()
# torch 2.15 + gloo may abort a worker in the interpreter's teardown (launch.exit_now).
from gradsync_torch.launch import exit_now  # noqa: E402

exit_now(0)
