"""DIR/study.h5: one table of a study's points (written atomically: atomicfile.atomic_h5).

Layout (P points, S distinct bench sizes):

  /                      attrs: schema_version, program ("gradsync-study"), study, description,
                         spec_path, spec_text, scale, launcher, created_utc, axes (swept keys),
                         points_total, points_ok, points_failed, points_pending
  /size_bytes            [S] int64     every message size of the bench points, sorted
  /points/<axis>         [P]           one column per swept key (float64 with NaN, int64 with -1
                                       for booleans 0/1, or string with "" where a grid lacks it)
  /points/id             [P] string    "<grid>/<label>" (label: file stem of the result)
  /points/grid, program, label, params_json (every option of the point, JSON), command,
          result (path relative to DIR), status (ok|failed|timeout|pending), exit_status
          (-1: none), reused (1: the result existed and was not run again), wall_s,
          ranks, repeat, stderr_tail
  /points/<metric>       [P] float64   key metrics (NaN where they do not apply):
                         bench: avg_busbw_GBps, max_busbw_GBps, nwrong;
                         train: step_time_s, comm_exposed_s, comm_total_s, data_s, forward_s,
                         backward_s, optimizer_s, encode_s, decode_s (medians after warm-up),
                         bytes_sent (per step and rank), final_loss, final_eval_accuracy,
                         compression_ratio, num_buckets
  /points/busbw_GBps     [P, S] float64  bench: busbw per size (pingpong: bandwidth), NaN elsewhere
  /points/time_us        [P, S] float64  bench: median time per size, microseconds
  /model                 attrs: fabrics (names), fabric_files, compute_profiles, compare_file,
                         predict_files, errors (what could not be done, with the reason)
  /model/compare/<col>   a copy of gradsync-model compare's table (when [model.compare] ran)
Every dataset carries a `description` attribute.
"""
from __future__ import annotations

import json
import math
import os
import time

import h5py
import numpy as np

from . import results
from .atomicfile import atomic_h5

STR = h5py.string_dtype()


def _column(values):
    vals = [v for v in values if v is not None]
    if vals and all(isinstance(v, bool) for v in vals):
        return np.array([-1 if v is None else int(v) for v in values], dtype=np.int64)
    if vals and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
        return np.array([math.nan if v is None else float(v) for v in values], dtype=np.float64)
    return np.array(["" if v is None else str(v) for v in values], dtype=object)


def write(path: str, study, points, records, model_info: dict | None = None):
    """records[i] (dict) belongs to points[i]: status, exit_status, reused, wall_s, command,
    stderr_tail, metrics (dict), bench (results.Bench or None)."""
    sizes = sorted({int(s) for r in records if r.get("bench") is not None for s in r["bench"].size})
    sidx = {s: i for i, s in enumerate(sizes)}
    P, S = len(points), len(sizes)
    with atomic_h5(path) as f:
        a = f.attrs
        a["schema_version"] = 1
        a["program"] = "gradsync-study"
        a["study"] = study.name
        a["description"] = study.description
        a["spec_path"] = study.path
        a["spec_text"] = study.text
        a["scale"] = study.scale
        a["launcher"] = study.launcher
        a["created_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        axes = study.axes()
        a.create("axes", axes, dtype=STR) if axes else a.create("axes", np.array([], dtype=object), dtype=STR)
        statuses = [r.get("status", "pending") for r in records]
        a["points_total"] = P
        for s in ("ok", "failed", "pending"):
            a[f"points_{s}"] = sum(1 for x in statuses if x == s or (s == "failed" and x == "timeout"))
        ds = f.create_dataset("size_bytes", data=np.array(sizes, dtype=np.int64))
        ds.attrs["description"] = "every message size of the bench points (bytes), sorted"
        g = f.create_group("points")

        def put(name, data, desc, kind):
            if isinstance(data, np.ndarray) and data.dtype == object:
                d = g.create_dataset(name, data=data, dtype=STR)
            else:
                d = g.create_dataset(name, data=data)
            d.attrs["description"] = desc
            d.attrs["kind"] = kind

        for ax in axes:
            put(ax, _column([p.swept.get(ax) for p in points]), f"swept option '{ax}'", "axis")
        meta = [
            ("id", [f"{p.grid}/{p.label}" for p in points], "grid/label of the point"),
            ("grid", [p.grid for p in points], "grid of the study the point belongs to"),
            ("program", [p.program for p in points], "bench or train"),
            ("label", [p.label for p in points], "the point's name (file stem of its result)"),
            ("params_json", [json.dumps(p.params, sort_keys=True) for p in points],
             "every option of the point (fixed and swept), JSON"),
            ("command", [r.get("command", "") for r in records], "the command line that ran (or would run)"),
            ("result", [p.result_relpath() for p in points], "result file, relative to the study folder"),
            ("status", statuses, "ok | failed | timeout | pending (not run)"),
            ("stderr_tail", [r.get("stderr_tail", "") for r in records],
             "last lines of the point's stderr when it failed"),
        ]
        for name, vals, desc in meta:
            put(name, np.array(vals, dtype=object), desc, "meta")
        put("exit_status", np.array([r.get("exit_status", -1) for r in records], dtype=np.int64),
            "exit status of the point's command (-1: not run now)", "meta")
        put("reused", np.array([int(r.get("reused", False)) for r in records], dtype=np.int64),
            "1: the result existed and was not run again", "meta")
        put("wall_s", np.array([r.get("wall_s", math.nan) for r in records], dtype=np.float64),
            "wall time of the point's command, s (NaN when reused or not run)", "meta")
        put("ranks", np.array([p.ranks for p in points], dtype=np.int64), "MPI ranks", "meta")
        put("repeat", np.array([p.repeat for p in points], dtype=np.int64), "repeat index", "meta")
        descs = dict(results.BENCH_METRICS + results.TRAIN_METRICS)
        for m, desc in results.BENCH_METRICS + results.TRAIN_METRICS:
            col = np.array([(r.get("metrics") or {}).get(m, math.nan) for r in records], dtype=np.float64)
            put(m, col, descs[m], "metric")
        bw = np.full((P, S), np.nan)
        tu = np.full((P, S), np.nan)
        for i, r in enumerate(records):
            b = r.get("bench")
            if b is None:
                continue
            for s, v, t in zip(b.size, b.busbw, b.time_us_median):
                bw[i, sidx[int(s)]] = v
                tu[i, sidx[int(s)]] = t
        put("busbw_GBps", bw, "bench: busbw per size (/size_bytes), GB/s (pingpong: bandwidth)", "metric")
        put("time_us", tu, "bench: median time per size, microseconds", "metric")

        mg = f.create_group("model")
        info = model_info or {}
        for k in ("fabrics", "fabric_files", "compute_profiles", "predict_files", "errors"):
            mg.attrs.create(k, np.array(info.get(k, []), dtype=object), dtype=STR)
        mg.attrs["compare_file"] = info.get("compare_file", "")
        if info.get("compare_table"):
            cg = mg.create_group("compare")
            for k, v in info["compare_table"].items():
                if v.dtype.kind in "OSU":
                    cg.create_dataset(k, data=np.array([str(x) for x in v], dtype=object), dtype=STR)
                else:
                    cg.create_dataset(k, data=v)


class StudyTable:
    """study.h5 read back: columns as numpy arrays, attributes decoded."""

    def __init__(self, path: str):
        self.path = path
        self.dir = os.path.dirname(os.path.abspath(path))
        with h5py.File(path, "r") as f:
            self.attrs = results.attrs(f)
            self.size_bytes = f["size_bytes"][:]
            self.cols = {}
            self.kinds = {}
            for k in f["points"]:
                d = f["points"][k]
                v = d[...]
                if d.dtype.kind == "O":
                    v = np.array([x.decode() if isinstance(x, bytes) else str(x) for x in v], dtype=object)
                self.cols[k] = v
                self.kinds[k] = results._s(d.attrs.get("kind", ""))
            self.model = results.attrs(f["model"])
            self.compare = ({k: results._s(f["model/compare"][k][:]) for k in f["model/compare"]}
                            if "model/compare" in f else None)
        self.params = [json.loads(s) for s in self.cols["params_json"]]
        axes = self.attrs.get("axes", [])
        self.axes = list(axes) if not isinstance(axes, str) else [axes]

    def __len__(self):
        return len(self.cols["id"])

    def rows(self, grid: str | None = None, program: str | None = None, status: str | None = "ok"):
        idx = []
        for i in range(len(self)):
            if grid is not None and self.cols["grid"][i] != grid:
                continue
            if program is not None and self.cols["program"][i] != program:
                continue
            if status is not None and self.cols["status"][i] != status:
                continue
            idx.append(i)
        return idx

    def result_path(self, i: int) -> str:
        return os.path.join(self.dir, self.cols["result"][i])

    def grids(self):
        seen = []
        for g in self.cols["grid"]:
            if g not in seen:
                seen.append(g)
        return seen
