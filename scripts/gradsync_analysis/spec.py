"""Study definitions (experiments/*.toml): reading, validating, expanding into points.

A study is one or more *grids*. A grid runs one program (``bench`` or ``train``) over the
cross product of its swept options, each combination ``repeats`` times (alternating: the
whole grid once, then again). Keys of ``fixed``
and ``sweep`` are the program's own options (``chunk-bytes = "4M"`` -> ``--chunk-bytes 4M``,
one-letter keys -> ``-b 1K``; ``true`` -> the bare flag, ``false`` -> left out), except for
these reserved keys, which set up the launch instead:

  ranks              MPI ranks of the point (default: the study's ``ranks``)
  mca.<name>         an Open MPI MCA parameter (``--mca name value``; env OMPI_MCA_name on Slurm)
  env.<VAR>          an environment variable of the run
  net                testbed NIC(s) to use: 1, 2, "both" or "default" (Open MPI's own choice;
                     ``testbed.sh run --net``)
  testbed.<key>      testbed setting of the point: hosts, rate, nics, ranks_per_host, burst, docker,
                     cc (the hosts' TCP congestion control, ``testbed.sh up --cc``; default cubic)
                     (rate and burst: one value, or one per NIC as "1gbit,200mbit" or a list)
                     (points are grouped by testbed setting; the testbed is brought up again
                     between groups)

The format is documented in experiments/README.md.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import math
import os
import re
import tomllib
from typing import Any

PROGRAMS = {"bench": "gradsync-bench", "train": "gradsync-train"}
# runtime = "torch": the same two kinds of point run by the PyTorch bridge (scripts/
# gradsync_torch, through scripts/torchrun locally or srun under Slurm); their results are
# gradsync-bench / gradsync-train files, so everything after the run is shared.
RUNTIMES = ("gradsync", "torch")
TORCH_MODULES = {"bench": "gradsync_torch.bench", "train": "gradsync_torch.example"}
# tc rate units, as scripts/testbed.sh's rate_bytes_per_s reads them (bytes per second).
_RATE_UNITS = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "tbit": 1e12 / 8,
               "bps": 1, "kbps": 1024, "mbps": 1048576, "gbps": 1073741824}


def rate_Bps(rate: str) -> float:
    """A testbed rate ("1gbit", "200mbit"; tc's units) in bytes per second; NaN if it is none."""
    r = str(rate).strip().lower()
    for unit in sorted(_RATE_UNITS, key=len, reverse=True):
        if r.endswith(unit):
            try:
                return float(r[: -len(unit)]) * _RATE_UNITS[unit]
            except ValueError:
                return math.nan
    return math.nan


LAUNCHERS = ("local", "testbed", "slurm")
TESTBED_KEYS = ("hosts", "rate", "nics", "ranks_per_host", "burst", "name", "subnet", "docker", "cc")
TOP_KEYS = {"name", "description", "claim", "launcher", "runtime", "ranks", "repeats", "timeout_s", "analysis",
            "interleave", "testbed", "grid", "program", "fixed", "sweep", "model", "scale", "plots", "notes"}
GRID_KEYS = {"name", "program", "fixed", "sweep", "ranks", "repeats", "timeout_s", "description"}


class SpecError(Exception):
    """A study file that cannot be used; the message names the file and the key."""


def _flatten(d: dict, prefix: str = "") -> dict:
    """{"mca": {"btl_tcp_links": 2}} -> {"mca.btl_tcp_links": 2} (TOML dotted keys)."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def fmt_value(v: Any) -> str:
    """How a TOML value is written on a command line."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(v) if v != int(v) else str(int(v)) if abs(v) < 1e15 else repr(v)
    return str(v)


def _label_part(v: Any) -> str:
    s = fmt_value(v) if not isinstance(v, bool) else ("on" if v else "off")
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", s).strip("-") or "x"


@dataclasses.dataclass
class Grid:
    name: str
    program: str                 # bench | train
    fixed: dict                  # flattened
    sweep: dict                  # flattened: key -> list of values (order kept)
    ranks: int
    repeats: int
    timeout_s: float
    ranks_fixed: bool = False    # the grid names its own ranks: --ranks does not change it


@dataclasses.dataclass
class Point:
    index: int                   # 0-based position in the study's plan
    grid: str
    program: str
    params: dict                 # fixed + swept values (flattened keys)
    swept: dict                  # only the swept values (the table's columns)
    repeat: int
    label: str                   # file stem, unique within the grid
    ranks: int
    timeout_s: float

    @property
    def options(self) -> dict:
        """Program options (reserved keys removed)."""
        return {k: v for k, v in self.params.items() if not _reserved(k)}

    @property
    def mca(self) -> dict:
        return {k[4:]: v for k, v in self.params.items() if k.startswith("mca.")}

    @property
    def env(self) -> dict:
        return {k[4:]: fmt_value(v) for k, v in self.params.items() if k.startswith("env.")}

    @property
    def net(self):
        return self.params.get("net")

    def result_relpath(self) -> str:
        return os.path.join(self.grid, self.label + ".h5")


def _reserved(key: str) -> bool:
    return key in ("ranks", "net") or key.startswith(("mca.", "env.", "testbed."))


@dataclasses.dataclass
class Study:
    path: str
    name: str
    description: str
    launcher: str
    ranks: int
    repeats: int
    timeout_s: float
    analysis: str
    testbed: dict
    grids: list
    model: dict
    plots: dict
    raw: dict
    text: str
    scale: str
    runtime: str = "gradsync"
    interleave: tuple = ()       # grid names whose repeats run round by round together

    def points(self) -> list:
        def round_of(g, r):
            """Repeat r of grid g: every combination once, as (grid, repeat, swept)."""
            keys = list(g.sweep)
            combos = itertools.product(*[g.sweep[k] for k in keys]) if keys else [()]
            return [(g, r, dict(zip(keys, combo))) for combo in combos]

        # Repeats alternate (the whole grid once, then again), so a drift of the host over the
        # grid's minutes falls on all combinations alike. The grids run in file order, except
        # that the `interleave` grids run as one block at the first one's place, round by
        # round (repeat 0 of each, then repeat 1 of each, ...).
        plan = []
        inter = [g for g in self.grids if g.name in self.interleave]
        for g in self.grids:
            if g.name not in self.interleave:
                for r in range(g.repeats):
                    plan += round_of(g, r)
            elif g is inter[0]:
                for r in range(max(x.repeats for x in inter)):
                    for x in inter:
                        if r < x.repeats:
                            plan += round_of(x, r)
        pts = []
        for g, r, swept in plan:
            params = dict(g.fixed)
            params.update(swept)
            ranks = int(params.get("ranks", g.ranks))
            parts = [f"{_label_part(k.split('.')[-1])}_{_label_part(v)}" for k, v in swept.items()]
            if g.repeats > 1:
                parts.append(f"r{r}")
            label = "__".join(parts) or "run"
            if len(label) > 150:
                label = label[:120] + "-" + hashlib.sha1(label.encode()).hexdigest()[:10]
            pts.append(Point(len(pts), g.name, g.program, params, swept, r, label, ranks, g.timeout_s))
        return pts

    def testbed_config(self, point: Point) -> dict:
        """The testbed the point needs (study [testbed] with the point's testbed.* keys)."""
        cfg = {"hosts": 2, "rate": "1gbit", "nics": 1, "ranks_per_host": 1, "name": "study",
               "subnet": "10.77.50"}
        cfg.update(self.testbed)
        for k, v in point.params.items():
            if k.startswith("testbed."):
                cfg[k[len("testbed."):]] = v
        for k in ("rate", "burst"):  # one value per NIC: "1gbit,200mbit" as testbed.sh takes it
            if isinstance(cfg.get(k), list):
                cfg[k] = ",".join(fmt_value(x) for x in cfg[k])
        return cfg

    def axes(self) -> list:
        """Every swept key over all grids, in order of first appearance."""
        seen = []
        for g in self.grids:
            for k in g.sweep:
                if k not in seen:
                    seen.append(k)
        return seen


def load(path: str, scale: str | None = None) -> Study:
    """Reads and checks a study file; ``scale`` applies ``[scale.<name>]`` overrides."""
    try:
        with open(path, "rb") as fh:
            blob = fh.read()
        raw = tomllib.loads(blob.decode())
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file")
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {e}")
    where = os.path.basename(path)

    def bad(msg):
        raise SpecError(f"{where}: {msg}")

    unknown = set(raw) - TOP_KEYS
    if unknown:
        bad(f"unknown key(s) {sorted(unknown)} (allowed: {sorted(TOP_KEYS)})")
    if scale:
        scales = raw.get("scale", {})
        if scale not in scales:
            bad(f"no [scale.{scale}] section (has: {sorted(scales) or 'none'})")
        over = dict(scales[scale])
        grid_over = over.pop("grids", {})
        raw = _deep_merge(raw, over)
        if grid_over:
            grids = raw.get("grid") or []
            names = [g.get("name", g.get("program")) for g in grids]
            for gname, gover in grid_over.items():
                if gname not in names:
                    bad(f"[scale.{scale}.grids.{gname}]: no grid named '{gname}' (grids: {names})")
                i = names.index(gname)
                grids[i] = _deep_merge(grids[i], gover)
    name = raw.get("name") or os.path.splitext(os.path.basename(path))[0]
    launcher = raw.get("launcher", "local")
    if launcher not in LAUNCHERS:
        bad(f"key 'launcher' must be one of {LAUNCHERS}, got '{launcher}'")
    runtime = raw.get("runtime", "gradsync")
    if runtime not in RUNTIMES:
        bad(f"key 'runtime' must be one of {RUNTIMES}, got '{runtime}'")
    ranks = raw.get("ranks", 2)
    repeats = raw.get("repeats", 1)
    timeout_s = raw.get("timeout_s", 300)
    for key, val in (("ranks", ranks), ("repeats", repeats)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 1:
            bad(f"key '{key}' must be an integer >= 1, got {val!r}")

    def check_timeout(val, gw=""):
        if not isinstance(val, (int, float)) or isinstance(val, bool) or not math.isfinite(val) or val <= 0:
            bad(f"{gw}key 'timeout_s' must be a number of seconds > 0, got {val!r}")

    check_timeout(timeout_s)
    testbed = raw.get("testbed", {})
    if not isinstance(testbed, dict):
        bad("[testbed] must be a table")
    for k in testbed:
        if k not in TESTBED_KEYS:
            bad(f"[testbed] unknown key '{k}' (allowed: {TESTBED_KEYS})")

    grid_specs = raw.get("grid")
    if grid_specs is None:
        if "program" not in raw:
            bad("needs 'program' (bench|train) or one or more [[grid]] tables")
        grid_specs = [{"name": raw["program"], "program": raw["program"], "fixed": raw.get("fixed", {}),
                       "sweep": raw.get("sweep", {})}]
    elif "program" in raw or "fixed" in raw or "sweep" in raw:
        bad("use either top-level program/fixed/sweep or [[grid]] tables, not both")
    grids = []
    for i, gs in enumerate(grid_specs):
        gname = gs.get("name", gs.get("program", f"grid{i}"))
        gw = f"[[grid]] '{gname}'"
        unknown = set(gs) - GRID_KEYS
        if unknown:
            bad(f"{gw}: unknown key(s) {sorted(unknown)} (allowed: {sorted(GRID_KEYS)})")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", gname):
            bad(f"{gw}: name must be letters, digits, '_', '.', '-'")
        if any(g.name == gname for g in grids):
            bad(f"{gw}: two grids with the same name")
        prog = gs.get("program")
        if prog not in PROGRAMS:
            bad(f"{gw}: 'program' must be one of {sorted(PROGRAMS)}, got {prog!r}")
        fixed = _flatten(gs.get("fixed", {}))
        sweep = _flatten(gs.get("sweep", {}))
        for k, v in sweep.items():
            if not isinstance(v, list) or not v:
                bad(f"{gw}: sweep key '{k}' must be a non-empty list, got {v!r}")
            if k in fixed:
                bad(f"{gw}: key '{k}' is both fixed and swept")
        for k in list(fixed) + list(sweep):
            if k in ("out", "json", "o", "output"):
                bad(f"{gw}: key '{k}' is set by the runner (each point's result file)")
            if k.startswith("testbed.") and k[8:] not in TESTBED_KEYS:
                bad(f"{gw}: unknown testbed key '{k}' (allowed: testbed.{{{','.join(TESTBED_KEYS)}}})")
        g_ranks = gs.get("ranks", ranks)
        if not isinstance(g_ranks, int) or isinstance(g_ranks, bool) or g_ranks < 1:
            bad(f"{gw}: 'ranks' must be an integer >= 1, got {g_ranks!r}")
        if "timeout_s" in gs:
            check_timeout(gs["timeout_s"], f"{gw}: ")
        g_rep = gs.get("repeats", repeats)
        if not isinstance(g_rep, int) or isinstance(g_rep, bool) or g_rep < 1:
            bad(f"{gw}: 'repeats' must be an integer >= 1, got {g_rep!r}")
        grids.append(Grid(gname, prog, fixed, sweep, g_ranks, g_rep,
                          gs.get("timeout_s", timeout_s), ranks_fixed="ranks" in gs))

    model = raw.get("model", {})
    gnames = [g.name for g in grids]
    interleave = raw.get("interleave", [])
    if "interleave" in raw and (not isinstance(interleave, list) or len(interleave) < 2
                                or not all(isinstance(gn, str) and gn in gnames for gn in interleave)
                                or len(set(interleave)) != len(interleave)):
        bad(f"key 'interleave' must list two or more grids of this study (grids: {gnames}), got {interleave!r}")
    for c in model.get("calibrate", []):
        if "name" not in c:
            bad("[[model.calibrate]] needs a 'name' (the fabric file written: model/<name>.toml)")
        for gn in c.get("grids", []):
            if gn not in gnames:
                bad(f"[[model.calibrate]] '{c['name']}': no grid named '{gn}' (grids: {gnames})")
    cmp_ = model.get("compare")
    if cmp_ is not None:
        if "fabric" not in cmp_:
            bad("[model.compare] needs 'fabric' (a calibrated name, a built-in or a file)")
        for gn in cmp_.get("grids", []):
            if gn not in gnames:
                bad(f"[model.compare]: no grid named '{gn}' (grids: {gnames})")
        cf = cmp_.get("compute_from")
        if cf is not None:
            if (not isinstance(cf, dict) or cf.get("grid") not in gnames or not isinstance(cf.get("where", {}), dict)
                    or set(cf) - {"grid", "where", "repeat"}):
                bad(f"[model.compare]: compute_from must be {{grid = NAME, where = {{...}}, repeat = N}} with a grid "
                    f"of this study (grids: {gnames}), got {cf!r}")
            rep = cf.get("repeat", 0)
            nrep = next(g.repeats for g in grids if g.name == cf["grid"])
            if not isinstance(rep, int) or isinstance(rep, bool) or not 0 <= rep < nrep:
                bad(f"[model.compare]: compute_from's repeat must be 0..{nrep - 1} (grid '{cf['grid']}' has "
                    f"{nrep} repeat(s)), got {rep!r}")
    for p in model.get("predict", []):
        if "name" not in p or "options" not in p:
            bad("[[model.predict]] needs 'name' and 'options'")

    return Study(path=os.path.abspath(path), name=name, description=raw.get("description", "").strip(),
                 launcher=launcher, ranks=ranks, repeats=repeats, timeout_s=timeout_s,
                 analysis=raw.get("analysis", name), testbed=testbed, grids=grids, model=model,
                 plots=raw.get("plots", {}), raw=raw, text=blob.decode(), scale=scale or "", runtime=runtime,
                 interleave=tuple(interleave))


def option_args(options: dict) -> list:
    """Program options as argv: one-letter keys -> -k v; bools -> bare flag or nothing."""
    argv = []
    for k, v in options.items():
        flag = f"-{k}" if len(k) == 1 else f"--{k}"
        if isinstance(v, bool):
            if v:
                argv.append(flag)
            continue
        if isinstance(v, list):
            v = ",".join(fmt_value(x) for x in v)
        argv += [flag, fmt_value(v)]
    return argv
