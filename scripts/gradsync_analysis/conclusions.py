"""Conclusions of a study, written from its data (DIR/conclusions.md).

Every study gets: its description (the claim), what ran, a table of the points with their
key metrics, the failures, the model's results. A study whose `analysis` key names a writer
below (the seed experiments, the flagship) also gets a "Conclusion" paragraph computed from
the measured numbers; the writers say plainly when the data cannot decide.
"""
from __future__ import annotations

import json
import math
import os

import numpy as np

from . import plots, results

WRITERS = {}


def writer(name):
    def deco(f):
        WRITERS[name] = f
        return f
    return deco


def _f(v, nd=3):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{nd}g}"
    return str(v)


def ms(v):
    return "n/a" if not plots.finite(v) else f"{1e3 * v:.1f} ms"


def mib(v):
    return "n/a" if not plots.finite(v) else f"{v / 2**20:.2f} MiB"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def points_table(ctx):
    t = ctx.t
    parts = []
    for grid in t.grids():
        idx = t.rows(grid, status=None)
        prog = ctx.program_of(grid)
        axes = [ax for ax in t.axes if any(ax in ctx.swept(i) for i in idx)]
        from .analyze import axis_label
        hdr_axes = [axis_label(a, True).split("=")[0] if a.split(".")[-1].startswith("no-") else a for a in axes]

        def cell(i, a):
            v = ctx.swept(i).get(a)
            return "-" if v is None else axis_label(a, v).split("=", 1)[1]
        if prog == "bench":
            sizes = t.size_bytes
            hdr = hdr_axes + ["status", "avg busbw GB/s", "largest-size busbw GB/s"]
            rows = []
            for i in idx:
                bw = t.cols["busbw_GBps"][i]
                fin = np.where(np.isfinite(bw))[0]
                last = f"{bw[fin[-1]]:.3f} @ {plots.human_bytes(sizes[fin[-1]])}" if fin.size else "n/a"
                rows.append([cell(i, a) for a in axes] +
                            [t.cols["status"][i], _f(float(t.cols["avg_busbw_GBps"][i])), last])
        else:
            hdr = hdr_axes + ["status", "step", "exposed comm", "comm total", "bytes/step", "accuracy"]
            rows = []
            for i in idx:
                c = t.cols
                rows.append([cell(i, a) for a in axes] +
                            [c["status"][i], ms(c["step_time_s"][i]), ms(c["comm_exposed_s"][i]),
                             ms(c["comm_total_s"][i]), mib(c["bytes_sent"][i]), _f(float(c["final_eval_accuracy"][i]))])
        parts.append(f"**grid `{grid}`** ({prog}, {len(idx)} point(s))\n\n" + table(hdr, rows))
    return "\n\n".join(parts)


def _fmtv(v):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


def failures(ctx):
    t = ctx.t
    out = []
    for i in range(len(t)):
        if t.cols["status"][i] in ("failed", "timeout"):
            tail = (t.cols["stderr_tail"][i] or "").strip().splitlines()
            out.append(f"- `{t.cols['id'][i]}` {t.cols['status'][i]} (exit {t.cols['exit_status'][i]}): "
                       f"{tail[-1] if tail else 'no stderr'}")
        elif t.cols["status"][i] == "pending":
            out.append(f"- `{t.cols['id'][i]}` not run")
    return "\n".join(out)


def also_compare_lines(study_dir):
    """One line per [model.compare] `also` fabric and `compute_from` (model/compare-<name>.json)."""
    out = []
    mdir = os.path.join(study_dir, "model")
    for fn in sorted(os.listdir(mdir)) if os.path.isdir(mdir) else []:
        if not (fn.startswith("compare-") and fn.endswith(".json")):
            continue
        try:
            with open(os.path.join(mdir, fn)) as fh:
                d = json.load(fh)
        except (OSError, json.JSONDecodeError):
            continue
        cf = d.get("compute_from")
        with_ = (f"each with the compute of `{os.path.relpath(cf, study_dir)}` (fabric `{d.get('fabric')}`)" if cf
                 else f"with fabric `{fn[8:-5]}`")
        out.append(f"the same {len(d.get('runs', []))} runs {with_}: step time |error| median "
                   f"{d.get('median_abs_error_pct', float('nan')):.1f}%, p90 {d.get('p90_abs_error_pct', float('nan')):.1f}%"
                   + results.inside_words(d.get("inside_spread"), len(d.get("runs", [])))
                   + results.per_configuration_words(d.get("per_configuration"))
                   + f" (model/{fn[:-5]}.h5)")
    return out


def model_summary(ctx):
    out = []
    for name in ctx.t.model.get("fabrics", []) or []:
        path = os.path.join(ctx.dir, "model", f"{name}.calibrate.json")
        try:
            with open(path) as fh:
                cal = json.load(fh)
        except (OSError, json.JSONDecodeError):
            continue
        for lv in cal.get("levels", []):
            out.append(f"- fabric `{name}` level {lv['level']}: alpha {lv['alpha_us']:.2f} us, "
                       f"bw {lv['bw_GBps']:.3f} GB/s"
                       + (f", gamma {lv['gamma_GBps']:.2f} GB/s" if lv.get("gamma_GBps") else "")
                       + "".join(f", {t} sums {lv[k]:.3f} GB/s" for t, k in (("fp16", "gamma_fp16_GBps"),
                                                                            ("bf16", "gamma_bf16_GBps")) if lv.get(k))
                       + (f", while computing {lv.get('contention_us', 0):.0f} us + {lv['contention']:.2f} x"
                          if lv.get("contention", 1) != 1 or lv.get("contention_us", 0) > 0 else "")
                       + f" (R^2 {lv.get('r2', float('nan')):.3f}, largest |residual| "
                         f"{100 * lv.get('max_abs_rel_residual', float('nan')):.0f}%, "
                         f"{len(lv.get('points', []))} points)")
    c = ctx.t.compare
    if c:
        err = np.asarray(c["step_error_pct"], float)
        ok = np.isfinite(err)
        inside = int(np.sum(c["inside_spread"][ok])) if "inside_spread" in c else None
        err = err[ok]
        if err.size:
            try:
                with open(os.path.join(ctx.dir, "model", "compare.json")) as fh:
                    pc = json.load(fh).get("per_configuration")
            except (OSError, json.JSONDecodeError):
                pc = None
            out.append(f"- compare: {err.size} runs, step time |error| median {np.median(np.abs(err)):.1f}%, "
                       f"p90 {np.percentile(np.abs(err), 90):.1f}%" + results.inside_words(inside, err.size)
                       + results.per_configuration_words(pc) + " (model/compare.h5)")
            spread = results.repeat_spread_words(pc)
            if spread:
                out.append(f"- {spread}")
    for line in also_compare_lines(ctx.dir):
        out.append(f"- {line}")
    for e in ctx.t.model.get("errors", []) or []:
        out.append(f"- could not: {e}")
    return "\n".join(out)


def write(ctx) -> str:
    t = ctx.t
    a = t.attrs
    head = [f"# {ctx.name}: conclusions", ""]
    if a.get("description"):
        head += ["> " + a["description"].replace("\n", "\n> "), ""]
    nok, nfail, npend = a.get("points_ok", 0), a.get("points_failed", 0), a.get("points_pending", 0)
    head += [f"{len(t)} point(s): {nok} ok, {nfail} failed, {npend} not run; launcher {a.get('launcher')}"
             f"{', scale ' + a['scale'] if a.get('scale') else ''}. Results in `{ctx.dir}`.", ""]
    body = []
    w = WRITERS.get(ctx.analysis)
    if w:
        try:
            text = w(ctx)
        except Exception as e:  # a conclusion writer must never hide the data
            text = f"(the conclusion could not be computed: {type(e).__name__}: {e})"
        body += ["## Conclusion", "", text.strip(), ""]
    body += ["## Points", "", points_table(ctx), ""]
    f = failures(ctx)
    if f:
        body += ["## Failed points", "", f, ""]
    m = model_summary(ctx)
    if m:
        body += ["## Model", "", m, ""]
    if ctx.notes:
        body += ["## Notes", ""] + [f"- {n}" for n in ctx.notes] + [""]
    body += ["## Plots", ""] + [f"- `{os.path.relpath(p, ctx.dir)}`" for p in ctx.pngs] + [""]
    return "\n".join(head + body)


# ---- helpers for the writers ----------------------------------------------------------------
def by(ctx, grid, key, metric, status="ok", where=None):
    """{value of option key: median metric over points (repeats)} for a grid."""
    out = {}
    for i in ctx.rows(grid, status=status):
        p = ctx.t.params[i]
        if where and any(p.get(k) != v for k, v in where.items()):
            continue
        out.setdefault(p.get(key), []).append(float(ctx.t.cols[metric][i]))
    return {k: float(np.nanmedian(v)) if np.isfinite(v).any() else math.nan for k, v in out.items()}


def busbw_at(ctx, i, size=None):
    """(busbw, size) at the given size, or at the largest measured size."""
    bw = ctx.t.cols["busbw_GBps"][i]
    sizes = ctx.t.size_bytes
    fin = np.where(np.isfinite(bw))[0]
    if not fin.size:
        return math.nan, 0
    if size is None:
        j = fin[-1]
    else:
        j = int(np.argmin(np.abs(sizes - size)))
    return float(bw[j]), int(sizes[j])


def grid_of(ctx, program):
    for g in ctx.t.grids():
        if ctx.program_of(g) == program:
            return g
    return None


from . import seed_conclusions  # noqa: E402,F401  (registers the seed writers)
from . import tune_conclusions  # noqa: E402,F401  (registers the tune-verify writer)
from . import ifname_conclusions  # noqa: E402,F401  (registers the seed-ifname writer)
from . import whatif_conclusions  # noqa: E402,F401  (registers the torch-whatif writer)
