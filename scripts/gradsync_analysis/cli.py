"""Command line of scripts/study."""
from __future__ import annotations

import argparse
import glob
import os
import sys

from . import spec, tools

USAGE = """\
scripts/study run STUDY.toml [--out DIR] [--dry-run] [--stop-on-failure]
                  [--launcher local|testbed|slurm] [--ranks N] [--quick | --scale NAME]
                  [--bin DIR] [--keep-testbed] [--no-model] [--analyze]
scripts/study analyze DIR [--bin DIR]
scripts/study flagship [--out DIR] [--bin DIR] [--quick]
scripts/study list

run       expands the study's grid(s) into points and runs the points whose result file is
          missing (resumable), then its [model] section; writes DIR/study.h5 and DIR/study.log.
          Exit status: 0 every point ok, 1 some point failed or was not run, 2 bad usage or
          study file, 130 interrupted.
analyze   plots (DIR/plots/*.png) and conclusions (DIR/conclusions.md, also printed) from DIR.
flagship  the main job on localhost: bench sweep -> calibrate -> small training grid ->
          compare -> plots and a predicted-vs-measured table (experiments/flagship.toml).
list      the studies in experiments/ with their descriptions.

Programs come from --bin, else $GRADSYNC_BIN, else build/bin of this repository.
DIR defaults to results/study-<name> (results/study-<name>-<scale> with --quick/--scale).
"""


def default_out(study) -> str:
    suffix = f"-{study.scale}" if study.scale else ""
    return os.path.join(tools.REPO, "results", f"study-{study.name}{suffix}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("study: error: no command (run, analyze, flagship, list); see scripts/study --help", file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    try:
        if cmd == "run":
            return cmd_run(rest)
        if cmd == "analyze":
            return cmd_analyze(rest)
        if cmd == "flagship":
            return cmd_flagship(rest)
        if cmd == "list":
            return cmd_list(rest)
    except spec.SpecError as e:
        print(f"study: error: {e}", file=sys.stderr)
        return 2
    except tools.ToolError as e:
        print(f"study: error: {e}", file=sys.stderr)
        return 1
    print(f"study: error: unknown command '{cmd}' (known: run, analyze, flagship, list; see scripts/study --help)",
          file=sys.stderr)
    return 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"study {self.prog.split()[-1]}: error: {message}", file=sys.stderr)
        sys.exit(2)


def cmd_run(args) -> int:
    ap = _Parser(prog="study run", description="run a study (see scripts/study --help)")
    ap.add_argument("study")
    ap.add_argument("--out")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--stop-on-failure", action="store_true")
    ap.add_argument("--launcher", choices=spec.LAUNCHERS)
    ap.add_argument("--ranks", type=int)
    ap.add_argument("--quick", action="store_true", help="same as --scale quick")
    ap.add_argument("--scale")
    ap.add_argument("--bin")
    ap.add_argument("--keep-testbed", action="store_true", help="leave the testbed up afterwards")
    ap.add_argument("--no-model", action="store_true", help="skip the [model] section")
    ap.add_argument("--analyze", action="store_true", help="run 'analyze' afterwards")
    a = ap.parse_args(args)
    if a.ranks is not None and a.ranks < 1:
        ap.error("--ranks must be >= 1")
    if a.quick and a.scale and a.scale != "quick":
        ap.error("--quick and --scale name different scales")
    study = spec.load(a.study, "quick" if a.quick else a.scale)
    from .runner import Runner
    out = a.out or default_out(study)
    r = Runner(study, out, tools.bin_dir(a.bin), launcher=a.launcher, ranks=a.ranks, dry_run=a.dry_run,
               stop_on_failure=a.stop_on_failure, keep_testbed=a.keep_testbed, no_model=a.no_model)
    rc = r.run()
    if a.analyze and not a.dry_run and rc in (0, 1):
        from . import analyze
        analyze.analyze(out, tools.bin_dir(a.bin))
    return rc


def cmd_analyze(args) -> int:
    ap = _Parser(prog="study analyze", description="plots and conclusions of a study folder")
    ap.add_argument("dir")
    ap.add_argument("--bin")
    a = ap.parse_args(args)
    if not os.path.exists(os.path.join(a.dir, "study.h5")):
        print(f"study analyze: error: {a.dir}/study.h5 not found (run the study first)", file=sys.stderr)
        return 2
    from . import analyze
    analyze.analyze(a.dir, tools.bin_dir(a.bin))
    return 0


def cmd_flagship(args) -> int:
    ap = _Parser(prog="study flagship", description="the main job on localhost")
    ap.add_argument("--out")
    ap.add_argument("--bin")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(args)
    from . import flagship
    return flagship.run(a.out, tools.bin_dir(a.bin), quick=a.quick)


def cmd_list(args) -> int:
    for path in sorted(glob.glob(os.path.join(tools.REPO, "experiments", "*.toml"))):
        try:
            s = spec.load(path)
        except spec.SpecError as e:
            print(f"{os.path.basename(path)}: INVALID: {e}")
            continue
        first = (s.description.splitlines() or [""])[0]
        n = len(s.points())
        print(f"{os.path.relpath(path, tools.REPO):36s} {n:3d} points, {s.launcher:7s} {first}")
    return 0
