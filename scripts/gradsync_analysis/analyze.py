"""`scripts/study analyze DIR`: plots (DIR/plots/*.png) and conclusions (DIR/conclusions.md).

Generic plots, chosen by what the study holds:
  busbw-<grid>.png        bench grids: busbw (pingpong: bandwidth) vs size per point, measured,
                          with the model's curve (gradsync-model collective --json) on the fabric
                          calibrated by the study (or [plots] curve_fabric)
  breakdown-<grid>.png    train grids: data / forward / backward / exposed comm / optimizer bars
  timeline-<grid>.png     train grids: one step's buckets, measured (/buckets of the median step)
                          and predicted (gradsync-model predict --json, per-bucket ready/start/end)
  compare.png             predicted vs measured step time (gradsync-model compare), ±5% band
  compression-<grid>.png  train grids sweeping `compress`: bytes/step, accuracy, step time
and whatever the study's conclusion writer adds (conclusions.py), keyed by `analysis`.

[plots] in the study file: curve_fabric = "<calibrated name|built-in|file>",
timeline = { <swept key> = value, ... } (which point's step to draw), fabric = "<fabric for the
predicted timeline>" (default: [model.compare]'s fabric, else the first calibrated fabric).
"""
from __future__ import annotations

import json
import math
import os
import tomllib

import numpy as np

from . import conclusions, model, plots, results, studyfile, tools


class Ctx:
    """What the analysis of one study folder needs, computed once."""

    def __init__(self, out_dir: str, bindir: str):
        self.dir = os.path.abspath(out_dir)
        self.bindir = bindir
        self.t = studyfile.StudyTable(os.path.join(self.dir, "study.h5"))
        self.spec = tomllib.loads(self.t.attrs.get("spec_text", ""))
        self.name = self.t.attrs.get("study", os.path.basename(self.dir))
        self.analysis = self.spec.get("analysis", self.name)
        self.plot_cfg = self.spec.get("plots", {})
        self.calibrated = model.calibrated_files(self.dir)
        self.plots_dir = os.path.join(self.dir, "plots")
        self.pngs = []
        self.notes = []            # things the analysis could not do, with the reason
        self._train = {}
        self._bench = {}
        self.timelines = {}        # grid -> (point, measured, predicted) of its timeline plot

    # ---- access ----------------------------------------------------------------------------
    def col(self, name):
        return self.t.cols[name]

    def rows(self, grid=None, program=None, status="ok"):
        return self.t.rows(grid, program, status)

    def program_of(self, grid):
        i = list(self.t.cols["grid"]).index(grid)
        return self.t.cols["program"][i]

    def swept(self, i) -> dict:
        p = self.t.params[i]
        return {ax: p[ax] for ax in self.t.axes if ax in p and self._is_swept_in_grid(ax, i)}

    def _is_swept_in_grid(self, ax, i):
        col = self.t.cols.get(ax)
        if col is None:
            return False
        v = col[i]
        return not (v == "" or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, (int, np.integer)) and v == -1
                                                                          and self.t.params[i].get(ax) is not True))

    def label(self, i, skip=()) -> str:
        sw = {k: v for k, v in self.swept(i).items() if k not in skip}
        if not sw:
            return self.t.cols["grid"][i]
        return ", ".join(axis_label(k, v) for k, v in sw.items())

    def train(self, i) -> results.Train:
        if i not in self._train:
            self._train[i] = results.Train(self.t.result_path(i))
        return self._train[i]

    def bench(self, i) -> results.Bench:
        if i not in self._bench:
            self._bench[i] = results.Bench(self.t.result_path(i))
        return self._bench[i]

    def metric(self, name, i) -> float:
        return float(self.t.cols[name][i])

    def groups(self, idx, skip=("repeat",)):
        """Points with the same swept values (repeats) -> [(label, [i, ...])], plan order."""
        out = {}
        for i in idx:
            key = json.dumps({k: v for k, v in self.swept(i).items()}, sort_keys=True)
            out.setdefault(key, []).append(i)
        return [(self.label(v[0]), v) for v in out.values()]

    def median_metric(self, name, idx) -> float:
        v = np.array([self.metric(name, i) for i in idx], float)
        v = v[np.isfinite(v)]
        return float(np.median(v)) if v.size else math.nan

    def fabric_for_model(self):
        """Fabric for predictions: [plots] fabric, else [model.compare]'s, else the first calibrated."""
        want = self.plot_cfg.get("fabric") or self.spec.get("model", {}).get("compare", {}).get("fabric")
        if want:
            key = want.lstrip("@")
            if key in self.calibrated:
                return self.calibrated[key]
            if want.startswith("@") or key in self._calibrate_entries():
                self.notes.append(f"the calibration '{key}' did not succeed (model/model.log): no predictions")
                return None
            return want
        fabs = [n for n, c in self._calibrate_entries().items() if not c.get("compute")]
        for n in fabs:
            if n in self.calibrated:
                return self.calibrated[n]
        return None

    def compute_profile_for_model(self):
        want = self.spec.get("model", {}).get("compare", {}).get("compute_profile")
        if want:
            key = want.lstrip("@")
            return self.calibrated.get(key, None if want.startswith("@") else want)
        return None

    def _calibrate_entries(self):
        return {c["name"]: c for c in self.spec.get("model", {}).get("calibrate", [])}

    def curve_fabric(self, grid, i=None):
        """Fabric of the model curve for a grid (or for point i: the calibration whose `where`
        selects it, e.g. the fabric fitted at the point's own testbed rate)."""
        want = self.plot_cfg.get("curve_fabric")
        if want:
            return model.resolve(want, self.calibrated) if want.lstrip("@") in self.calibrated else want
        for n, c in self._calibrate_entries().items():
            if c.get("compute") or n not in self.calibrated:
                continue
            if c.get("grids") and grid not in c["grids"]:
                continue
            if i is not None and c.get("where"):
                p = self.t.params[i]
                ok = all(str(p.get(k)) in [str(x) for x in (v if isinstance(v, list) else [v])]
                         for k, v in c["where"].items())
                if not ok:
                    continue
            return self.calibrated[n]
        return None

    def add(self, path):
        if path:
            self.pngs.append(path)
        return path

    def png(self, name):
        return os.path.join(self.plots_dir, name)


def axis_label(k, v) -> str:
    """'no-overlap'=True reads better as 'overlap=off'."""
    k = k.split(".")[-1]
    if isinstance(v, bool) and k.startswith("no-"):
        return f"{k[3:]}={'off' if v else 'on'}"
    return f"{k}={_fmt(v)}"


def _fmt(v):
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float) and v == int(v):
        return str(int(v))
    return str(v)


# ---- model calls ---------------------------------------------------------------------------
def model_curve(ctx, bench: results.Bench, fabric: str):
    """busbw (pingpong: bandwidth) the model gives for the bench file's sizes, or None."""
    a = bench.attrs
    sizes = [int(s) for s in bench.size if s > 0]
    if not sizes:
        return None
    op = a.get("op", "allreduce")
    args = ["collective", "--op", op, "--ranks", int(a.get("nranks", 2)), "--nodes", int(a.get("nnodes", 1)),
            "--bytes", ",".join(str(s) for s in sizes), "--fabric", fabric, "--json"]
    if op == "sendrecv":
        pass  # one both-ways step in the model, whatever the bench's variant (mpi, pieces)
    elif op != "pingpong":
        args += ["--algo", a.get("algo", "ring")]
        if a.get("algo") == "ring":
            chunk = int(a.get("chunk_bytes_used", 0)) or int(a.get("chunk_bytes", 0))  # 0: auto, see _used
            args += ["--chunk-bytes", chunk, "--channels", int(a.get("channels", 1))]
    try:
        _, data = tools.run_model(ctx.bindir, args, os.path.join(ctx.dir, "model", "analyze.log"), want_json=True)
    except tools.ToolError as e:
        ctx.notes.append(f"model curve for {os.path.basename(bench.path)}: {e}")
        return None
    rows = data.get("results", [])
    busbw = np.array([r["busbw_GBps"] for r in rows], float)
    if int(a.get("busy_threads", 0)) > 0:
        # Measured while the host computed: the fabric's contention applies (time =
        # contention_us + contention x time alone, netmodel/README.md).
        try:
            _, fab = tools.run_model(ctx.bindir, ["fabrics", "--show", fabric, "--json"],
                                     os.path.join(ctx.dir, "model", "analyze.log"), want_json=True)
        except tools.ToolError as e:
            ctx.notes.append(f"model curve for {os.path.basename(bench.path)}: {e}")
            return None
        lv = fab["inter" if int(a.get("nnodes", 1)) > 1 else "intra"]
        t = np.array([r["time_us"] for r in rows], float)
        busbw = busbw * t / (lv.get("contention_us", 0.0) + lv.get("contention", 1.0) * t)
    return np.array([r["bytes"] for r in rows], float), busbw


def predict_run(ctx, tr: results.Train, fabric: str, compute_profile=None):
    """gradsync-model predict --json for exactly the configuration of a train file."""
    a = tr.attrs
    if a.get("compute") == "real":
        return compare_run(ctx, tr, fabric, compute_profile)
    nnodes = int(a.get("nnodes", 1))
    rpn = int(a.get("ranks_per_node", int(a.get("nranks", 1)) // max(1, nnodes)))
    args = ["predict", "--model", a["model"], "--fabric", fabric, "--nodes", nnodes, "--ranks-per-node", rpn,
            "--batch-per-rank", int(a.get("batch_per_rank", 32)), "--bucket-mb", a.get("bucket_mb", 25),
            "--first-bucket-mb", a.get("first_bucket_mb", 1), "--overlap", int(a.get("overlap", 1)),
            "--accumulate", int(a.get("accumulate", 1)), "--algo", a.get("algo", "ring"),
            "--chunk-bytes", int(a.get("chunk_bytes", 0)), "--channels", int(a.get("channels", 1)),
            "--compress", a.get("compress", "none"), "--precision", a.get("precision", "fp32"),
            "--loader-workers", int(a.get("loader_workers", 0)),
            "--data-time-us", float(a.get("data_time_s", 0.0)) * 1e6,
            "--optimizer", a.get("optimizer", "sgd"),
            "--compute-profile", compute_profile or a.get("compute_profile", "h200"), "--json"]
    try:
        _, data = tools.run_model(ctx.bindir, args, os.path.join(ctx.dir, "model", "analyze.log"), want_json=True)
    except tools.ToolError as e:
        return None, str(e)
    return data, None


def _compare_entry(r: dict) -> dict:
    """A gradsync-model compare --json run entry in predict --json's shape."""
    return dict(step_time_s=r["predicted_step_time_s"], data_s=r.get("predicted_data_s", 0.0),
                forward_s=r.get("predicted_forward_s", 0.0), backward_s=r.get("predicted_backward_s", 0.0),
                buckets=r.get("predicted_buckets", []), tool="compare")


def compared_prediction(ctx, tr: results.Train):
    """The [model] stage's own prediction of this run (model/compare.json, the same fabric,
    compute profile and kernel rates), or None when it did not compare it."""
    try:
        with open(os.path.join(ctx.dir, "model", "compare.json")) as fh:
            runs = json.load(fh).get("runs", [])
    except (OSError, json.JSONDecodeError):
        return None
    want = os.path.realpath(tr.path)
    for r in runs:
        if os.path.realpath(str(r.get("file", ""))) == want and r.get("predicted_buckets") is not None:
            return _compare_entry(r)
    return None


def compare_run(ctx, tr: results.Train, fabric: str, compute_profile=None):
    """A compute=real run (no zoo workload): gradsync-model compare --json predicts it from
    its measured compute and buckets; returns its run entry in predict's shape."""
    args = ["compare", tr.path, "--fabric", fabric, "--json"]
    if compute_profile:
        args += ["--compute-profile", compute_profile]
    try:
        _, data = tools.run_model(ctx.bindir, args, os.path.join(ctx.dir, "model", "analyze.log"), want_json=True)
    except tools.ToolError as e:
        return None, str(e)
    runs = data.get("runs") or []
    if not runs:
        return None, "compare returned no run"
    return _compare_entry(runs[0]), None


# ---- generic plots -------------------------------------------------------------------------
def plot_bench_grid(ctx, grid):
    idx = ctx.rows(grid)
    if not idx:
        ctx.notes.append(f"grid {grid}: no finished points, no busbw plot")
        return
    series, curves = [], []
    op = ctx.bench(idx[0]).op
    fabrics = set()
    for k, (label, members) in enumerate(ctx.groups(idx)):
        bs = [ctx.bench(i) for i in members]
        sizes = bs[0].size
        vals = np.median(np.array([b.busbw_median for b in bs if len(b.size) == len(sizes)]), axis=0)
        series.append((label, sizes, vals))
        fabric = ctx.curve_fabric(grid, members[0])
        if fabric:
            fabrics.add(os.path.basename(fabric))
            c = model_curve(ctx, bs[0], fabric)
            if c is not None:
                curves.append((label, c[0], c[1], k))
    a = ctx.bench(idx[0]).attrs
    where = f"{a.get('nranks')} ranks on {a.get('nnodes')} node(s)"
    busy = int(ctx.bench(idx[0]).attrs.get("busy_threads", 0)) > 0
    note = ("measured: from the median iteration time per size; "
            + (f"model: gradsync-model collective on {', '.join(sorted(fabrics))}"
               + (" with its contention (busy sweep)" if busy else "")
               if fabrics else "no calibrated fabric: measured only"))
    ylabel = "bandwidth (GB/s)" if op == "pingpong" else "bus bandwidth (GB/s)"
    title = f"{ctx.name}: {op} {'bandwidth' if op == 'pingpong' else 'busbw'} vs size ({where})"
    ctx.add(plots.busbw_vs_size(series, curves, ctx.png(f"busbw-{grid}.png"), title, ylabel, note))


def plot_train_grid(ctx, grid):
    idx = ctx.rows(grid)
    if not idx:
        ctx.notes.append(f"grid {grid}: no finished points, no train plots")
        return
    rows = []
    for label, members in ctx.groups(idx):
        comp = {k: ctx.median_metric(k, members) for k, _, _ in plots.PARTS}
        rows.append((label, comp, ctx.median_metric("step_time_s", members)))
    a = ctx.train(idx[0]).attrs
    title = (f"{ctx.name}: step time breakdown ({a.get('model')}, {a.get('compute')} compute, "
             f"{a.get('nranks')} ranks x batch {a.get('batch_per_rank')})")
    ctx.add(plots.step_breakdown(rows, ctx.png(f"breakdown-{grid}.png"), title))
    plot_timeline(ctx, grid, idx)
    if "compress" in {k for i in idx for k in ctx.swept(i)}:
        plot_compression(ctx, grid)


def pick_timeline_point(ctx, idx):
    want = ctx.plot_cfg.get("timeline", {})
    for i in idx:
        p = ctx.t.params[i]
        if all(str(p.get(k)) == str(v) for k, v in want.items()):
            return i
    return idx[0]


def plot_timeline(ctx, grid, idx):
    i = pick_timeline_point(ctx, idx)
    tr = ctx.train(i)
    step = tr.median_step()
    b = tr.buckets_of(step)
    if not b or not len(b.get("bucket", [])):
        ctx.notes.append(f"grid {grid}: {ctx.t.cols['label'][i]} has no /buckets rows, no timeline")
        return
    srow = {k: v[list(tr.steps["step"]).index(step)] for k, v in tr.steps.items()}
    bw0 = float(srow.get("data_s", 0)) + float(srow.get("forward_s", 0))
    measured = dict(
        label=f"measured: step {step} (the median step) of {ctx.label(i)}, "
              f"step time {1e3 * srow['step_time_s']:.1f} ms",
        buckets=[(int(k), int(n), r, s, e) for k, n, r, s, e in
                 zip(b["bucket"], b["bytes"], b["ready_s"], b["start_s"], b["end_s"])],
        backward=(bw0, bw0 + float(srow.get("backward_s", 0))), step_s=float(srow["step_time_s"]))
    predicted = None
    fabric = ctx.fabric_for_model()
    if fabric is None:
        ctx.notes.append("timeline: no fabric to predict with (no [model] calibration), measured only")
    else:
        data = compared_prediction(ctx, tr) if not ctx.plot_cfg.get("fabric") else None
        why = None
        if data is None:
            data, why = predict_run(ctx, tr, fabric, ctx.compute_profile_for_model())
        if data is None:
            ctx.notes.append(f"timeline: no prediction: {why}")
        else:
            pb = data.get("buckets", [])
            f0 = float(data.get("data_s", 0.0)) + float(data.get("forward_s", 0.0))
            predicted = dict(
                label=f"predicted: gradsync-model {data.get('tool', 'predict')} on {os.path.basename(fabric)}"
                      f"{' + compute ' + os.path.basename(ctx.compute_profile_for_model()) if ctx.compute_profile_for_model() else ''}"
                      f", step time {1e3 * data['step_time_s']:.1f} ms",
                buckets=[(k, int(x.get("wire_bytes", x.get("grad_bytes", 0))), x["ready_s"], x["start_s"], x["end_s"])
                         for k, x in enumerate(pb)],
                backward=(f0, f0 + float(data.get("backward_s", 0.0))), step_s=float(data["step_time_s"]))
    title = f"{ctx.name}: bucket timeline of one step ({tr.attrs.get('model')}, {ctx.label(i)})"
    ctx.timelines[grid] = (i, measured, predicted)
    ctx.add(plots.bucket_timeline(measured, predicted, ctx.png(f"timeline-{grid}.png"), title))


def plot_compression(ctx, grid):
    idx = ctx.rows(grid, status=None)
    rows = []
    for i in idx:
        lab = str(ctx.t.params[i].get("compress", "none"))
        if ctx.col("status")[i] != "ok":
            tail = (ctx.col("stderr_tail")[i] or "").strip().splitlines()
            msg = tail[-1] if tail else ctx.col("status")[i]
            msg = msg.split("error: ", 1)[-1].split("option --compress: ", 1)[-1]
            rows.append((lab, 0, 0, 0, msg))
            continue
        rows.append((lab, ctx.metric("bytes_sent", i), ctx.metric("final_eval_accuracy", i),
                     ctx.metric("step_time_s", i), None))
    a = ctx.train(ctx.rows(grid)[0]).attrs if ctx.rows(grid) else {}
    title = (f"{ctx.name}: compression — bytes vs accuracy vs step time "
             f"({a.get('model', '?')}, {a.get('nranks', '?')} ranks)")
    ctx.add(plots.compression(rows, ctx.png(f"compression-{grid}.png"), title))


def plot_compare(ctx):
    c = ctx.t.compare
    if not c:
        return
    files = [os.path.basename(str(f)) for f in c["file"]]
    labels = []
    by_file = {os.path.basename(ctx.t.cols["result"][i]): i for i in range(len(ctx.t))}
    repeats = "repeat" in ctx.t.cols and max(ctx.col("repeat"), default=0) > 0  # labels then say which
    keys = []
    for f in files:
        i = by_file.get(f)
        if i is None:
            labels.append(f)
            continue
        sw = ctx.swept(i)
        keys = keys or [axis_label(k, v).split("=")[0] for k, v in sw.items()]
        labels.append(("/".join(axis_label(k, v).split("=", 1)[1] for k, v in sw.items()) or ctx.label(i))
                      + (f" r{ctx.col('repeat')[i]}" if repeats else ""))
    fabric = ctx.spec.get("model", {}).get("compare", {}).get("fabric", "?")
    cp = ctx.spec.get("model", {}).get("compare", {}).get("compute_profile")
    title = f"{ctx.name}: predicted vs measured step time (fabric {fabric}{', compute ' + cp if cp else ''})"
    ctx.add(plots.predicted_vs_measured(c["measured_step_time_s"], c["predicted_step_time_s"], labels,
                                        ctx.png("compare.png"), title,
                                        label_key=("points: " + "/".join(keys)) if keys else None,
                                        spread=results.compare_spread(c)))


def analyze(out_dir: str, bindir: str, quiet: bool = False) -> Ctx:
    ctx = Ctx(out_dir, bindir)
    os.makedirs(ctx.plots_dir, exist_ok=True)
    for grid in ctx.t.grids():
        if ctx.program_of(grid) == "bench":
            plot_bench_grid(ctx, grid)
        else:
            plot_train_grid(ctx, grid)
    plot_compare(ctx)
    text = conclusions.write(ctx)
    with open(os.path.join(ctx.dir, "conclusions.md"), "w") as fh:
        fh.write(text)
    if not quiet:
        print(text)
        print(f"plots: {', '.join(os.path.relpath(p, ctx.dir) for p in ctx.pngs)} (in {ctx.dir})")
        print(f"conclusions: {os.path.join(ctx.dir, 'conclusions.md')}")
    return ctx
