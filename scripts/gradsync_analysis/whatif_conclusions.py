"""Conclusion writer of the torch-whatif study (experiments/torch-whatif.toml).

The study records PyTorch DDP runs on one host (the `local` grid) and on two hosts joined by
a shaped link (the `train` grid), and the model section predicts every two-host run from a
one-host run's recorded compute (compare --compute-from: model/compare-compute-from.json)
and from its own (model/compare.json). Per configuration (bucket cap x hook), medians over
its repeats: the measured two-host step, the what-if's, their error, and how much slower the
link made the step, measured against predicted (both over the one-host reference's step)."""
from __future__ import annotations

import json
import math
import os

import numpy as np

from .conclusions import ms, writer


def _load(study_dir, name):
    try:
        with open(os.path.join(study_dir, "model", name)) as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError):
        return None


def hook_of(compress: str) -> str:
    """The PyTorch hook a recorded run's compress spec names (powersgd:rank=4,... -> powersgd:rank=4)."""
    if compress.startswith("powersgd"):
        rank = [kv for kv in compress.split(":", 1)[-1].split(",") if kv.startswith("rank=")]
        return "powersgd:" + rank[0] if rank else "powersgd"
    return compress


def by_config(d) -> dict:
    """{(bucket_mb, hook): ([measured], [predicted])} over the runs of a compare JSON."""
    out = {}
    for r in d.get("runs", []) if d else []:
        key = (float(r["bucket_mb"]), hook_of(str(r["compress"])))
        m, p = out.setdefault(key, ([], []))
        m.append(float(r["measured_step_time_s"]))
        p.append(float(r["predicted_step_time_s"]))
    return out


def abs_errors(d):
    return np.array([abs(float(r["step_error_pct"])) for r in d.get("runs", [])]) if d else np.array([])


@writer("torch-whatif")
def torch_whatif(ctx):
    wi = _load(ctx.dir, "compare-compute-from.json")
    own = _load(ctx.dir, "compare.json")
    if not wi or not wi.get("runs"):
        return "No what-if comparison (model/compare-compute-from.json) was made: see the model section."
    ref = wi.get("compute_from") or ""
    ref_step = math.nan
    for i in ctx.rows("local"):
        if os.path.basename(str(ctx.t.cols["result"][i])) == os.path.basename(ref):
            ref_step = float(ctx.t.cols["step_time_s"][i])
    wcfg, ocfg = by_config(wi), by_config(own)
    lines = [f"Every two-host run predicted from the one-host run `{os.path.relpath(ref, ctx.dir)}` "
             f"(step {ms(ref_step)} with both ranks on one host): its recorded steps replayed on "
             f"2 nodes x 1 rank over the fabric fitted to the torch bench on the link "
             f"(`gradsync-model compare --compute-from`; `gradsync-model predict --from-run` "
             f"answers the same for any fabric and shape).", ""]
    e = abs_errors(wi)
    lines.append(f"- What-if, {e.size} runs: step time |error| median {np.median(e):.1f}%, "
                 f"p90 {np.percentile(e, 90):.1f}%.")
    eo = abs_errors(own)
    if eo.size:
        lines.append(f"- Each run's own compute (the fabric alone checked), {eo.size} runs: median "
                     f"{np.median(eo):.1f}%, p90 {np.percentile(eo, 90):.1f}%.")
    lines += ["", "| bucket cap | hook | two hosts, measured | what-if | error | own compute | "
                  "slowdown over one host, measured / what-if |", "|---|---|---|---|---|---|---|"]
    for key in sorted(wcfg):
        m, p = (float(np.median(v)) for v in wcfg[key])
        om, op = (float(np.median(v)) for v in ocfg[key]) if key in ocfg else (math.nan, math.nan)
        slow = (f"{m / ref_step:.2f}x / {p / ref_step:.2f}x" if math.isfinite(ref_step) and ref_step > 0
                else "n/a")
        own_err = f"{100 * (op - om) / om:+.1f}%" if math.isfinite(om) and om > 0 else "n/a"
        lines.append(f"| {key[0]:g} MB | {key[1]} | {ms(m)} | {ms(p)} | {100 * (p - m) / m:+.1f}% | {own_err} "
                     f"| {slow} |")
    return "\n".join(lines)
