"""Conclusion writers of the seed experiments and the flagship (see conclusions.py).

Each computes its sentences from the study's data (study.h5, the result files, model/)
and may add a plot of its own. They say when the data cannot decide (noise, failures)."""
from __future__ import annotations

import json
import math
import os

import numpy as np

from . import analyze, plots, spec, tools
from .conclusions import also_compare_lines, by, grid_of, ms, writer


def _pct(a, b):
    return 100.0 * (a - b) / b if plots.finite(a) and plots.finite(b) and b else math.nan


def bw_stats(ctx, grid, key):
    """{value of key: (median, min, max) busbw at the grid's largest size} over repeats."""
    out = {}
    size = None
    for i in ctx.rows(grid):
        b = ctx.bench(i)
        fin = np.isfinite(b.busbw_median)
        if not fin.any():
            continue
        j = np.where(fin)[0][-1]
        size = int(b.size[j])
        out.setdefault(ctx.t.params[i].get(key), []).append(float(b.busbw_median[j]))
    return {k: (float(np.median(v)), min(v), max(v)) for k, v in out.items()}, size


def _spread(stats):
    """Largest relative spread between repeats of one setting (the noise floor)."""
    sp = [(mx - mn) / med for med, mn, mx in stats.values() if med > 0]
    return max(sp) if sp else 0.0


def _bwtxt(st):
    med, mn, mx = st
    return f"{med * 1e3:.1f} MB/s" + (f" ({mn * 1e3:.1f}-{mx * 1e3:.1f})" if mx > mn else "")


def hb(n) -> str:
    """1048576 -> '1 MiB' (binary units, as the programs' K/M/G)."""
    h = plots.human_bytes(n)
    return f"{h[:-1]} {h[-1]}iB" if h[-1] in "KMG" else f"{h} B"


def describe_level(lv) -> str:
    """alpha/bandwidth of a calibrated level, with its size regimes when the fit kept some."""
    def one(a, bw):
        return f"alpha {a:.1f} us, {bw * 1e3:.0f} MB/s" if bw < 1 else f"alpha {a:.1f} us, {bw:.2f} GB/s"
    regs = lv.get("regimes") or []
    if not regs:
        txt = one(lv["alpha_us"], lv["bw_GBps"])
    else:
        parts = []
        lo = 0
        for r in regs:
            upto = r.get("up_to_bytes")
            rng = f"up to {hb(upto)}" if upto else f"above {hb(lo)}"
            parts.append(f"{rng}: {one(r['alpha_us'], r['bw_GBps'])}")
            lo = upto or lo
        txt = f"{len(regs)} size regimes (" + "; ".join(parts) + ")"
    if lv["alpha_us"] > 200:
        txt += " — an alpha this large is scheduling delay of busy-polling ranks on shared cores, not the wire"
    return txt


# ---- seed-sockets ------------------------------------------------------------------------------
@writer("sockets")
def sockets(ctx):
    spec_tb = ctx.spec.get("testbed", {})
    line = spec.rate_Bps(spec_tb.get("rate", "1gbit")) / 1e9
    out = []
    verdicts = {}
    groups = [("links", "mca.btl_tcp_links", "btl_tcp_links", "ring all-reduce"),
              ("channels", "channels", "--channels", "ring all-reduce"),
              ("mpi", "mca.btl_tcp_links", "btl_tcp_links", "MPI_Allreduce"),
              ("nics", "net", "--net", "ring all-reduce")]
    series = []
    stats_of = {}
    for grid, key, name, what in groups:
        st, size = bw_stats(ctx, grid, key)
        if not st:
            continue
        stats_of[grid] = st
        keys = list(st)
        base = st[keys[0]][0]
        parts = [f"{name}={k}: {_bwtxt(st[k])}" for k in keys]
        gains = {k: _pct(st[k][0], base) for k in keys[1:]}
        verdicts[grid] = gains
        out.append(f"- **{what}, {name}** at {hb(size)}: " + "; ".join(parts)
                   + (" — " + ", ".join(f"{k}: {g:+.0f}% vs {keys[0]}" for k, g in gains.items()) if gains else ""))
        series.append((f"{what}, {name}", [str(k) for k in keys], [st[k][0] * 1e3 for k in keys],
                       [(st[k][1] * 1e3, st[k][2] * 1e3) for k in keys]))
    if not out:
        return "No finished points."
    text = [f"Bus bandwidth of a 2-host all-reduce (median over repeats, min-max in brackets); the line "
            f"rate is {line * 1e3:.0f} MB/s per link and direction (one NIC), so one NIC bounds busbw at "
            f"~{line * 1e3:.0f} MB/s and two NICs at ~{2 * line * 1e3:.0f} MB/s:", ""] + out + [""]
    for grid, label in (("links", "More TCP connections per peer (btl_tcp_links)"),
                        ("channels", "More concurrent rings (--channels, one connection)"),
                        ("mpi", "btl_tcp_links under MPI_Allreduce"),
                        ("nics", "A second NIC (--net both)")):
        st = stats_of.get(grid)
        if not st or len(st) < 2:
            continue
        keys = list(st)
        base = st[keys[0]]
        best_k = max(keys[1:], key=lambda k: st[k][0])
        best = st[best_k]
        gain = _pct(best[0], base[0])
        if best[1] > base[2]:   # every repeat above every baseline repeat
            text.append(f"{label}: {gain:+.0f}% at {best_k} ({best[0] * 1e3:.0f} vs {base[0] * 1e3:.0f} MB/s, "
                        f"{100 * best[0] / line:.0f}% vs {100 * base[0] / line:.0f}% of one NIC's line rate); "
                        "the repeats do not overlap, so the gain is real.")
        elif gain > 5:
            text.append(f"{label}: {gain:+.0f}% at {best_k} in the median, but the repeats overlap "
                        f"({_bwtxt(best)} vs {_bwtxt(base)}): not a reliable gain.")
        else:
            text.append(f"{label}: no gain ({gain:+.0f}% at {best_k}; repeats {_bwtxt(best)} vs {_bwtxt(base)}).")
    base1 = stats_of.get("links", {}).get(1)
    both = stats_of.get("nics", {}).get("both")
    text.append("")
    text.append("How to read it: the seed's advice is about one TCP stream not filling a link. Here a ring "
                "all-reduce between 2 hosts sends and receives at once over one Open MPI connection"
                + (f", which reached {100 * base1[0] / line:.0f}% of the line rate" if base1 else "")
                + "; what puts the two directions on separate sockets or NICs recovers most of the rest"
                + (f". Two NICs reached {100 * both[0] / (2 * line):.0f}% of their combined line rate, i.e. "
                   "they fixed the per-connection limit but did not double the bandwidth" if both else "")
                + ". See experiments/README.md for the socket counts observed with `ss` (btl_tcp_links > 1 "
                "opened 2 sockets per peer, not N).")
    ctx.add(plots.hbars([f"{s[0]}: {k}" for s in series for k in s[1]],
                        [v for s in series for v in s[2]], ctx.png("sockets.png"),
                        f"{ctx.name}: all-reduce busbw at the largest size (2 hosts, {spec_tb.get('rate', '?')})",
                        "bus bandwidth at the largest size (MB/s; bar: median, whiskers: min-max over repeats)",
                        colors=[plots.COLORS[k] for k, s in enumerate(series) for _ in s[1]],
                        vline=(line * 1e3, "line rate of one NIC"), ranges=[r for s in series for r in s[3]]))
    return "\n".join(text)


# ---- seed-buffsize -----------------------------------------------------------------------------
def _chunk_bytes(v) -> int:
    s = str(v).upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(float(s))


@writer("buffsize")
def buffsize(ctx):
    grid = "chunk"
    idx = ctx.rows(grid)
    if not idx:
        return "No finished points."
    sizes = None
    reps = {}
    for i in idx:
        b = ctx.bench(i)
        sizes = b.size
        reps.setdefault(_chunk_bytes(ctx.t.params[i]["chunk-bytes"]), []).append(b.busbw_median)
    meas = {c: np.median(np.array(v), axis=0) for c, v in reps.items()}
    lo = {c: np.min(np.array(v), axis=0) for c, v in reps.items()}
    hi = {c: np.max(np.array(v), axis=0) for c, v in reps.items()}
    chunks = sorted(meas)
    fabric = ctx.curve_fabric(grid)
    pred = {}
    if fabric:
        for i in idx:
            c = analyze.model_curve(ctx, ctx.bench(i), fabric)
            if c is not None:
                pred[_chunk_bytes(ctx.t.params[i]["chunk-bytes"])] = c[1]
    big = len(sizes) - 1
    nranks = ctx.bench(idx[0]).attrs["nranks"]
    lines = []
    groups = []
    for j in range(len(sizes)):
        groups.append((f"{hb(sizes[j])} message", chunks, [meas[c][j] * 1e3 for c in chunks]))
    default = 4 << 20
    nrep = max(len(v) for v in reps.values())
    lines.append(f"Ring all-reduce of {hb(sizes[big])} on {nranks} ranks, busbw by chunk "
                 f"(median{' and min-max' if nrep > 1 else ''} of {nrep} run(s)): "
                 + ", ".join(f"{plots.human_bytes(c)} {meas[c][big] * 1e3:.1f}"
                             + (f" ({lo[c][big] * 1e3:.0f}-{hi[c][big] * 1e3:.0f})" if nrep > 1 else "") for c in chunks)
                 + " MB/s.")
    if default in meas:
        best_c = max(chunks, key=lambda c: meas[c][big])
        large = [c for c in chunks if c >= (1 << 20)]
        vals = np.array([meas[c][big] for c in large])
        span = 100 * (vals.max() - vals.min()) / np.median(vals) if vals.size else math.nan
        noise = max((100 * (hi[c][big] - lo[c][big]) / meas[c][big] for c in chunks), default=0.0)
        lines.append(f"Best: {plots.human_bytes(best_c)} ({_pct(meas[best_c][big], meas[default][big]):+.0f}% vs 4 MiB, "
                     f"NCCL_BUFFSIZE's default). Chunks from 1 MiB up differ by {span:.0f}% at most"
                     + (f"; repeats of one setting differ by up to {noise:.0f}%" if nrep > 1 else "") + ".")
        if (16 << 20) in meas:
            lines.append(f"Raising the chunk above the default (the seed's advice; 16 MiB here): "
                         f"{_pct(meas[16 << 20][big], meas[default][big]):+.0f}%.")
        small = [c for c in chunks if c < (1 << 20)]
        if small:
            lines.append("Small chunks: " + ", ".join(f"{plots.human_bytes(c)} {_pct(meas[c][big], meas[default][big]):+.0f}%"
                                                       for c in small) + " vs the default.")
        if span <= max(10.0, noise):
            lines.append("Verdict: on this link the chunk size (NCCL_BUFFSIZE's analog) has no measurable effect once it "
                         "is 1 MiB or more; a bigger buffer than NCCL's 4 MiB default does not speed up all-reduce here.")
        else:
            lines.append(f"Verdict: the chunk size matters here (up to {span:.0f}% between chunks of 1 MiB or more, "
                         f"beyond the {noise:.0f}% between repeats); the best is {plots.human_bytes(best_c)}.")
    cal_name = os.path.splitext(os.path.basename(fabric))[0] if fabric else ""
    fit = os.path.join(ctx.dir, "model", f"{cal_name}.calibrate.json")
    if fabric and os.path.exists(fit):
        with open(fit) as fh:
            lv = json.load(fh)["levels"][0]
        lines.append(f"Ping-pong on the same links fits {describe_level(lv)}.")
    if pred:
        err = [_pct(pred[c][big], meas[c][big]) for c in chunks if c in pred]
        lines.append("The model predicts at the largest size "
                     + ", ".join(f"{plots.human_bytes(c)} {pred[c][big] * 1e3:.1f}" for c in chunks if c in pred)
                     + f" MB/s (error {min(err):+.0f}% to {max(err):+.0f}%).")
        if default in pred:
            k = 0
            e = _pct(pred[default][k], meas[default][k])
            lines.append(f"At {hb(sizes[k])} with 4 MiB chunks it predicts {pred[default][k] * 1e3:.1f} MB/s against "
                         f"{meas[default][k] * 1e3:.1f} measured ({e:+.0f}%)"
                         + (": a ring step of a mid-sized message on the shaped links costs more than ping-pong's "
                            "latency shows (a fit without the link's burst reads the refilled ping-pongs as speed)"
                            if e > 15 else "") + ".")
        c0 = chunks[0]
        if c0 in pred and pred[c0][big] < 0.8 * meas[c0][big]:
            lines.append("It charges alpha once per chunk and step, while the measured ring keeps chunks in flight: "
                         f"pessimistic for {hb(c0)} chunks.")
        else:
            lines.append("The model sees no chunk effect either: with the fitted alpha, per-chunk latency is "
                         "negligible against the transfer of a chunk at this bandwidth.")
    ctx.add(plots.metric_lines(groups, ctx.png("chunk.png"),
                               f"{ctx.name}: ring all-reduce busbw vs --chunk-bytes ({nranks} ranks)",
                               "ring chunk (--chunk-bytes)", "bus bandwidth (MB/s, median time)", logx=True, xbytes=True,
                               note="4 MiB is the default (NCCL_BUFFSIZE's default too)."))
    return "\n".join(lines)


# ---- seed-bucketing ----------------------------------------------------------------------------
def _compare_by_file(ctx):
    c = ctx.t.compare
    if not c:
        return {}
    return {os.path.basename(str(f)): k for k, f in enumerate(c["file"])}


@writer("bucketing")
def bucketing(ctx):
    grid = grid_of(ctx, "train")
    on = by(ctx, grid, "bucket-mb", "step_time_s", where={"no-overlap": False})
    off = by(ctx, grid, "bucket-mb", "step_time_s", where={"no-overlap": True})
    exp_on = by(ctx, grid, "bucket-mb", "comm_exposed_s", where={"no-overlap": False})
    if not on:
        return "No finished overlapped points."
    sizes = sorted(on)
    best = min(sizes, key=lambda b: on[b])
    worst = max(sizes, key=lambda b: on[b])
    lines = [f"With overlap, the median step time was {', '.join(f'{_fmtmb(b)} MB: {ms(on[b])}' for b in sizes)}; "
             f"best {_fmtmb(best)} MB ({ms(on[best])}, exposed comm {ms(exp_on.get(best))}), worst {_fmtmb(worst)} MB "
             f"({ms(on[worst])})."]
    if 25 in on:
        lines.append(f"The DDP default (25 MB) is {_pct(on[25], on[best]):+.0f}% from the best bucket size here.")
    if off:
        gains = {b: _pct(on[b], off[b]) for b in sizes if b in off}
        lines.append("Overlap versus communicating after backward: "
                     + ", ".join(f"{_fmtmb(b)} MB {g:+.0f}%" for b, g in gains.items()) + " of the step time.")
        com_off = by(ctx, grid, "bucket-mb", "comm_total_s", where={"no-overlap": True})
        bmin, bmax = min(off, key=off.get), max(off, key=off.get)
        spread = _pct(off[bmax], off[bmin])
        if spread < 10:
            lines.append(f"Without overlap the bucket size matters little ({ms(off[bmin])} to {ms(off[bmax])}): the same "
                         "bytes go after backward either way, only the number of messages changes.")
        else:
            lines.append(f"Without overlap the bucket size still matters: {ms(off[bmin])} at {_fmtmb(bmin)} MB to "
                         f"{ms(off[bmax])} at {_fmtmb(bmax)} MB ({spread:+.0f}%), because the all-reduce of all "
                         f"gradients took {ms(com_off.get(bmin))} in {_fmtmb(bmin)} MB buckets and {ms(com_off.get(bmax))} "
                         f"in {_fmtmb(bmax)} MB ones"
                         + (": smaller messages moved faster per byte" if bmin < bmax
                            else ": fewer, larger messages pay less latency")
                         + _bench_note(ctx, _mean_bucket_mib(ctx, grid, bmin), _mean_bucket_mib(ctx, grid, bmax)) + ".")
    # model
    c = ctx.t.compare
    if c:
        fidx = _compare_by_file(ctx)
        pon = {}
        for i in ctx.rows(grid):
            p = ctx.t.params[i]
            k = fidx.get(os.path.basename(ctx.t.cols["result"][i]))
            if k is not None and not p.get("no-overlap"):
                pon[p["bucket-mb"]] = float(c["predicted_step_time_s"][k])
        if pon:
            pbest = min(pon, key=pon.get)
            err = np.array([_pct(pon[b], on[b]) for b in pon if b in on])
            lines.append(f"The model (calibrated fabric and compute profile) predicts the best bucket at {_fmtmb(pbest)} MB "
                         f"({ms(pon[pbest])}); its step-time error with overlap is {np.min(err):+.0f}% to {np.max(err):+.0f}% "
                         "(negative: it predicts faster than measured).")
            for extra in (worst_predictions(ctx), timeline_contention(ctx, grid)):
                if extra:
                    lines.append(extra)
    groups = [("step time, overlap on", sizes, [1e3 * on[b] for b in sizes], {"color": 0})]
    groups.append(("exposed comm, overlap on", sizes, [1e3 * exp_on.get(b, math.nan) for b in sizes],
                   {"color": 0, "ls": "--"}))
    if off:
        so = sorted(off)
        exp_off = by(ctx, grid, "bucket-mb", "comm_exposed_s", where={"no-overlap": True})
        groups.append(("step time, overlap off (after backward)", so, [1e3 * off[b] for b in so], {"color": 1}))
        groups.append(("exposed comm, overlap off", so, [1e3 * exp_off.get(b, math.nan) for b in so],
                       {"color": 1, "ls": "--"}))
    ctx.add(plots.metric_lines(groups, ctx.png("bucketing.png"), f"{ctx.name}: step time vs bucket size",
                               "bucket cap --bucket-mb (MiB, log scale)", "median time per step (ms)", logx=True))
    return "\n".join(lines)


def _mean_bucket_mib(ctx, grid, bucket_mb) -> float:
    for i in ctx.rows(grid):
        p = ctx.t.params[i]
        if p.get("bucket-mb") == bucket_mb:
            return float(ctx.t.cols["bytes_sent"][i]) / max(1.0, float(ctx.t.cols["num_buckets"][i])) / 2**20
    return float(bucket_mb)


def _bench_note(ctx, mb_a, mb_b) -> str:
    """' (the all-reduce benchmark: X GB/s at A, Y GB/s at B)' from the study's ring all-reduce points."""
    for g in ctx.t.grids():
        if ctx.program_of(g) != "bench":
            continue
        for i in ctx.rows(g):
            b = ctx.bench(i)
            if b.op != "allreduce":
                continue
            def at(mb):
                j = int(np.argmin(np.abs(np.log(np.maximum(b.size, 1)) - np.log(mb * 2**20))))
                return b.busbw_median[j], int(b.size[j])
            (va, sa), (vb, sb) = at(mb_a), at(mb_b)
            big = mb_b * 2**20 > 1.5 * b.size.max()
            txt = (f" (mean bucket {mb_a:.1f} vs {mb_b:.1f} MiB; the ring all-reduce benchmark on idle ranks gave "
                   f"{va:.2f} GB/s busbw at {hb(sa)} and {vb:.2f} GB/s at {hb(sb)}"
                   + (", its largest size: larger messages were not benchmarked" if big else "") + ")")
            if (mb_a < mb_b) == (va <= vb):
                txt += (" — the benchmark does not show this, so it comes from the training run (contention with "
                        "compute, other load), not from the link")
            return txt
    return ""


def _fmtmb(b):
    return f"{b:g}"


# ---- seed-compression --------------------------------------------------------------------------
@writer("compression")
def compression(ctx):
    grid = grid_of(ctx, "train")
    rows = []
    failed = []
    for i in ctx.rows(grid, status=None):
        comp = str(ctx.t.params[i].get("compress"))
        if ctx.t.cols["status"][i] != "ok":
            tail = (ctx.t.cols["stderr_tail"][i] or "").strip().splitlines()
            failed.append(f"{comp} ({tail[-1] if tail else ctx.t.cols['status'][i]})")
            continue
        c = ctx.t.cols
        rows.append((comp, float(c["bytes_sent"][i]), float(c["final_eval_accuracy"][i]), float(c["step_time_s"][i]),
                     float(c["comm_total_s"][i]), float(c["encode_s"][i]) + float(c["decode_s"][i])))
    lines = []
    base = next((r for r in rows if r[0] == "none"), None)
    a = ctx.train(ctx.rows(grid)[0]).attrs if ctx.rows(grid) else {}
    rate = ctx.spec.get("testbed", {}).get("rate", "?")
    launcher = ctx.t.attrs.get("launcher")
    where = f"{a.get('nranks', '?')} ranks, {'testbed at ' + rate if launcher == 'testbed' else 'local ranks'}"
    if base:
        lines.append(f"Measured ({a.get('model')}, {where}, {a.get('epochs') or a.get('steps')} "
                     f"{'epochs' if a.get('epochs') else 'steps'}): without compression {base[1] / 1024:.0f} KiB/step, "
                     f"step {ms(base[3])}, accuracy {100 * base[2]:.1f}%.")
        for r in rows:
            if r[0] == "none":
                continue
            lines.append(f"- `{r[0]}`: {base[1] / r[1]:.1f}x fewer bytes ({r[1] / 1024:.1f} KiB), step {ms(r[3])} "
                         f"({_pct(r[3], base[3]):+.0f}%), encode+decode {ms(r[5])}, accuracy {100 * r[2]:.1f}% "
                         f"({100 * (r[2] - base[2]):+.1f} points)")
        ok_acc = [r for r in rows if r[0] != "none" and r[2] >= base[2] - 0.01]
        fast = [r for r in rows if r[0] != "none" and r[3] < base[3] * 0.95]
        lines.append("")
        lines.append(f"Within 1 accuracy point of uncompressed: {', '.join(r[0] for r in ok_acc) or 'none'}; "
                     f"more than 5% faster per step: {', '.join(r[0] for r in fast) or 'none'}.")
    elif rows:
        lines.append("The uncompressed baseline did not finish; see the table.")
    if failed:
        lines.append(f"Failed compressors (recorded, the study went on): {'; '.join(failed)}.")
    if base and len(rows) > 1:
        accs = [r[2] for r in rows]
        lines.append(f"Accuracy spread over all compressors: {100 * (max(accs) - min(accs)):.1f} points, from one "
                     f"seed each on an easy task ({a.get('model')} on synthetic learnable data): differences of a few "
                     "tenths of a point are not evidence either way; the bytes and step times are.")
    # model at scale
    preds = []
    mdir = os.path.join(ctx.dir, "model")
    for f in sorted(os.listdir(mdir)) if os.path.isdir(mdir) else []:
        if f.endswith(".json") and "-seed-tcp-" in f:
            with open(os.path.join(mdir, f)) as fh:
                d = json.load(fh)
            if "step_time_s" in d:
                preds.append(d)
    if preds:
        pb = next((p for p in preds if p.get("compress") == "none"), None)
        d0 = preds[0]
        lines.append("")
        lines.append(f"Model, {d0.get('model')} on {d0.get('nodes')} nodes x {d0.get('ranks_per_node')} of "
                     f"{d0.get('fabric')} (batch {d0.get('batch_per_rank')}; options in [[model.predict]] of the study file): "
                     + "; ".join(f"{p.get('compress')} step {ms(p['step_time_s'])}, exposed {ms(p['comm_exposed_s'])}, "
                                 f"{p.get('bytes_sent', math.nan) / 2**20:.1f} MiB sent" for p in preds) + ".")
        if pb:
            lines.append(f"Uncompressed, {100 * pb['comm_exposed_s'] / pb['step_time_s']:.0f}% of the predicted step is "
                         "exposed communication: that is all any compressor can remove there.")
            same = [p for p in preds if p.get("compress") != "none"
                    and p.get("bytes_sent", 0) < 0.6 * pb.get("bytes_sent", 1)
                    and p["step_time_s"] > 0.99 * pb["step_time_s"]]
            for p in same:
                lines.append(f"`{p.get('compress')}` sends {pb['bytes_sent'] / p['bytes_sent']:.1f}x fewer bytes per rank "
                             f"yet gains nothing in the model ({ms(p['comm_total_s'])} of communication vs "
                             f"{ms(pb['comm_total_s'])}): its all-gather delivers p-1 = {d0.get('nodes', 1) * d0.get('ranks_per_node', 1) - 1} "
                             "compressed shards to every rank, so the received bytes grow with p, while ring "
                             "all-reduce stays at 2(p-1)/p of the gradient. At 2 ranks (measured) the all-gather is cheap.")
    return "\n".join(lines)


# ---- seed-fabrics ------------------------------------------------------------------------------
@writer("fabrics")
def fabrics(ctx):
    mdir = os.path.join(ctx.dir, "model")
    path = os.path.join(mdir, "epoch-fabrics.json")
    lines = []
    if not os.path.exists(path):
        return "The prediction did not run (see Model)."
    with open(path) as fh:
        d = json.load(fh)
    rows = d.get("rows", [])
    by_f = {os.path.basename(str(r["fabric"])).replace(".toml", ""): r for r in rows}
    tcp, roce, ib = by_f.get("seed-tcp"), by_f.get("seed-roce"), by_f.get("ib-hdr")
    if tcp and roce:
        red = -_pct(roce["epoch_time_s"], tcp["epoch_time_s"])
        lines.append(f"Predicted ResNet-50 epoch (8 nodes x 1 A100 at 40% of fp16 peak, AMP fp16 gradients, batch 256, "
                     f"ImageNet, 25 MB buckets with overlap): seed-tcp {tcp['epoch_time_s']:.1f} s, seed-roce "
                     f"{roce['epoch_time_s']:.1f} s" + (f", ib-hdr {ib['epoch_time_s']:.1f} s" if ib else "")
                     + f". RoCE saves {red:.0f}% (the article: 25%, 48 s -> 36 s).")
        lines.append(f"Step time: seed-tcp {ms(tcp['step_time_s'])} (exposed comm {ms(tcp['comm_exposed_s'])}), "
                     f"seed-roce {ms(roce['step_time_s'])} (exposed {ms(roce['comm_exposed_s'])}): the RoCE number "
                     "is compute-bound, the TCP number bandwidth-bound.")
    for name in ("testbed-1gbit", "testbed-200mbit"):
        r = by_f.get(name)
        if r:
            lines.append(f"On the fabric calibrated from the testbed at {name.split('-')[1]}: epoch {r['epoch_time_s']:.0f} s "
                         f"(step {ms(r['step_time_s'])}, exposed comm {ms(r['comm_exposed_s'])}).")
    cal = []
    for name in ("testbed-1gbit", "testbed-200mbit"):
        p = os.path.join(mdir, f"{name}.calibrate.json")
        if os.path.exists(p):
            with open(p) as fh:
                c = json.load(fh)
            for lv in c.get("levels", []):
                rate = spec.rate_Bps(name.split("-")[1]) / 1e9
                cal.append(f"{name} ({lv['level']}): {describe_level(lv)}, {100 * lv['bw_GBps'] / rate:.0f}% of the shaped "
                           f"rate" + (f", gamma {lv['gamma_GBps'] * 1e3:.0f} MB/s (the all-reduce ran slower than "
                                      "ping-pong predicts and the fit put that into the reduction term)"
                                      if lv.get("gamma_GBps") and lv["gamma_GBps"] < 2 * lv["bw_GBps"] else ""))
    if cal:
        lines.append("Calibrated: " + "; ".join(cal) + ".")
    # sensitivity: which TCP bandwidth gives the article's 48 s?
    if tcp and roce:
        sens = _tcp_bandwidth_for(ctx, 48.0)
        if sens:
            lines.append(sens)
    ap = os.path.join(mdir, "epoch-assumptions.json")
    if os.path.exists(ap):
        with open(ap) as fh:
            rows2 = json.load(fh).get("rows", [])
        tab = {}
        for r in rows2:
            cp = r.get("compute-profile", r.get("compute_profile"))
            tab[(os.path.basename(str(r["fabric"])), cp, r.get("precision"), r.get("nodes"))] = r["epoch_time_s"]
        parts = []
        for cp in ("a100", "v100"):
            for prec in ("fp16", "fp32"):
                t = tab.get(("seed-tcp", cp, prec, 8))
                r = tab.get(("seed-roce", cp, prec, 8))
                if t and r:
                    parts.append(f"{cp} {prec}: {t:.0f} s -> {r:.0f} s ({-_pct(r, t):.0f}%)")
        if parts:
            lines.append("Under other assumptions (8 nodes; seed-tcp -> seed-roce): " + "; ".join(parts) + ".")
        n_parts = []
        for n in (4, 8, 16):
            t = tab.get(("seed-tcp", "a100", "fp16", n))
            r = tab.get(("seed-roce", "a100", "fp16", n))
            if t and r:
                n_parts.append(f"{n} nodes {t:.0f} -> {r:.0f} s ({-_pct(r, t):.0f}%)")
        if n_parts:
            lines.append("By node count (A100, fp16): " + "; ".join(n_parts) + ".")
    if os.path.exists(ap):
        gains = {}
        for (fab, cp, prec, n), t in tab.items():
            if fab == "seed-tcp" and ("seed-roce", cp, prec, n) in tab:
                gains[(cp, prec, n)] = -_pct(tab[("seed-roce", cp, prec, n)], t)
        if gains:
            big = sorted(k for k, g in gains.items() if g >= 20)
            small = sorted(k for k, g in gains.items() if g < 10)
            fmt = lambda ks: ", ".join(f"{cp} {prec} {n} nodes" for cp, prec, n in ks) or "none"
            lines.append(f"Verdict: RoCE saves 20% or more of the epoch in {len(big)} of {len(gains)} assumed configurations "
                         f"({fmt(big)}) and under 10% in {len(small)} ({fmt(small)}). The article's 25% needs a step that "
                         "TCP's bandwidth bounds and RoCE's does not: fast compute and fp16 gradients. With slower GPUs or "
                         "fp32 compute the fabrics converge. RoCE itself was not measured (no RDMA in this kernel); "
                         "seed-roce is the article's numbers as a profile.")
    if tcp and roce and red < 20 and not os.path.exists(ap):
        lines.append("Verdict: under these assumptions RoCE saves less than the article's 25%.")
    labels, vals = [], []
    for r in rows:
        labels.append(os.path.basename(str(r["fabric"])).replace(".toml", ""))
        vals.append(r["epoch_time_s"])
    if labels:
        ctx.add(plots.hbars(labels, vals, ctx.png("fabrics.png"),
                            f"{ctx.name}: predicted ResNet-50 epoch (8 x A100, fp16, batch 256)", "epoch time (s, log scale)",
                            annotate=[f"{v:.1f} s" for v in vals], vline=(48.0, "seed: TCP 48 s"), logx=True))
    return "\n".join(lines)


def _tcp_bandwidth_for(ctx, target_s):
    """Writes seed-tcp variants with other bandwidths and finds the one that gives target_s."""
    mdir = os.path.join(ctx.dir, "model")
    bws = [1.2, 1.4, 1.6, 1.7, 1.8, 2.0, 2.4, 2.7]
    files = []
    for bw in bws:
        p = os.path.join(mdir, f"tcp-80us-{bw:g}GBps.toml")
        with open(p, "w") as fh:
            fh.write(f'name = "tcp-80us-{bw:g}GBps"\ndescription = "seed-tcp with another bandwidth (sensitivity)"\n'
                     f'[inter]\nalpha_us = 80.0\nbw_GBps = {bw}\n[intra]\nalpha_us = 1.0\nbw_GBps = 20.0\n')
        files.append(p)
    try:
        _, d = tools.run_model(ctx.bindir, ["predict", "--model", "resnet50", "--fabric", ",".join(files), "--nodes", 8,
                                            "--ranks-per-node", 1, "--batch-per-rank", 256, "--compute-profile", "a100",
                                            "--precision", "fp16", "--json"],
                               os.path.join(mdir, "analyze.log"), want_json=True)
    except tools.ToolError as e:
        ctx.notes.append(f"bandwidth sensitivity: {e}")
        return None
    pts = sorted((float(os.path.basename(str(r["fabric"])).split("-")[2][:-9]), r["epoch_time_s"]) for r in d["rows"])
    above = [p for p in pts if p[1] <= target_s]
    txt = ("Sensitivity (alpha 80 us): " + ", ".join(f"{b:g} GB/s {t:.1f} s" for b, t in pts) + ". ")
    if above:
        txt += (f"The article's {target_s:.0f} s TCP epoch needs about {above[0][0]:g} GB/s at 80 us, "
                f"{above[0][0] / 1.2:.1f}x the article's 1.2 GB/s (or slower compute than assumed).")
    return txt


# ---- seed-dataloader ---------------------------------------------------------------------------
@writer("dataloader")
def dataloader(ctx):
    grid = grid_of(ctx, "train")
    idx = ctx.rows(grid)
    if not idx:
        return "No finished points."
    a = ctx.train(idx[0]).attrs
    batch = int(a.get("batch_per_rank", 32))
    dts = sorted({ctx.t.params[i]["data-time-us"] for i in idx})
    lines = []
    groups = []
    for dt in dts:
        st = by(ctx, grid, "loader-workers", "step_time_s", where={"data-time-us": dt})
        dw = by(ctx, grid, "loader-workers", "data_s", where={"data-time-us": dt})
        ex = by(ctx, grid, "loader-workers", "comm_exposed_s", where={"data-time-us": dt})
        ws = sorted(st)
        per_batch = batch * dt * 1e-6
        lines.append(f"- loading {dt / 1000:g} ms/sample ({per_batch * 1e3:.0f} ms per batch of {batch}): step time "
                     + ", ".join(f"{w} worker(s) {ms(st[w])} (data wait {ms(dw.get(w))})" for w in ws))
        k = len(groups) // 2
        groups.append((f"step time, {per_batch * 1e3:.0f} ms load/batch", ws, [1e3 * st[w] for w in ws], {"color": k}))
        groups.append((f"data wait, {per_batch * 1e3:.0f} ms load/batch", ws, [1e3 * dw.get(w, math.nan) for w in ws],
                       {"color": k, "ls": "--"}))
        hidden = [w for w in ws if plots.finite(dw.get(w)) and dw[w] < max(0.005, 0.03 * st[w])]
        if hidden:
            w0 = hidden[0]
            rest = float(np.median([st[w] - dw[w] for w in hidden]))
            need = math.ceil(per_batch / rest) if rest > 0 else math.nan
            lines.append(f"  loading is hidden (data wait under 3% of the step) from {w0} worker(s) on; the step without "
                         f"data is ~{ms(rest)}, so ceil({per_batch * 1e3:.0f} / {rest * 1e3:.0f}) = {need} worker(s) "
                         + ("suffice, as measured." if need == w0 else
                            f"should suffice, but {w0} were needed." if need < w0 else
                            f"are the rule's estimate; {w0} sufficed in this {a.get('steps')}-step run, where the "
                            f"{a.get('prefetch')} batches prefetched ahead cover a deficit of "
                            f"~{ms(per_batch / w0 - rest)} per step; a long run would need {need}."))
            if 0 in st:
                lines.append(f"  against loading in the training thread: {_pct(st[w0], st[0]):+.0f}% step time "
                             f"({ms(st[0])} -> {ms(st[w0])}); the step times of the hidden settings "
                             f"({', '.join(ms(st[w]) for w in hidden)}) differ by their exposed communication "
                             f"({', '.join(ms(ex.get(w)) for w in hidden)}), not by data.")
        else:
            lines.append("  loading was never hidden: more workers are needed than were tried.")
    c = ctx.t.compare
    if c:
        err = np.asarray(c["step_error_pct"], float)
        lines.append(f"The model (data loading vs loader workers in its step timeline) predicts these runs with a "
                     f"median |error| of {np.median(np.abs(err)):.0f}% (p90 {np.percentile(np.abs(err), 90):.0f}%).")
    lines.append("Verdict: data loading is hidden once workers x (step time without data) covers the loading time "
                 "of one batch; more workers than that buy nothing, fewer leave the difference as data wait.")
    ctx.add(plots.metric_lines(groups, ctx.png("dataloader.png"), f"{ctx.name}: step time vs loader workers",
                               "--loader-workers (0: loading in the training thread)", "time per step (ms, median)"))
    return "\n".join(["Measured (" + f"{a.get('model')}, {a.get('nranks')} ranks, batch {batch}):", ""] + lines)


def timeline_contention(ctx, grid):
    """Measured vs predicted all-reduce time of the timeline step's buckets, split into buckets
    that started during backward and after it (where the model's no-interference assumption
    is tested)."""
    if grid not in ctx.timelines:
        return None
    i, meas, pred = ctx.timelines[grid]
    if not pred or len(pred["buckets"]) != len(meas["buckets"]):
        return None
    during, after = [], []
    bend = meas["backward"][1]
    for (k, _, _, s, e), (_, _, _, ps, pe) in zip(meas["buckets"], pred["buckets"]):
        (during if s < bend - 1e-4 else after).append((e - s, pe - ps))
    parts = []
    for name, xs in (("started during backward", during), ("started after backward", after)):
        if xs:
            m, p = sum(x[0] for x in xs), sum(x[1] for x in xs)
            parts.append(f"{len(xs)} bucket(s) {name}: {ms(m)} measured vs {ms(p)} predicted ({m / p:.1f}x)"
                         if p > 0 else f"{len(xs)} bucket(s) {name}: {ms(m)} measured")
    txt = (f"Timeline plot ({ctx.label(i)}, median step): all-reduce time of " + "; ".join(parts) + ".")
    if during and sum(x[1] for x in during) > 0:
        r = sum(x[0] for x in during) / sum(x[1] for x in during)
        if r > 1.2:
            txt += (" During backward the all-reduce ran slower than the model, whose fabric was measured while the "
                    "ranks computed nothing (sweeps, or all-reduces after backward) and which assumes communication "
                    "and compute do not interfere; on 2 shared cores it competes with gradient generation and the "
                    "loader threads.")
    return txt


def worst_predictions(ctx, k=2):
    """The k runs the model got most wrong, with measured and predicted exposed communication."""
    c = ctx.t.compare
    if not c:
        return None
    by_file = {os.path.basename(ctx.t.cols["result"][i]): i for i in range(len(ctx.t))}
    err = np.asarray(c["step_error_pct"], float)
    order = np.argsort(-np.abs(err))[:k]
    parts = []
    for j in order:
        i = by_file.get(os.path.basename(str(c["file"][j])))
        lab = ctx.label(i) if i is not None else str(c["file"][j])
        parts.append(f"{lab} ({err[j]:+.0f}%: exposed communication {ms(float(c['measured_comm_exposed_s'][j]))} "
                     f"measured vs {ms(float(c['predicted_comm_exposed_s'][j]))} predicted)")
    return "Largest errors: " + "; ".join(parts) + "."


# ---- flagship ----------------------------------------------------------------------------------


@writer("flagship")
def flagship(ctx):
    from .flagship import prediction_table
    lines = []
    for name, source, tail in (("local", "ping-pong and ring all-reduce on this machine", ""),
                               ("runs", "the bucket all-reduces of the no-overlap runs named in the study file",
                                "; the comparison below uses it")):
        cal = os.path.join(ctx.dir, "model", f"{name}.calibrate.json")
        if os.path.exists(cal):
            with open(cal) as fh:
                lv = json.load(fh)["levels"][0]
            lines.append(f"Fabric `{name}`, calibrated from {source} ({len(lv.get('points', []))} points): "
                         f"{describe_level(lv)} (R^2 {lv['r2']:.3f}, largest |residual| "
                         f"{100 * lv['max_abs_rel_residual']:.0f}%){tail}.")
    grid = grid_of(ctx, "train")
    on = by(ctx, grid, "bucket-mb", "step_time_s", where={"no-overlap": False})
    off = by(ctx, grid, "bucket-mb", "step_time_s", where={"no-overlap": True})
    if on:
        best = min(on, key=on.get)
        lines.append(f"Measured: the fastest configuration is {best:g} MB buckets with overlap ({ms(on[best])} per step"
                     + (f", {_pct(on[best], off[best]):+.0f}% vs the same buckets without overlap" if best in off else "")
                     + ").")
    c = ctx.t.compare
    if c:
        err = np.asarray(c["step_error_pct"], float)
        lines.append(f"Predicted vs measured step time: |error| median {np.median(np.abs(err)):.0f}%, "
                     f"p90 {np.percentile(np.abs(err), 90):.0f}%, mean signed {np.mean(err):+.0f}% over {err.size} runs"
                     + "".join(f"; {x}" for x in also_compare_lines(ctx.dir)) + ".")
        for extra in (worst_predictions(ctx), timeline_contention(ctx, grid)):
            if extra:
                lines.append(extra)
        lines.append("")
        lines.append("```\n" + prediction_table(ctx) + "\n```")
    return "\n".join(lines)
