"""Readers of the result files (schemas: results/README.md, the gradsync-train contract,
gradsync-model's --out files) and the key metrics a study table keeps of each."""
from __future__ import annotations

import math

import h5py
import numpy as np

# Metrics of a train point (medians over steps after warmup_steps), in this order.
TRAIN_METRICS = [
    ("step_time_s", "median step time, s"),
    ("comm_exposed_s", "median exposed communication, s"),
    ("comm_total_s", "median total communication, s"),
    ("data_s", "median data wait, s"),
    ("forward_s", "median forward, s"),
    ("backward_s", "median backward, s"),
    ("optimizer_s", "median optimizer, s"),
    ("encode_s", "median encode, s"),
    ("decode_s", "median decode, s"),
    ("bytes_sent", "median bytes sent per step and rank"),
    ("final_loss", "loss of the last step"),
    ("final_eval_accuracy", "evaluation accuracy at the end (NaN for emulated compute)"),
    ("compression_ratio", "gradient bytes / wire bytes"),
    ("num_buckets", "buckets per step"),
]
BENCH_METRICS = [
    ("avg_busbw_GBps", "mean busbw over sizes (pingpong: bandwidth), GB/s"),
    ("max_busbw_GBps", "largest busbw over sizes, GB/s"),
    ("nwrong", "wrong elements over the run (-1: not checked)"),
]


def _s(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray) and v.dtype.kind in "OS":
        return [x.decode() if isinstance(x, bytes) else str(x) for x in v]
    return v


def attrs(f) -> dict:
    return {k: _s(v) for k, v in f.attrs.items()}


def program_of(path: str) -> str:
    with h5py.File(path, "r") as f:
        return _s(f.attrs.get("program", ""))


def read_net(f):
    """/net of an open result file: (interface names, tx_bytes [ranks, I], rx_bytes), or None
    (files of the PyTorch bridge and older files have none; results/README.md)."""
    if "net" not in f or "interface" not in f["net"]:
        return None
    g = f["net"]
    return [_s(x) for x in g["interface"][:]], g["tx_bytes"][:], g["rx_bytes"][:]


# ---- gradsync-bench ----------------------------------------------------------------------
class Bench:
    """One gradsync-bench file: sizes, busbw (pingpong: bw) and median times."""

    def __init__(self, path: str):
        self.path = path
        with h5py.File(path, "r") as f:
            self.attrs = attrs(f)
            self.op = self.attrs.get("op", "")
            self.size = f["size_bytes"][:].astype(np.int64)
            if self.op == "pingpong":
                g = f["pingpong"]
                raw = g["half_rtt_us"][:]
                self.busbw = g["bw_GBps"][:]
                self.time_us_avg = g["half_rtt_us_avg"][:]
                nw = g["nwrong"][:]
            else:
                g = f["oop"]
                raw = g["time_us"][:]
                self.busbw = g["busbw_GBps"][:]
                self.time_us_avg = g["time_us_avg"][:]
                nw = g["nwrong"][:]
            self.time_us_median = np.median(raw, axis=1) if raw.size else np.full(len(self.size), np.nan)
            bf = float(self.attrs.get("bus_factor", 1.0))
            with np.errstate(divide="ignore", invalid="ignore"):
                # busbw from the median time: robust against one slow iteration
                self.busbw_median = np.where(self.time_us_median > 0,
                                             self.size / (self.time_us_median * 1e3) * bf, np.nan)
            self.nwrong = int(np.sum(nw)) if np.all(nw >= 0) else -1
            self.net = read_net(f)

    def interface_bytes(self) -> dict:
        """{interface: bytes sent, summed over ranks} ({} for files without /net)."""
        if not self.net:
            return {}
        names, tx, _ = self.net
        return {n: int(np.sum(np.maximum(tx[:, k], 0))) for k, n in enumerate(names)}

    def metrics(self) -> dict:
        bw = self.busbw[np.isfinite(self.busbw)]
        return {
            "avg_busbw_GBps": float(self.attrs.get("avg_busbw_GBps", np.nan)),
            "max_busbw_GBps": float(bw.max()) if bw.size else math.nan,
            "nwrong": float(self.nwrong),
        }


# ---- gradsync-train ----------------------------------------------------------------------
class Train:
    """One gradsync-train file: per-step, per-bucket, per-epoch tables and root attributes."""

    def __init__(self, path: str):
        self.path = path
        with h5py.File(path, "r") as f:
            self.attrs = attrs(f)
            self.steps = {k: f["steps"][k][:] for k in f["steps"]} if "steps" in f else {}
            # Rank 0's columns (/buckets/by_rank, every rank's, is a group of [rows, ranks]).
            self.buckets = ({k: v[:] for k, v in f["buckets"].items() if isinstance(v, h5py.Dataset)}
                            if "buckets" in f else {})
            self.epochs = {k: f["epochs"][k][:] for k in f["epochs"]} if "epochs" in f else {}
        self.warmup = int(self.attrs.get("warmup_steps", 0))
        # PowerSGD sends plain all-reduces before step `start` (start_powerSGD_iter): like
        # gradsync-model compare (netmodel/train_file.cpp), leave those steps out too when
        # the run has steps after them, so the medians are the compressed steady state.
        comp = str(self.attrs.get("compress") or "")
        if comp.startswith("powersgd"):
            for part in comp.split(":", 1)[-1].split(","):
                k, _, v = part.partition("=")
                if k.strip() == "start":
                    try:
                        start = int(v)
                    except ValueError:
                        break
                    n = len(self.steps.get("step_time_s", []))
                    if self.warmup < start < n:
                        self.warmup = start

    def steady(self, key: str) -> np.ndarray:
        """Values of /steps/<key> after the warm-up steps (all of them if that leaves none);
        for PowerSGD runs also after its uncompressed `start` steps (see __init__)."""
        v = self.steps.get(key)
        if v is None:
            return np.array([])
        return v[self.warmup:] if len(v) > self.warmup else v

    def median(self, key: str) -> float:
        v = self.steady(key)
        return float(np.median(v)) if v.size else math.nan

    def median_step(self) -> int:
        """The step (value of /steps/step) whose step time is the median of the steady ones."""
        st = self.steady("step_time_s")
        steps = self.steady("step")
        if not st.size:
            return -1
        i = int(np.argsort(st)[len(st) // 2])
        return int(steps[i])

    def buckets_of(self, step: int) -> dict:
        b = self.buckets
        if not b:
            return {}
        m = b["step"] == step
        return {k: v[m] for k, v in b.items()}

    def metrics(self) -> dict:
        out = {k: self.median(k) for k, _ in TRAIN_METRICS
               if k not in ("final_loss", "final_eval_accuracy", "compression_ratio", "num_buckets")}
        loss = self.steps.get("loss")
        out["final_loss"] = float(loss[-1]) if loss is not None and len(loss) else math.nan
        acc = self.attrs.get("final_eval_accuracy", math.nan)
        if (acc is None or not np.isfinite(acc)) and self.epochs.get("eval_accuracy") is not None \
                and len(self.epochs["eval_accuracy"]):
            acc = self.epochs["eval_accuracy"][-1]
        out["final_eval_accuracy"] = float(acc) if acc is not None else math.nan
        out["compression_ratio"] = float(self.attrs.get("compression_ratio", math.nan))
        out["num_buckets"] = float(self.attrs.get("num_buckets", math.nan))
        return out


def metrics_of(path: str, program: str) -> dict:
    return Bench(path).metrics() if program == "bench" else Train(path).metrics()


def metric_names(program: str) -> list:
    return [k for k, _ in (BENCH_METRICS if program == "bench" else TRAIN_METRICS)]


# ---- gradsync-model --out files -----------------------------------------------------------
def inside_words(inside, n) -> str:
    """', K of N inside their own steps' p10..p90': how many of N compared runs were predicted
    inside their own steps' 10th..90th percentile (compare's /compare/inside_spread, or its
    --json count); '' when the count is missing (files from before 2026-12-03)."""
    if inside is None or not n:
        return ""
    return f", {int(inside)} of {n} inside their own steps' p10..p90"


def per_configuration(runs, key_of) -> dict | None:
    """Repeats of one configuration taken together: compare --json's `runs` grouped by
    key_of(file) (a study point's grid and swept values), each group's median measured step
    time against its median predicted one. None when no configuration has two runs. Returns
    {configurations, repeats_min, repeats_max, median_abs_error_pct, p90_abs_error_pct,
    repeat_spread: {runs, median_abs_error_pct, p90_abs_error_pct} (each run of a configuration
    with repeats against the median of its other repeats' measured step times), rows:
    [{key, runs, measured_step_time_s, predicted_step_time_s, step_error_pct}]}."""
    groups = {}
    for r in runs or []:
        meas, pred = r.get("measured_step_time_s"), r.get("predicted_step_time_s")
        if meas is None or pred is None or not (meas > 0 and math.isfinite(pred)):
            continue
        groups.setdefault(key_of(r.get("file", "")), []).append((meas, pred))
    if not groups or max(len(v) for v in groups.values()) < 2:
        return None
    rows = []
    for key, v in groups.items():
        m = float(np.median([a for a, _ in v]))
        p = float(np.median([b for _, b in v]))
        rows.append({"key": key, "runs": len(v), "measured_step_time_s": m, "predicted_step_time_s": p,
                     "step_error_pct": 100.0 * (p - m) / m})
    err = np.abs([r["step_error_pct"] for r in rows])
    # The runs' own spread: each run against the median of its configuration's other repeats,
    # the scale against which a prediction's error on single runs is to be read (a target
    # far below it asks for more than the host repeats to).
    spread = [abs(100.0 * (float(np.median([a for j, (a, _) in enumerate(v) if j != i])) - meas) / meas)
              for v in groups.values() if len(v) >= 2 for i, (meas, _) in enumerate(v)]
    return {"configurations": len(rows), "repeats_min": min(r["runs"] for r in rows),
            "repeats_max": max(r["runs"] for r in rows),
            "median_abs_error_pct": float(np.median(err)), "p90_abs_error_pct": float(np.percentile(err, 90)),
            "repeat_spread": {"runs": len(spread), "median_abs_error_pct": float(np.median(spread)),
                             "p90_abs_error_pct": float(np.percentile(spread, 90))},
            "rows": rows}


def per_configuration_words(pc) -> str:
    """'; per configuration (median of 3 repeats, 12 configurations): median 2.1%, p90 4.0%'
    for per_configuration's result; '' for None."""
    if not pc:
        return ""
    reps = (f"{pc['repeats_min']}" if pc["repeats_min"] == pc["repeats_max"]
            else f"{pc['repeats_min']}-{pc['repeats_max']}")
    return (f"; per configuration (median of {reps} repeats, {pc['configurations']} configurations): "
            f"median {pc['median_abs_error_pct']:.1f}%, p90 {pc['p90_abs_error_pct']:.1f}%")


def repeat_spread_words(pc) -> str:
    """"the runs' own repeats: ..." for per_configuration's repeat_spread, said once per study
    (it belongs to the runs, not to a fabric); '' for None or a result without it."""
    sp = (pc or {}).get("repeat_spread")
    if not sp:
        return ""
    return (f"the runs' own repeats: each of {sp['runs']} runs against the median of its configuration's other "
            f"repeats, |difference| median {sp['median_abs_error_pct']:.1f}%, p90 {sp['p90_abs_error_pct']:.1f}% "
            f"(the run-to-run spread of this host and these launches, to read the errors against)")


def compare_spread(c):
    """(p10, p90, inside) per run of a /compare table, as plots.predicted_vs_measured's
    `spread` takes them; None for compare files from before 2026-12-03 (no spread)."""
    if "inside_spread" not in c:
        return None
    return c["measured_step_p10_s"], c["measured_step_p90_s"], c["inside_spread"]


def read_table(path: str, group: str) -> dict:
    """A table group of a gradsync-model file (/compare, /grid): name -> array (strings decoded)."""
    with h5py.File(path, "r") as f:
        g = f[group]
        return {k: np.array(_s(g[k][:])) if g[k].dtype.kind in "OS" else g[k][:]
                for k in g if isinstance(g[k], h5py.Dataset)}
