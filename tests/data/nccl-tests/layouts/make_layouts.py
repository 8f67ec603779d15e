#!/usr/bin/env python3
"""Writes the constructed nccl-tests layout fixtures of this folder (not measurements).

Every time is t(us) = 20 + bytes / 10 GB/s (1e4 bytes per us), so the reader's tests can
check parsed numbers exactly. Run from this folder: python3 make_layouts.py
"""
import json

SIZES = [0, 0, 8, 64, 512, 4096, 32768, 262144, 2097152, 16777216]


def t_us(b):
    return 20.0 + b / 1e4


def devices(nodes, g, old=False):
    out = ["#", "# Using devices"]
    r = 0
    for n in range(nodes):
        for d in range(g):
            if old:
                out.append(f"#   Rank {r:2d} Pid {1000 + r:6d} on      host{n} device {d:2d} [0x{d:02x}] Tesla V100-SXM2-16GB")
            else:
                out.append(f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on      host{n} device {d:2d} [0000:{d:02x}:00] NVIDIA H100 80GB HBM3")
            r += 1
    out.append("#")
    return out


def row(b, count, typ="float", redop="sum", root=-1, wrong="0", with_root=True, with_redop=True):
    t = t_us(b)
    algbw = b / t / 1e3
    cols = [f"{b:12d}", f"{count:12d}", f"{typ:>8s}"]
    if with_redop:
        cols.append(f"{redop:>6s}")
    if with_root:
        cols.append(f"{root:6d}")
    for _ in range(2):
        cols += [f"{t:7.2f}", f"{algbw:6.2f}", f"{algbw:6.2f}", f"{wrong:>6s}"]
    return "  ".join(cols)


NEW_HDR = [
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
]
FOOTER = ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 1.0 ", "#"]


def write(name, lines):
    with open(name, "w") as f:
        f.write("\n".join(lines) + "\n")


# 1. Old layout (NCCL 2.8 era nccl-tests): no root column, `error` column, 2 hosts x 2.
old = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 16777216 step: 2(factor) warmup iters: 5 iters: 20 validation: 1 "]
old += devices(2, 2, old=True)
old += ["#                                                     out-of-place                       in-place",
        "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error",
        "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]
old += [row(b, b // 4, wrong="0e+00", with_root=False) for b in SIZES[2:]]
old += FOOTER
write("all_reduce_perf_old_layout.log", old)

# 2. srun -l prefixes (`0: `), all_gather_perf (program line), 2 hosts x 4, redop none.
ag = ["# nccl-tests version 2.13.9 nccl-headers=21903 nccl-library=21903",
      "# Collective test starting: all_gather_perf",
      "# nThread 1 nGpus 1 minBytes 8 maxBytes 16777216 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0"]
ag += devices(2, 4)
ag += NEW_HDR
ag += ["host0:1000:1000 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB ib0:10.0.0.1<0>"]
ag += [row(b, b // 4 // 8, redop="none") for b in SIZES[2:]]
ag += FOOTER
write("srun_prefix.log", ["0: " + l for l in ag])

# 3. Repeated header blocks (two runs), duplicate size rows, no footer; reduce_scatter.
rs = ["# Collective test starting: reduce_scatter_perf"]
for rep in range(2):
    rs += ["# nThread 1 nGpus 1 minBytes 8 maxBytes 16777216 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0"]
    rs += devices(1, 8)
    rs += NEW_HDR
    rs += [row(b, b // 4 // 8) for b in SIZES]
rs += ["host0:1000:1000 [0] NCCL WARN Cuda failure 'unspecified launch failure'"]
write("repeated_headers.log", rs)

# 4. Broadcast layout with root and no redop; neither program nor file name says the op.
bc = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 16777216 step: 2(factor) warmup iters: 5 iters: 20 validation: 1 "]
bc += devices(2, 1)
bc += ["#                                                     out-of-place                       in-place",
       "#       size         count    type    root     time   algbw   busbw  error     time   algbw   busbw  error",
       "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]
bc += [row(b, b // 4, root=0, wrong="N/A", with_redop=False) for b in SIZES[2:]]
bc += FOOTER
write("table_root_column.log", bc)

# 5. alltoall_perf and sendrecv_perf (op from the file name), and the same table without a
#    name (columns cannot tell alltoall from sendrecv: the reader must ask for --op).
a2a = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 16777216 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0"]
a2a += devices(2, 1) + NEW_HDR + [row(b, b // 4, redop="none") for b in SIZES[2:]] + FOOTER
write("alltoall_perf.log", a2a)
write("sendrecv_perf.log", a2a)
write("unnamed_table.log", a2a)

# 6. A truncated row (the reader must name the line).
bad = a2a[:]
bad.insert(len(bad) - 4, "     1048576        262144     float    none      -1    124.86")
write("all_reduce_perf_truncated.log", bad)

# 7b. nccl-tests -T (timestamps): one header label, two tokens per row (date and time).
ts = ["# Collective test starting: all_reduce_perf"] + devices(2, 1)
ts += ["#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong           timestamp"]
ts += [row(b, b // 4) + "  2026-12-01 10:00:%02d" % i for i, b in enumerate(SIZES[2:])] + FOOTER
write("timestamps.log", ts)

# 7. nccl-tests -J JSON (format version 2, src/util.cu): 2 hosts x 2, all_reduce_perf.
doc = {"version": 2, "start_time": "2026-12-01 10:00:00",
       "args": ["/opt/nccl-tests/build/all_reduce_perf", "-b", "8", "-e", "16M", "-f", "2", "-J", "out.json"],
       "env": ["NCCL_DEBUG=WARN"], "nccl_version": 22809,
       "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": 8, "maximum_bytes": 16777216, "step_factor": 2,
                  "warmup_iters": 5, "iterations": 20, "aggregated_iterations": 1, "validation": 1, "graph": 0,
                  "blocking_collectives": "false", "per_iter_timing": "false", "parallel_init": "false",
                  "devices": [{"rank": r, "group": 0, "pid": 1000 + r, "hostname": f"host{r // 2}", "device": r % 2,
                               "device_hex": f"0000:{r % 2:02x}:00", "device_info": "NVIDIA H100 80GB HBM3"}
                              for r in range(4)]},
       "results": [], "out_of_bounds": {"count": 0, "okay": "true"},
       "average_bus_bandwidth": {"bandwidth": 1.0, "okay": "unchecked"}, "errors": [],
       "end_time": "2026-12-01 10:00:05"}
for b in SIZES[1:]:
    t = t_us(b)
    ph = {"time": t, "alg_bw": b / t / 1e3, "bus_bw": b / t / 1e3 * 1.5, "nwrong": 0.0}
    doc["results"].append({"size": b, "count": b // 4, "type": "float", "redop": "sum", "root": "    -1",
                           "out_of_place": ph, "in_place": dict(ph), "actual_iterations": 20,
                           "experiment_name": ""})
with open("all_reduce_perf.json", "w") as f:
    json.dump(doc, f)
