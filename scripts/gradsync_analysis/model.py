"""The [model] section of a study: calibrate fabrics (and compute profiles) from its points,
compare its train points with the model, predict configurations. Everything goes to
DIR/model/ (TOML fabrics, --json outputs as .json, --out tables as .h5, model.log).

  [[model.calibrate]]     name (writes model/<name>.toml), grids (default: every bench grid;
                          with compute = true every train grid; a fabric may also name train
                          grids: their no-overlap, uncompressed runs' bucket all-reduces), where = {key = value | [values]}
                          (points whose option has that value), base (a fabric for the level the
                          points do not cover), compute (true: calibrate --compute from train points),
                          burst_bytes (the inter-node link is a token-bucket shaper with this burst,
                          e.g. the testbed's tbf burst; "testbed": the study's testbed's own burst,
                          as scripts/testbed.sh sets it; ignored by calibrate when no point crossed nodes),
                          cores_per_node (the CPUs each node gives its ranks, in place of the files'
                          count: testbed hosts share the machine's cores),
                          kernels (true: run gradsync-kernels-bench here, on the runner's host, and
                          calibrate --kernels: model/<name>.toml holds the codec rates; min_time, s;
                          a torch study times PyTorch's own hooks instead: gradsync_torch.codecs
                          under scripts/torchrun with the study's ranks; comm-sched: its --comm-sched)
  [model.compare]         fabric, compute_profile, intra, kernels (names of [[model.calibrate]] entries,
                          built-ins or files), grids (default: every train grid), also (more
                          fabrics to compare the same runs with: model/compare-<name>.{h5,json}),
                          compute_from = {grid, where, repeat} (the same runs on `fabric`, each predicted
                          with the compute of that grid's first finished matching point of that
                          repeat, default 0:
                          compare --compute-from, model/compare-compute-from.{h5,json});
                          a grid with repeats is also scored per configuration (median measured
                          vs median predicted step time of its repeats): the JSON's
                          per_configuration and the summary line, and the runs' own spread
                          (each run against the median of its other repeats: repeat_spread,
                          said once)
  [[model.predict]]       name, options = {predict option = value or list}; "@name" (or a bare
                          calibrated name) in a value stands for model/<name>.toml; optional
                          each = {option = [values]}: one call per value (model/<name>-<value>.*)
"""
from __future__ import annotations

import json
import math
import os
import subprocess

from . import results, spec, tools


def testbed_burst(testbed: dict, where: dict | None = None) -> str:
    """The tbf burst of the study's testbed (its first NIC): [testbed] burst when given, else
    scripts/testbed.sh's default, 1 ms at the rate and at least 64 KiB. A calibration's
    ``where`` (e.g. {"testbed.rate": "200mbit"}) overrides the testbed's rate and burst: its
    points ran on that setting."""
    testbed = dict(testbed)
    for k in ("rate", "burst"):
        v = (where or {}).get("testbed." + k)
        if isinstance(v, str):
            testbed[k] = v
    burst = str(testbed.get("burst", "")).split(",")[0].strip()
    if burst:
        return burst
    rate = str(testbed.get("rate", "1gbit")).split(",")[0]
    bps = spec.rate_Bps(rate)
    if math.isnan(bps):
        raise ValueError(f"[testbed] rate '{rate}': not a tc rate (e.g. 1gbit, 200mbit)")
    return str(max(int(bps / 1000), 65536))


def _matches(point, where: dict) -> bool:
    for k, want in where.items():
        have = point.params.get(k)
        wants = want if isinstance(want, list) else [want]
        if not any(spec.fmt_value(have) == spec.fmt_value(w) for w in wants if have is not None):
            return False
    return True


def resolve(value, calibrated: dict, declared=()):
    """A calibrated name ("@name" or "name") -> its TOML file; anything else unchanged.
    A name of a [[model.calibrate]] entry (declared) that did not succeed is an error."""
    if isinstance(value, list):
        return [resolve(v, calibrated, declared) for v in value]
    if isinstance(value, str):
        key = value[1:] if value.startswith("@") else value
        if key in calibrated:
            return calibrated[key]
        if value.startswith("@") or key in declared:
            raise tools.ToolError(f"'{value}' names a calibration that did not succeed (see model/model.log)")
    return value


def predict_args(options: dict, calibrated: dict, declared=()) -> list:
    args = []
    for k, v in options.items():
        v = resolve(v, calibrated, declared)
        if isinstance(v, list):
            v = ",".join(spec.fmt_value(x) for x in v)
        args += [f"--{k}", spec.fmt_value(v)]
    return args


def predict_calls(entry: dict):
    """[(name, options)] of one [[model.predict]] entry: `each = {option = [values]}` makes one
    call per value (for options predict does not take as a list, e.g. --compress), named
    <name>-<value>; otherwise one call named <name>."""
    each = entry.get("each") or {}
    if not each:
        return [(entry["name"], dict(entry["options"]))]
    if len(each) != 1:
        raise tools.ToolError(f"predict {entry['name']}: 'each' takes exactly one option")
    (key, values), = each.items()
    out = []
    for v in values:
        opts = dict(entry["options"])
        opts[key] = v
        out.append((f"{entry['name']}-{spec._label_part(v)}", opts))
    return out


def run_stage(study, points, records, out_dir, bindir, log, stream=None) -> dict:
    mdir = os.path.join(out_dir, "model")
    os.makedirs(mdir, exist_ok=True)
    mlog = os.path.join(mdir, "model.log")
    info = {"fabrics": [], "fabric_files": [], "compute_profiles": [], "predict_files": [], "errors": []}
    calibrated = {}
    m = study.model
    declared = {c["name"] for c in m.get("calibrate", [])}

    def ok_points(program, grids=None, where=None, repeat=None):
        programs = program if isinstance(program, tuple) else (program,)
        out = []
        for p, r in zip(points, records):
            if p.program not in programs or r.get("status") != "ok":
                continue
            if grids and p.grid not in grids:
                continue
            if where and not _matches(p, where):
                continue
            if repeat is not None and p.repeat != repeat:
                continue
            out.append(os.path.join(out_dir, p.result_relpath()))
        return out

    def say(msg):
        log(msg)
        if stream:
            print(msg, file=stream)

    def kernel_rates(c, name):
        """The codecs' bench (Google Benchmark JSON) -> calibrate --kernels -> model/<name>.toml:
        gradsync-kernels-bench, or for a torch study PyTorch's own hooks (gradsync_torch.codecs
        under scripts/torchrun with the study's ranks, on this host)."""
        bench_json = os.path.join(mdir, f"{name}.bench.json")
        out = os.path.join(mdir, f"{name}.toml")
        try:
            if study.runtime == "torch":
                tools.need_torch_venv()
                prog = "gradsync_torch.codecs"
                argv = [os.path.join(tools.REPO, "scripts", "torchrun"), "--nproc-per-node", str(study.ranks), "-m",
                        prog, "--out", bench_json] + (["--quick"] if study.scale == "quick" else []) + (
                    ["--comm-sched", str(c["comm-sched"])] if c.get("comm-sched") else [])
                p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                with open(os.path.join(mdir, f"{name}.bench.log"), "w") as fh:
                    fh.write(p.stdout + p.stderr)
            else:
                prog = tools.need(tools.program("gradsync-kernels-bench", bindir), "gradsync-kernels-bench")
                argv = [prog, "--benchmark_format=json", f"--benchmark_min_time={float(c.get('min_time', 0.2))}"]
                with open(bench_json, "w") as fh:
                    p = subprocess.run(argv, stdout=fh, stderr=subprocess.PIPE, text=True)
            log(f"model: $ {tools.quote(argv)} -> {bench_json}, exit {p.returncode}")
            if p.returncode != 0:
                raise tools.ToolError(f"{os.path.basename(prog)} failed (exit {p.returncode}): {p.stderr.strip()[-300:]}")
            stdout, _ = tools.run_model(bindir, ["calibrate", "--kernels", bench_json, "-o", out, "--name", name,
                                                 "--json"], mlog, want_json=True)
            with open(os.path.join(mdir, f"{name}.calibrate.json"), "w") as fh:
                fh.write(stdout)
            calibrated[name] = out
            say(f"model: measured compression-kernel rates {name} -> {os.path.relpath(out, out_dir)}")
        except tools.ToolError as e:
            info["errors"].append(f"calibrate {name}: {e}")
            say(f"model: kernel rates {name} failed: {e}")

    for c in m.get("calibrate", []):
        name = c["name"]
        if c.get("kernels"):
            kernel_rates(c, name)
            continue
        compute = bool(c.get("compute", False))
        if compute:
            files = ok_points("train", c.get("grids"), c.get("where"))
        else:  # bench sweeps; train points only where grids name them
            files = ok_points(("bench", "train") if c.get("grids") else "bench", c.get("grids"), c.get("where"))
        if not files:
            info["errors"].append(f"calibrate {name}: no finished {'train' if compute else 'bench'} points selected")
            say(f"model: calibrate {name}: skipped, no finished points selected")
            continue
        out = os.path.join(mdir, f"{name}.toml")
        args = ["calibrate"] + (["--compute"] if compute else []) + files + ["-o", out, "--json"]
        if c.get("base") and not compute:
            args += ["--base", resolve(c["base"], calibrated, declared)]
        if not compute:
            args += ["--name", name]
            if c.get("burst_bytes") == "testbed":
                args += ["--burst-bytes", testbed_burst(study.testbed, c.get("where"))]
            elif c.get("burst_bytes"):
                args += ["--burst-bytes", spec.fmt_value(c["burst_bytes"])]
            if c.get("cores_per_node"):
                args += ["--cores-per-node", spec.fmt_value(c["cores_per_node"])]
        try:
            stdout, data = tools.run_model(bindir, args, mlog, want_json=True)
            with open(os.path.join(mdir, f"{name}.calibrate.json"), "w") as fh:
                fh.write(stdout)
            calibrated[name] = out
            if compute:
                info["compute_profiles"].append(name)
            else:
                info["fabrics"].append(name)
                info["fabric_files"].append(os.path.relpath(out, out_dir))
            say(f"model: calibrated {'compute profile' if compute else 'fabric'} {name} from "
                f"{len(files)} file(s) -> {os.path.relpath(out, out_dir)}")
        except tools.ToolError as e:
            info["errors"].append(f"calibrate {name}: {e}")
            say(f"model: calibrate {name} failed: {e}")

    cmp_ = m.get("compare")
    if cmp_:
        # A result file -> its configuration (grid and swept values, the repeat left out).
        config_of = {os.path.abspath(os.path.join(out_dir, p.result_relpath())):
                     p.grid + ":" + "__".join(f"{k}={v}" for k, v in p.swept.items()) for p in points}
        files = ok_points("train", cmp_.get("grids"), cmp_.get("where"))
        if not files:
            info["errors"].append("compare: no finished train points")
            say("model: compare skipped, no finished train points")
        else:
            def compare(fabric, label="", compute_from=None):
                """The selected train runs predicted on `fabric`: model/compare[-label].{h5,json};
                with compute_from, every run with that run's compute (compare --compute-from).
                Returns (the .h5 written, its per_configuration or None)."""
                stem = f"compare-{label}" if label else "compare"
                out = os.path.join(mdir, f"{stem}.h5")
                args = ["compare"] + files + ["--fabric", resolve(fabric, calibrated, declared), "--json", "--out", out]
                for key, opt in (("compute_profile", "--compute-profile"), ("intra", "--intra"), ("kernels", "--kernels")):
                    if cmp_.get(key):
                        args += [opt, resolve(cmp_[key], calibrated, declared)]
                if compute_from:
                    args += ["--compute-from", compute_from]
                stdout, data = tools.run_model(bindir, args, mlog, want_json=True)
                # Repeats of a configuration (the grid's `repeats`) also as one: their median
                # measured step time against their median predicted one.
                pc = results.per_configuration(data.get("runs"), lambda f: config_of.get(os.path.abspath(f), f))
                if pc:
                    data["per_configuration"] = pc
                    stdout = json.dumps(data, indent=1) + "\n"
                with open(os.path.join(mdir, f"{stem}.json"), "w") as fh:
                    fh.write(stdout)
                with_ = (f" with the compute of {os.path.relpath(compute_from, out_dir)}" if compute_from
                         else f" with fabric {label}" if label else "")
                say(f"model: compare of {len(files)} run(s)" + with_
                    + f": step time |error| median {data.get('median_abs_error_pct', float('nan')):.1f}%, p90 "
                    f"{data.get('p90_abs_error_pct', float('nan')):.1f}%"
                    + results.inside_words(data.get("inside_spread"), len(data.get("runs", [])))
                    + results.per_configuration_words(pc)
                    + f" -> model/{stem}.h5")
                return out, pc

            try:
                out, pc = compare(cmp_["fabric"])
                spread = results.repeat_spread_words(pc)
                if spread:
                    say(f"model: {spread}")
                info["compare_file"] = os.path.relpath(out, out_dir)
                info["compare_table"] = results.read_table(out, "compare")
            except tools.ToolError as e:
                info["errors"].append(f"compare: {e}")
                say(f"model: compare failed: {e}")
            for other in cmp_.get("also", []) or []:
                label = os.path.splitext(os.path.basename(str(other)))[0]
                try:
                    compare(other, label)
                except tools.ToolError as e:
                    info["errors"].append(f"compare ({label}): {e}")
                    say(f"model: compare with fabric {label} failed: {e}")
            cf = cmp_.get("compute_from")
            if cf:
                refs = ok_points("train", [cf["grid"]], cf.get("where"), cf.get("repeat", 0))
                if not refs:
                    info["errors"].append(f"compare (compute_from): no finished point in grid {cf['grid']} "
                                          f"(repeat {cf.get('repeat', 0)})")
                    say(f"model: compare with another run's compute skipped: no finished point in grid {cf['grid']}")
                else:
                    try:
                        compare(cmp_["fabric"], "compute-from", compute_from=refs[0])
                    except tools.ToolError as e:
                        info["errors"].append(f"compare (compute_from): {e}")
                        say(f"model: compare with the compute of {os.path.relpath(refs[0], out_dir)} failed: {e}")

    for pr in m.get("predict", []):
        for name, options in predict_calls(pr):
            out = os.path.join(mdir, f"{name}.h5")
            try:
                args = ["predict"] + predict_args(options, calibrated, declared) + ["--json", "--out", out]
                stdout, data = tools.run_model(bindir, args, mlog, want_json=True)
                with open(os.path.join(mdir, f"{name}.json"), "w") as fh:
                    fh.write(stdout)
                info["predict_files"].append(os.path.relpath(out, out_dir))
                say(f"model: predict {name} -> model/{name}.h5")
            except tools.ToolError as e:
                info["errors"].append(f"predict {name}: {e}")
                say(f"model: predict {name} failed: {e}")

    with open(os.path.join(mdir, "calibrated.json"), "w") as fh:
        json.dump({k: os.path.relpath(v, out_dir) for k, v in calibrated.items()}, fh, indent=1)
    return info


def calibrated_files(out_dir) -> dict:
    """name -> TOML of what the [model] stage calibrated (model/calibrated.json)."""
    try:
        with open(os.path.join(out_dir, "model", "calibrated.json")) as fh:
            return {k: os.path.join(out_dir, v) for k, v in json.load(fh).items()}
    except (OSError, json.JSONDecodeError):
        return {}
