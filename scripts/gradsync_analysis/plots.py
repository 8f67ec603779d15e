"""Plots (matplotlib, Agg backend: no display needed). Every function writes one PNG and
returns its path. Units are in the axis labels; sizes on log axes get 1K/1M labels."""
from __future__ import annotations

import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

DPI = 110
COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]
PARTS = [  # step-time components, bottom to top
    ("data_s", "data wait", "#8c8c8c"),
    ("forward_s", "forward", "#4c72b0"),
    ("backward_s", "backward", "#55a868"),
    ("comm_exposed_s", "exposed comm", "#c44e52"),
    ("optimizer_s", "optimizer", "#dd8452"),
]


def human_bytes(v, _pos=None) -> str:
    v = float(v)
    for unit, f in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if v >= f:
            x = v / f
            return f"{x:.0f}{unit}" if abs(x - round(x)) < 0.05 else f"{x:.1f}{unit}"
    return f"{v:.0f}"


def _save(fig, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def busbw_vs_size(series, curves, path, title, ylabel="bus bandwidth (GB/s)", note=None):
    """series: [(label, sizes, values)], measured (markers + solid line);
    curves: [(label, sizes, values, color_index)], model (dashed, matching color)."""
    fig, ax = plt.subplots(figsize=(8, 5))
    for k, (label, x, y) in enumerate(series):
        ax.plot(x, y, "o-", color=COLORS[k % len(COLORS)], label=f"{label} (measured)", ms=4, lw=1.4)
    for label, x, y, k in curves:
        ax.plot(x, y, "--", color=COLORS[k % len(COLORS)], label=f"{label} (model)", lw=1.2, alpha=0.9)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(human_bytes))
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.set_ylim(bottom=0)
    if len(series) + len(curves) <= 6:
        ax.legend(fontsize=8, loc="best")
    else:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if note:
        fig.text(0.01, -0.02, note, fontsize=8, ha="left", va="top", wrap=True)
    return _save(fig, path)


def step_breakdown(rows, path, title):
    """rows: [(label, {component: seconds}, step_time_s)] -> stacked bars (ms) with the
    measured step time as a black tick."""
    longest = max((len(line) for r in rows for line in r[0].split(", ")), default=4)
    per_bar = max(0.8, 0.09 * longest)   # inches: the two-line tick labels must not touch
    fig, ax = plt.subplots(figsize=(max(6, per_bar * len(rows) + 2.5), 5))
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for key, name, color in PARTS:
        v = np.array([1e3 * (r[1].get(key) or 0.0) if np.isfinite(r[1].get(key, np.nan)) else 0.0
                      for r in rows])
        ax.bar(x, v, 0.65, bottom=bottom, color=color, label=name)
        bottom += v
    st = np.array([1e3 * r[2] for r in rows])
    ax.scatter(x, st, marker="_", s=900, color="black", zorder=3, label="measured step time")
    ax.set_xticks(x)
    ax.set_xticklabels([r[0].replace(", ", "\n") for r in rows], fontsize=8)
    ax.set_ylabel("time per step (ms, median after warm-up)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), markerscale=0.4)
    ax.set_xlabel("Bars: medians of each part; exposed comm = communication not hidden behind backward.\n"
                  "Parts can overlap (data loading runs in loader threads), so the bar need not equal the step.",
                  fontsize=7.5, labelpad=8)
    return _save(fig, path)


def bucket_timeline(measured, predicted, path, title):
    """measured / predicted: dict(label, buckets: [(index, bytes, ready_s, start_s, end_s)],
    backward: (start_s, end_s) or None, step_s) -> Gantt chart, times in ms from step start."""
    panels = [p for p in (measured, predicted) if p]
    nb = max(len(p["buckets"]) for p in panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, len(panels) * (0.9 + 0.42 * max(nb, 2)) + 0.4),
                             sharex=True, squeeze=False)
    xmax = 0.0
    for ax, p in zip(axes[:, 0], panels):
        if p.get("backward"):
            b0, b1 = p["backward"]
            ax.axvspan(1e3 * b0, 1e3 * b1, color="#55a868", alpha=0.15, lw=0)
        for idx, nbytes, ready, start, end in p["buckets"]:
            y = idx
            ax.barh(y, 1e3 * (end - start), left=1e3 * start, height=0.6, color=COLORS[0], alpha=0.85)
            if ready < start - 1e-6:
                ax.plot([1e3 * ready, 1e3 * start], [y, y], ":", color="gray", lw=1)
            ax.plot(1e3 * ready, y, "|", color="black", ms=12, mew=2)
            ax.text(1e3 * end + 0.4, y, human_bytes(nbytes) + ("iB" if nbytes >= 1024 else " B"), va="center",
                    fontsize=7)
            xmax = max(xmax, 1e3 * end)
        if p.get("step_s"):
            ax.axvline(1e3 * p["step_s"], color="black", lw=1, ls="--")
            xmax = max(xmax, 1e3 * p["step_s"])
        ax.set_yticks([b[0] for b in p["buckets"]])
        ax.set_yticklabels([f"bucket {b[0]}" for b in p["buckets"]], fontsize=8)
        ax.invert_yaxis()
        ax.set_title(p["label"], fontsize=9, loc="left")
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("time from step start (ms)")
    axes[-1, 0].set_xlim(0, xmax * 1.12 if xmax > 0 else 1)
    handles = [Patch(color=COLORS[0], alpha=0.85, label="all-reduce of the bucket"),
               Patch(color="#55a868", alpha=0.15, label="backward pass"),
               plt.Line2D([], [], color="black", marker="|", ls="", ms=10, mew=2, label="bucket ready"),
               plt.Line2D([], [], color="black", ls="--", lw=1, label="end of step")]
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    # the legend goes under the x axis label, outside the panels (bbox_inches="tight" keeps it)
    fig.legend(handles=handles, fontsize=8, loc="upper center", ncol=4, bbox_to_anchor=(0.5, 0.0))
    return _save(fig, path)


def predicted_vs_measured(measured, predicted, labels, path, title, band=0.05, unit="ms", scale=1e3,
                          label_key=None, spread=None):
    """spread: (p10, p90, inside) per run from compare (measured_step_p10_s / _p90_s and its
    inside_spread flags): p10..p90 of the run's own steps drawn as a horizontal bar through
    the point (a bar that crosses the diagonal: predicted inside the run's own scatter), and
    the flags counted in the summary box."""
    m = np.asarray(measured, float) * scale
    p = np.asarray(predicted, float) * scale
    ok = np.isfinite(m) & np.isfinite(p) & (m > 0)
    fig, ax = plt.subplots(figsize=(6.5, 6))
    has = np.zeros_like(ok)
    if spread is not None:
        s10, s90 = (np.asarray(v, float) * scale for v in spread[:2])
        flags = np.asarray(spread[2], bool)
        has = ok & np.isfinite(s10) & np.isfinite(s90)
    if ok.any():
        lo, hi = min(m[ok].min(), p[ok].min()) * 0.8, max(m[ok].max(), p[ok].max()) * 1.2
        if has.any():
            lo, hi = min(lo, s10[has].min() * 0.95), max(hi, s90[has].max() * 1.05)
    else:
        lo, hi = 0.1, 1
    inside = None
    if has.any():
        ax.errorbar(m[has], p[has], xerr=[m[has] - s10[has], s90[has] - m[has]], fmt="none",
                    ecolor=COLORS[0], alpha=0.45, lw=1, capsize=2, zorder=2, label="run's steps p10..p90")
        inside = (int(np.sum(flags[has])), int(has.sum()))
    xs = np.linspace(lo, hi, 100)
    ax.fill_between(xs, xs * (1 - band), xs * (1 + band), color="#55a868", alpha=0.2,
                    label=f"±{band * 100:.0f}% band")
    ax.plot(xs, xs, "-", color="#55a868", lw=1, label="predicted = measured")
    ax.scatter(m[ok], p[ok], color=COLORS[0], zorder=3, s=28, label="runs")
    labs = [str(x) for x in np.asarray(labels, dtype=object)[ok]]
    key = None
    if labs and max(len(x) for x in labs) > 14:   # long labels: numbers on the points, a key beside
        key = "\n".join(f"{k + 1}: {x}" for k, x in enumerate(labs))
        labs = [str(k + 1) for k in range(len(labs))]
    placed = []  # labels of nearby points go to other sides so that they stay readable
    offsets = [(4, 4), (4, -10), (-6, 4), (-6, -10)]
    for xi, yi, lab in zip(m[ok], p[ok], labs):
        near = sum(1 for (xj, yj) in placed if abs(xi - xj) < 0.04 * (hi - lo) and abs(yi - yj) < 0.04 * (hi - lo))
        dx, dy = offsets[near % len(offsets)]
        ax.annotate(lab, (xi, yi), fontsize=7, xytext=(dx, dy), textcoords="offset points",
                    ha="left" if dx > 0 else "right")
        placed.append((xi, yi))
    if label_key:
        ax.text(0.97, 0.03, label_key, transform=ax.transAxes, fontsize=8, ha="right", va="bottom",
                color="#444444")
    if key:
        ax.text(1.03, 1.0, key, transform=ax.transAxes, fontsize=7, ha="left", va="top", family="monospace")
    err = 100 * (p[ok] - m[ok]) / m[ok]
    if err.size:
        stats = (f"{err.size} runs: |error| median {np.median(np.abs(err)):.1f}%, "
                 f"p90 {np.percentile(np.abs(err), 90):.1f}%, max {np.max(np.abs(err)):.1f}%\n"
                 f"mean signed error {np.mean(err):+.1f}%; within ±{band * 100:.0f}%: "
                 f"{np.sum(np.abs(err) <= band * 100)}/{err.size}"
                 + (f"\ninside the run's own steps' p10..p90: {inside[0]}/{inside[1]}" if inside else ""))
        ax.text(0.03, 0.97, stats, transform=ax.transAxes, fontsize=8, va="top",
                bbox=dict(boxstyle="round", fc="white", alpha=0.85))
    if hi / lo > 20:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel(f"measured step time ({unit})")
    ax.set_ylabel(f"predicted step time ({unit})")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, 0.86))
    return _save(fig, path)


def compression(rows, path, title):
    """rows: [(label, bytes_per_step, accuracy, step_time_s, failed_reason or None)]."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 0.5 * len(rows) + 2.2), sharey=True)
    y = np.arange(len(rows))
    labels = [r[0] for r in rows]
    kib = max([r[1] for r in rows if r[4] is None] or [0]) < 2**20
    cols = [(f"bytes sent per step and rank ({'KiB' if kib else 'MiB'}, log)",
             lambda r: r[1] / (2**10 if kib else 2**20), True),
            ("final evaluation accuracy", lambda r: r[2], False),
            ("median step time (ms)", lambda r: 1e3 * r[3], False)]
    for ax, (xlabel, f, logx) in zip(axes, cols):
        vals = np.array([f(r) if r[4] is None else np.nan for r in rows], float)
        ax.barh(y, np.nan_to_num(vals, nan=0.0), color=[COLORS[k % len(COLORS)] for k in range(len(rows))])
        finite = vals[np.isfinite(vals)]
        span = finite.max() if finite.size else 1.0
        for k, (v, r) in enumerate(zip(vals, rows)):
            if r[4] is not None:
                msg = r[4] if len(r[4]) <= 42 else r[4][:40] + "..."
                ax.text(0.02, k, "failed: " + msg, transform=ax.get_yaxis_transform(), va="center",
                        fontsize=7, color="#c44e52")
            elif np.isfinite(v):
                txt = f"{v:.3g}" if not logx else f"{v:.3g}"
                ax.text(v * (1.05 if logx else 1) + (0 if logx else 0.01 * span), k, txt, va="center", fontsize=7)
            else:
                ax.text(0.02, k, "n/a", transform=ax.get_yaxis_transform(), va="center", fontsize=7)
        if logx and finite.size and finite.min() > 0:
            ax.set_xscale("log")
            ax.set_xlim(finite.min() / 2, finite.max() * 4)
        elif finite.size:
            ax.set_xlim(0, finite.max() * 1.25)
        ax.set_xlabel(xlabel)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0].set_yticks(y)
    axes[0].set_yticklabels(labels, fontsize=8)
    axes[0].invert_yaxis()
    fig.suptitle(title)
    return _save(fig, path)


def metric_lines(groups, path, title, xlabel, ylabel, logx=False, xbytes=False, note=None, hline=None):
    """groups: [(label, xs, ys[, {"color": index, "ls": "--"}])] -> one line per group."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for k, g in enumerate(groups):
        label, xs, ys = g[:3]
        style = g[3] if len(g) > 3 else {}
        ax.plot(xs, ys, marker="o", ls=style.get("ls", "-"), color=COLORS[style.get("color", k) % len(COLORS)],
                label=label, ms=5)
    if hline is not None:
        ax.axhline(hline[0], color="gray", ls=":", lw=1, label=hline[1])
    if logx:
        ax.set_xscale("log", base=2)
    xs_all = sorted({float(x) for g in groups for x in g[1]})
    if xs_all and len(xs_all) <= 12:   # ticks at the measured values
        ax.set_xticks(xs_all)
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xticklabels([human_bytes(x) if xbytes else f"{x:g}" for x in xs_all])
    elif xbytes:
        ax.xaxis.set_major_formatter(FuncFormatter(human_bytes))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if len(groups) > 1 or hline is not None:
        ax.legend(fontsize=8)
    if note:
        fig.text(0.01, -0.02, note, fontsize=8, ha="left", va="top", wrap=True)
    return _save(fig, path)


def hbars(labels, values, path, title, xlabel, annotate=None, colors=None, vline=None, ranges=None, logx=False):
    """Horizontal bars; ranges: [(lo, hi)] drawn as error bars (e.g. min-max over repeats)."""
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(labels) + 1.8))
    y = np.arange(len(labels))
    xerr = None
    if ranges is not None:
        xerr = np.array([[max(0.0, v - lo), max(0.0, hi - v)] for v, (lo, hi) in zip(values, ranges)]).T
    ax.barh(y, values, color=colors or [COLORS[k % len(COLORS)] for k in range(len(labels))], xerr=xerr,
            error_kw=dict(ecolor="black", capsize=3, lw=1))
    mx = max([v for v in values if np.isfinite(v)] + ([hi for _, hi in ranges] if ranges else []) or [1])
    for k, v in enumerate(values):
        if np.isfinite(v):
            x = max(v, ranges[k][1]) if ranges else v
            ax.text(x * 1.08 if logx else x + 0.015 * mx, k, annotate[k] if annotate else f"{v:.3g}",
                    va="center", fontsize=8, bbox=dict(fc="white", ec="none", pad=0.5, alpha=0.8))
    if vline is not None:
        mx = max(mx, vline[0])
        ax.axvline(vline[0], color="black", ls="--", lw=1, label=vline[1])
        ax.legend(fontsize=8, loc="upper right" if logx else "lower right")
    if logx:
        fin = [v for v in values if np.isfinite(v) and v > 0]
        ax.set_xscale("log")
        ax.set_xlim(min(fin) / 2, max(fin) * 4)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    if not logx:
        ax.set_xlim(0, mx * 1.3)
    ax.grid(True, axis="x", alpha=0.3, which="both" if logx else "major")
    return _save(fig, path)


def is_png(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(8) == b"\x89PNG\r\n\x1a\n"


def finite(v) -> bool:
    try:
        return v is not None and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False
