"""Conclusion writer of seed-ifname (experiments/seed-ifname.toml): the interface choice.

Cases: a bench grid's points with the same NIC choice (grid, `net`, `algo`). For each it
gives the bus bandwidth at the two largest sizes (median over repeats), where the bytes went
(/net of the result files: bytes sent per interface, summed over ranks), and the ratio to
the case pinned to the fast NIC (eth0, same algorithm). Failed points (the default case
hangs on docker0) are reported with their stderr.

The model: one fabric per interface, calibrated from the pinned runs (model/eth0.toml,
model/eth1.toml from the ring sweeps; model/eth0-mpi.toml, model/eth1-mpi.toml from the
MPI_Allreduce sweeps, used for the mpi cases when they exist). A pinned case is predicted on its NIC's fabric. A case left to Open MPI is
predicted from its measured split of bytes: with fraction f_k of the bytes on NIC k, the
collective of S bytes takes max over k of t_k(f_k * S) (the NICs work in parallel and the
slowest share bounds it); a NIC with under 1% of the bytes (launch traffic) is left out.
Then `gradsync-model tune --fabric eth1,eth0` names the interface to pin."""
from __future__ import annotations

import math
import os
import re

import numpy as np

from . import plots, tools
from .conclusions import table, writer

NICS = {"1": "eth0", "2": "eth1"}   # testbed.sh run --net K -> the NIC it pins
LARGE = 2                           # sizes reported: the largest LARGE of the sweep


def _case_name(grid, net):
    if grid == "pinned" or net in NICS:
        return f"pinned {NICS.get(net, net)}"
    return "default" if grid == "default" else grid


def _cases(ctx):
    """[(case, algo, [rows])] in plan order over every status (failed points included)."""
    out = {}
    for i in ctx.rows(status=None):
        if ctx.t.cols["program"][i] != "bench":
            continue
        p = ctx.t.params[i]
        key = (_case_name(ctx.t.cols["grid"][i], str(p.get("net", "1"))), str(p.get("algo", "auto")))
        out.setdefault(key, []).append(i)
    return [(c, a, idx) for (c, a), idx in out.items()]


def _split(bench):
    """{interface: bytes sent} without loopback, and the total."""
    b = {k: v for k, v in bench.interface_bytes().items() if k != "lo"}
    return b, sum(b.values())


def _split_text(split, total):
    if not total:
        return "no /net"
    used = [(k, v) for k, v in sorted(split.items()) if v > 0]
    return ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in used) + f" of {total / 1e6:.0f} MB"


def _model_time_us(ctx, fabric, algo, sizes, chunk, cache):
    """Model time (us) of a 2-host all-reduce of each size on `fabric` (None when it fails)."""
    sizes = [max(1, int(s)) for s in sizes]
    key = (fabric, algo, tuple(sizes), chunk)
    if key in cache:
        return cache[key]
    args = ["collective", "--op", "allreduce", "--algo", algo, "--ranks", 2, "--nodes", 2,
            "--bytes", ",".join(str(s) for s in sizes), "--fabric", fabric, "--json"]
    if algo == "ring" and chunk:
        args += ["--chunk-bytes", chunk]
    try:
        _, data = tools.run_model(ctx.bindir, args, os.path.join(ctx.dir, "model", "analyze.log"), want_json=True)
        rows = data.get("results", [data]) if isinstance(data, dict) else data
        out = np.array([float(r["time_us"]) for r in rows])
    except (tools.ToolError, KeyError, TypeError) as e:
        ctx.notes.append(f"ifname: model of {algo} on {os.path.basename(fabric)}: {e}")
        out = None
    cache[key] = out
    return out


def _predict_busbw(ctx, bench, split, total, cache):
    """Predicted busbw (GB/s) at the bench's sizes from the per-NIC fabrics and the split, and
    the fabrics used ({} when a fabric is missing)."""
    algo = bench.attrs.get("algo", "ring")
    fabrics = {n: ctx.calibrated.get(f"{n}-{algo}") or ctx.calibrated.get(n) for n in ("eth0", "eth1")}
    shares = {n: split.get(n, 0) / total for n in fabrics if total and split.get(n, 0) / total >= 0.01}
    if not shares or any(not fabrics[n] for n in shares):
        return None, shares
    a = bench.attrs
    chunk = int(a.get("chunk_bytes_used", 0)) or int(a.get("chunk_bytes", 0))
    sizes = bench.size.astype(float)
    t = np.zeros(len(sizes))
    for n, f in shares.items():
        tn = _model_time_us(ctx, fabrics[n], algo, sizes * f, chunk, cache)
        if tn is None:
            return None, shares
        t = np.maximum(t, tn)
    bf = float(a.get("bus_factor", 1.0))
    return sizes / (t * 1e3) * bf, shares


def _failure_text(ctx, i):
    """Status and Open MPI's own words: the connect() to an address, else its warning's sentence."""
    tail = str(ctx.t.cols.get("stderr_tail", [""] * (i + 1))[i])
    flat = " ".join(ln.strip() for ln in tail.splitlines() if ln.strip())
    m = re.search(r"Message:\s*(connect\(\) to \S+ failed)", flat) or re.search(r"WARNING: ([^.]*\.)", flat)
    return f"{ctx.t.cols['status'][i]} (exit {ctx.t.cols['exit_status'][i]})" + (f": {m.group(1)}" if m else "")


def _tune_line(ctx):
    """gradsync-model tune offered the two interfaces' fabrics names the one to pin."""
    f0, f1 = ctx.calibrated.get("eth0"), ctx.calibrated.get("eth1")
    if not (f0 and f1):
        return None
    args = ["tune", "--model", "resnet18-cifar", "--fabric", f"{f1},{f0}", "--nodes", 2, "--ranks-per-node", 1,
            "--bucket-mb", 25, "--first-bucket-mb", 1, "--algo", "ring", "--channels", 1, "--compress", "none",
            "--precision", "fp32", "--overlap", 1, "--json"]
    try:
        _, d = tools.run_model(ctx.bindir, args, os.path.join(ctx.dir, "model", "analyze.log"), want_json=True)
    except tools.ToolError as e:
        ctx.notes.append(f"ifname: tune: {e}")
        return None
    rec, dflt = d.get("recommended", {}), d.get("default", {})
    name = os.path.basename(str(rec.get("fabric", "?"))).replace(".toml", "")
    other = os.path.basename(str(dflt.get("fabric", "?"))).replace(".toml", "")
    return (f"`gradsync-model tune --model resnet18-cifar --fabric model/eth1.toml,model/eth0.toml --nodes 2 "
            f"--ranks-per-node 1` (every other knob fixed: 25 MiB buckets, ring, no compression) recommends "
            f"the interface **{name}**: predicted step {1e3 * rec.get('step_time_s', math.nan):.0f} ms against "
            f"{1e3 * dflt.get('step_time_s', math.nan):.0f} ms on {other} "
            f"({-d.get('predicted_gain_pct', math.nan):+.0f}%).")


@writer("ifname")
def ifname(ctx):
    cases = _cases(ctx)
    if not cases:
        return "No points."
    cache = {}
    measured = {}   # (case, algo) -> busbw [sizes] median over ok repeats
    rows, text, bars, ranges = [], [], [], []
    sizes_all = None
    for case, algo, idx in cases:
        ok = [i for i in idx if ctx.t.cols["status"][i] == "ok"]
        if not ok:
            rows.append([case, algo, _failure_text(ctx, idx[0]), "-", "-", "-", "-"])
            continue
        benches = [ctx.bench(i) for i in ok]
        sizes = benches[0].size
        sizes_all = sizes
        bw = np.array([b.busbw_median for b in benches])          # [repeats, sizes]
        med = np.nanmedian(bw, axis=0)
        measured[(case, algo)] = med
        split, total = _split(benches[0])
        pred, shares = _predict_busbw(ctx, benches[0], split, total, cache)
        large = list(range(max(0, len(sizes) - LARGE), len(sizes)))
        bw_txt = "; ".join(f"{_mib(sizes[j])}: {1e3 * med[j]:.1f}"
                           + (f" ({1e3 * np.nanmin(bw[:, j]):.1f}-{1e3 * np.nanmax(bw[:, j]):.1f})" if len(ok) > 1 else "")
                           for j in large)
        pred_txt = "-" if pred is None else "; ".join(f"{1e3 * pred[j]:.1f} ({_pct(pred[j], med[j]):+.0f}%)" for j in large)
        splits = sorted({_split_text(*_split(b)) for b in benches})
        rows.append([case, algo, f"ok x{len(ok)}", bw_txt, "RATIO", " / ".join(splits), pred_txt])
        j = len(sizes) - 1
        bars.append((f"{case}, {algo}", 1e3 * med[j]))
        ranges.append((1e3 * np.nanmin(bw[:, j]), 1e3 * np.nanmax(bw[:, j])))
        if shares and len(shares) == 1 and case not in ("pinned eth0", "pinned eth1"):
            only = next(iter(shares))
            text.append(f"- **{case}, {algo}**: Open MPI sent {100 * split.get(only, 0) / total:.1f}% of the bytes "
                        f"over {only}; predicted as a run pinned to {only} (the measured split).")
        elif shares and len(shares) > 1:
            text.append(f"- **{case}, {algo}**: striped over " + ", ".join(f"{n} {100 * f:.0f}%" for n, f in shares.items())
                        + "; predicted as max over the NICs of each one's share on its own fabric.")
    # ratios to the pinned fast NIC (same algorithm) at the largest size
    for r in rows:
        if r[4] != "RATIO":
            continue
        fast = measured.get(("pinned eth0", r[1]))
        mine = measured.get((r[0], r[1]))
        r[4] = "-" if fast is None or mine is None else f"{mine[-1] / fast[-1]:.2f}"
    hdr = ["case", "algo", "status", "busbw MB/s at the largest sizes (median, min-max)",
           "ratio to pinned eth0 (largest size)", "bytes sent per interface (/net, all ranks)",
           "predicted MB/s (error vs measured)"]
    out = ["Bus bandwidth of a 2-host all-reduce per interface choice (eth0 1 Gbit/s, eth1 200 Mbit/s, an "
           "idle docker0 with 172.17.0.1/16 on both hosts):", "", table(hdr, rows), "",
           "The predictions of the pinned cases are in-sample (each interface's fabric is fitted to them); "
           "those of the cases left to Open MPI are not: they use the pinned fabrics and the measured split.", ""]
    fast = measured.get(("pinned eth0", "ring"))
    slow = measured.get(("pinned eth1", "ring"))
    if fast is not None and slow is not None:
        out.append(f"Pinning matters: at {_mib(sizes_all[-1])} ring all-reduce ran {1e3 * fast[-1]:.1f} MB/s on eth0 and "
                   f"{1e3 * slow[-1]:.1f} MB/s on eth1 ({fast[-1] / slow[-1]:.1f}x; the link rates differ 5x).")
    failed = [(c, a) for c, a, idx in cases if not any(ctx.t.cols["status"][i] == "ok" for i in idx)]
    if failed:
        out.append("Left to Open MPI with docker0 present, " + ", ".join(f"{c} ({a})" for c, a in failed)
                   + " did not finish: the TCP BTL also offers 172.17.0.1, which every host has, so a rank "
                   "connects to its own docker0 and the job hangs until the time-out.")
    out += [""] + text if text else []
    tl = _tune_line(ctx)
    if tl:
        out += ["", tl]
    missing = [n for n in ("eth0", "eth1") if n not in ctx.calibrated]
    if missing:
        out.append(f"No fabric for {', '.join(missing)} (calibration failed or not run): no predictions for it.")
    if bars:
        ctx.add(plots.hbars([b[0] for b in bars], [b[1] for b in bars], ctx.png("ifname.png"),
                            f"{ctx.name}: all-reduce busbw at {_mib(sizes_all[-1])} per interface choice",
                            "bus bandwidth (MB/s; bar: median, whiskers: min-max over repeats)", ranges=ranges,
                            annotate=[f"{b[1]:.1f}" for b in bars]))
    return "\n".join(out)


def _pct(a, b):
    return 100.0 * (a - b) / b if plots.finite(a) and plots.finite(b) and b else math.nan


def _mib(n):
    return f"{int(n) // 2**20} MiB" if int(n) >= 2**20 else f"{int(n) // 1024} KiB"
