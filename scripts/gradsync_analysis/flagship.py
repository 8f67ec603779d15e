"""`scripts/study flagship`: the main job on localhost, in a few minutes.

  1. gradsync-bench: ping-pong and ring all-reduce sweeps on 2 local ranks
  2. gradsync-model calibrate: a fabric for this machine from the sweeps, one from three
     no-overlap training runs' own all-reduces (and a compute profile from step 3)
  3. gradsync-train: emulated ResNet-50 (A100 profile), bucket size x overlap
  4. gradsync-model compare: every training run predicted with exactly its configuration
  5. plots and conclusions; a predicted-vs-measured table at the end

It is experiments/flagship.toml run by the study runner (resumable: run it again to finish an
interrupted one; delete the folder to measure anew), then analyzed.
"""
from __future__ import annotations

import math
import os
import sys
import time

import numpy as np

from . import analyze, results, spec, tools
from . import conclusions as conclusions_mod
from .runner import Runner

TOML = os.path.join(tools.REPO, "experiments", "flagship.toml")


def prediction_table(ctx) -> str:
    """Markdown table: one row per compared run, columns `predicted` and `measured` (ms)."""
    c = ctx.t.compare
    if not c:
        return "(no comparison: see the notes above)"
    by_file = {os.path.basename(ctx.t.cols["result"][i]): i for i in range(len(ctx.t))}
    rows = []
    for k, f in enumerate(c["file"]):
        i = by_file.get(os.path.basename(str(f)))
        lab = ctx.label(i) if i is not None else os.path.basename(str(f))
        m, p = float(c["measured_step_time_s"][k]), float(c["predicted_step_time_s"][k])
        me, pe = float(c["measured_comm_exposed_s"][k]), float(c["predicted_comm_exposed_s"][k])
        # The run's own steps, p10..p90 in percent of their median (compare's spread; files
        # written before it have none).
        lo = hi = math.nan
        if "measured_step_p10_s" in c:
            lo, hi = float(c["measured_step_p10_s"][k]), float(c["measured_step_p90_s"][k])
        rows.append((lab, p, m, 100 * (p - m) / m, pe, me, 100 * (lo / m - 1), 100 * (hi / m - 1)))
    w = max(len(r[0]) for r in rows)
    out = [f"{'run':<{w}} | {'predicted':>9} | {'measured':>8} | {'error':>7} | {'steps p10..p90':>14} | "
           f"{'predicted exposed comm':>22} | {'measured exposed comm':>21}",
           f"{'':-<{w}}-|-{'':->9}-|-{'':->8}-|-{'':->7}-|-{'':->14}-|-{'':->22}-|-{'':->21}"]
    for lab, p, m, e, pe, me, lo, hi in rows:
        spread = f"{lo:+.1f}..{hi:+.1f}%" if math.isfinite(lo) else "n/a"
        out.append(f"{lab:<{w}} | {1e3 * p:>6.1f} ms | {1e3 * m:>5.1f} ms | {e:>+6.1f}% | {spread:>14} | "
                   f"{1e3 * pe:>19.1f} ms | {1e3 * me:>18.1f} ms")
    err = np.abs([r[3] for r in rows])
    inside = int(np.sum(c["inside_spread"])) if "inside_spread" in c else None
    out.append(f"step time |error|: median {np.median(err):.1f}%, p90 {np.percentile(err, 90):.1f}%, "
               f"max {err.max():.1f}% over {len(rows)} runs" + results.inside_words(inside, len(rows)))
    return "\n".join(out)


def run(out_dir, bindir, quick=False) -> int:
    study = spec.load(TOML, "quick" if quick else None)
    out = os.path.abspath(out_dir or os.path.join(tools.REPO, "results",
                                                  f"flagship-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"))
    print(f"== gradsync flagship: bench -> calibrate -> train grid -> compare -> plots ({out})")
    t0 = time.monotonic()
    rc = Runner(study, out, bindir).run()
    if not os.path.exists(os.path.join(out, "study.h5")):
        return rc or 1
    ctx = analyze.analyze(out, bindir, quiet=True)
    with open(os.path.join(out, "conclusions.md")) as fh:
        conclusions = fh.read()
    concl = conclusions.split("## Conclusion", 1)[-1].split("\n## ", 1)[0].strip() if "## Conclusion" in conclusions else ""
    concl = concl.split("```", 1)[0].strip()   # the table comes below
    if concl:
        print("\n" + concl)
    print("\nPredicted vs measured step time (gradsync-model compare on the fabric fitted to three "
          "no-overlap runs' all-reduces, and the fitted compute profile):\n")
    print(prediction_table(ctx))
    for line in conclusions_mod.also_compare_lines(out):
        print(line[0].upper() + line[1:])
    print(f"\nFiles ({time.monotonic() - t0:.0f} s):")
    print(f"  study table      {os.path.join(out, 'study.h5')}")
    print(f"  results          {out}/{{pingpong,allreduce,train}}/*.h5")
    print(f"  fitted fabrics   {os.path.join(out, 'model', 'runs.toml')} (compared), "
          f"{os.path.join(out, 'model', 'local.toml')} (sweeps only)")
    print(f"  compute profile  {os.path.join(out, 'model', 'local-compute.toml')}")
    print(f"  comparison       {os.path.join(out, 'model', 'compare.h5')}")
    print(f"  plots            {', '.join(os.path.relpath(p, out) for p in ctx.pngs)}")
    print(f"  conclusions      {os.path.join(out, 'conclusions.md')}")
    sys.stdout.flush()
    return rc
