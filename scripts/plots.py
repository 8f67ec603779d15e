#!/usr/bin/python3
"""scripts/plots.py — plots of gradsync result files, one PNG per command (matplotlib, Agg).

  plots.py busbw BENCH.h5... [--fabric F] [-o busbw.png]
        busbw (pingpong: bandwidth) vs size, one line per file, with the model's curve on
        fabric F (gradsync-model collective; a built-in name or a TOML from calibrate)
  plots.py breakdown TRAIN.h5... [-o breakdown.png]
        step-time breakdown: data, forward, backward, exposed comm, optimizer (medians)
  plots.py timeline TRAIN.h5 [--step N] [--fabric F] [--compute-profile P] [-o timeline.png]
        one step's buckets (Gantt): measured, and predicted by gradsync-model predict on F
  plots.py scatter REPORT.h5 [-o compare.png]
        predicted vs measured step time from gradsync-model compare --out, ±5% band
  plots.py compression TRAIN.h5... [-o compression.png]
        bytes per step vs final accuracy vs step time, one row per file (its compressor)
  plots.py study DIR
        everything for a study folder (same as scripts/study analyze DIR)

Programs (gradsync-model) come from --bin, else $GRADSYNC_BIN, else build/bin. Needs
Debian's /usr/bin/python3 (python3-h5py, python3-matplotlib, python3-numpy).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gradsync_analysis import analyze, plots, results, tools  # noqa: E402


class _Ctx:
    """The little of analyze.Ctx that the model helpers need, for loose files."""

    def __init__(self, bindir, out):
        self.bindir = bindir
        self.dir = os.path.dirname(os.path.abspath(out))
        self.notes = []


def _label(path, others=()):
    """File stem; with its folder when another file of the same command has the same stem."""
    stem = os.path.splitext(os.path.basename(path))[0]
    if sum(1 for o in others if os.path.splitext(os.path.basename(o))[0] == stem) > 1:
        return f"{os.path.basename(os.path.dirname(os.path.abspath(path)))}/{stem}"
    return stem


def cmd_busbw(a):
    ctx = _Ctx(tools.bin_dir(a.bin), a.output)
    series, curves = [], []
    for k, f in enumerate(a.files):
        b = results.Bench(f)
        series.append((_label(f, a.files), b.size, b.busbw_median))
        if a.fabric:
            c = analyze.model_curve(ctx, b, a.fabric)
            if c is not None:
                curves.append((_label(f, a.files), c[0], c[1], k))
    b0 = results.Bench(a.files[0])
    ylabel = "bandwidth (GB/s)" if b0.op == "pingpong" else "bus bandwidth (GB/s)"
    note = ("measured: from the median iteration time per size"
            + (f"; model: fabric {os.path.basename(a.fabric)}" if a.fabric else ""))
    title = a.title or f"{b0.op}: {b0.attrs.get('nranks')} ranks on {b0.attrs.get('nnodes')} node(s)"
    return plots.busbw_vs_size(series, curves, a.output, title, ylabel, note)


def cmd_breakdown(a):
    rows = []
    for f in a.files:
        t = results.Train(f)
        comp = {k: t.median(k) for k, _, _ in plots.PARTS}
        rows.append((_label(f, a.files), comp, t.median("step_time_s")))
    return plots.step_breakdown(rows, a.output, a.title or "step time breakdown")


def cmd_timeline(a):
    t = results.Train(a.file)
    step = a.step if a.step is not None else t.median_step()
    b = t.buckets_of(step)
    if not b or not len(b.get("bucket", [])):
        raise SystemExit(f"plots.py: {a.file} has no /buckets rows for step {step}")
    srow = {k: v[list(t.steps["step"]).index(step)] for k, v in t.steps.items()}
    bw0 = float(srow.get("data_s", 0)) + float(srow.get("forward_s", 0))
    measured = dict(label=f"measured: step {step} of {_label(a.file)}, step time {1e3 * srow['step_time_s']:.1f} ms",
                    buckets=[(int(k), int(n), r, s, e) for k, n, r, s, e in
                             zip(b["bucket"], b["bytes"], b["ready_s"], b["start_s"], b["end_s"])],
                    backward=(bw0, bw0 + float(srow.get("backward_s", 0))), step_s=float(srow["step_time_s"]))
    predicted = None
    if a.fabric:
        ctx = _Ctx(tools.bin_dir(a.bin), a.output)
        os.makedirs(os.path.join(ctx.dir, "model"), exist_ok=True)
        data, why = analyze.predict_run(ctx, t, a.fabric, a.compute_profile)
        if data is None:
            print(f"plots.py: no prediction: {why}", file=sys.stderr)
        else:
            f0 = float(data.get("data_s", 0.0)) + float(data.get("forward_s", 0.0))
            predicted = dict(label=f"predicted on {a.fabric}, step time {1e3 * data['step_time_s']:.1f} ms",
                             buckets=[(k, int(x.get("wire_bytes", 0)), x["ready_s"], x["start_s"], x["end_s"])
                                      for k, x in enumerate(data.get("buckets", []))],
                             backward=(f0, f0 + float(data.get("backward_s", 0.0))), step_s=float(data["step_time_s"]))
    return plots.bucket_timeline(measured, predicted, a.output, a.title or f"bucket timeline ({t.attrs.get('model')})")


def cmd_scatter(a):
    c = results.read_table(a.report, "compare")
    labels = [_label(str(f)) for f in c["file"]]
    return plots.predicted_vs_measured(c["measured_step_time_s"], c["predicted_step_time_s"], labels, a.output,
                                       a.title or "predicted vs measured step time",
                                       spread=results.compare_spread(c))


def cmd_compression(a):
    rows = []
    for f in a.files:
        t = results.Train(f)
        m = t.metrics()
        rows.append((str(t.attrs.get("compress", _label(f))), m["bytes_sent"], m["final_eval_accuracy"],
                     m["step_time_s"], None))
    return plots.compression(rows, a.output, a.title or "compression: bytes vs accuracy vs step time")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="plots.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, default_out):
        p.add_argument("-o", "--output", default=default_out)
        p.add_argument("--title")
        p.add_argument("--bin")

    p = sub.add_parser("busbw")
    p.add_argument("files", nargs="+")
    p.add_argument("--fabric")
    common(p, "busbw.png")
    p = sub.add_parser("breakdown")
    p.add_argument("files", nargs="+")
    common(p, "breakdown.png")
    p = sub.add_parser("timeline")
    p.add_argument("file")
    p.add_argument("--step", type=int)
    p.add_argument("--fabric")
    p.add_argument("--compute-profile")
    common(p, "timeline.png")
    p = sub.add_parser("scatter")
    p.add_argument("report")
    common(p, "compare.png")
    p = sub.add_parser("compression")
    p.add_argument("files", nargs="+")
    common(p, "compression.png")
    p = sub.add_parser("study")
    p.add_argument("dir")
    p.add_argument("--bin")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "study":
            analyze.analyze(a.dir, tools.bin_dir(a.bin))
            return 0
        out = {"busbw": cmd_busbw, "breakdown": cmd_breakdown, "timeline": cmd_timeline, "scatter": cmd_scatter,
               "compression": cmd_compression}[a.cmd](a)
    except (OSError, KeyError, tools.ToolError) as e:
        print(f"plots.py: error: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
