#!/usr/bin/python3
"""The bad-input corpus: every row of cases.tsv runs one program on one bad input and
must end with the expected exit status (2 usage, 1 run time / bad file) and exactly one
line on stderr containing every listed word (case-insensitive), leaving no temp file.

cases.tsv columns (tab-separated; '#' lines and blank lines are skipped):
  id        unique name of the case
  program   bench | train | model | study | kernels  (programs from --bin, study from the repo)
  args      the arguments, shell-quoted; {d} is the case's own empty folder, {f:NAME} a fixture
  env       K=V pairs separated by spaces, or '-'
  expect    exit status: 1 or 2; a case about a CUDA-less build adds ';cuda:S:WORDS', what a
            build with CUDA must do instead on a machine with no GPU (exit S, stderr WORDS);
            on a machine with a GPU such a case does not apply and is skipped
  words     words the one stderr line must contain, separated by '|'

Fixtures (built once per run in a temp folder, see FIXTURES below): HDF5 files truncated,
empty, not HDF5, of the wrong schema; fabric, compute-profile and study TOML files with
one defect each. Programs run as single processes (MPI singleton), so no mpirun output
interferes; the cross-rank cases live in the fault suite (tests/faults).

  run_badinput.py --bin BUILD/bin [--cuda ON|OFF] [--jobs 2] [--only REGEX] [--list]
"""
import argparse
import concurrent.futures
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PROGRAMS = {"bench": "gradsync-bench", "train": "gradsync-train", "model": "gradsync-model"}
CASE_TIMEOUT_S = 60


def write(path, data, mode="w"):
    with open(path, mode) as fh:
        fh.write(data)


def make_fixtures(fdir, bindir):
    """Creates every fixture; returns {name: path}."""
    import h5py  # Debian's python3-h5py
    import numpy as np

    f = {}

    def add(name):
        f[name] = os.path.join(fdir, name)
        return f[name]

    # A real bench result (1 rank, tiny) to cut and to misuse.
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    good_bench = add("bench.h5")
    subprocess.run([os.path.join(bindir, "gradsync-bench"), "-b", "8", "-e", "64", "-n", "1", "-w", "0",
                    "--out", good_bench], env=env, check=True, capture_output=True, timeout=CASE_TIMEOUT_S)
    with open(good_bench, "rb") as fh:
        blob = fh.read()
    write(add("trunc.h5"), blob[: len(blob) // 3], "wb")
    write(add("header_only.h5"), blob[:512], "wb")
    write(add("empty.h5"), b"", "wb")
    write(add("text.h5"), "this is not an HDF5 file\n")
    with h5py.File(add("wrong_schema.h5"), "w") as h:
        h["x"] = np.arange(4.0)
        h.attrs["program"] = "something-else"
    with h5py.File(add("bench_no_rows.h5"), "w") as h:
        for k, v in h5py.File(good_bench, "r").attrs.items():
            h.attrs[k] = v
    os.makedirs(add("a_folder.h5"))

    # Fabric TOML files, one defect each.
    fabric_ok = ('name = "t"\ndescription = "test"\n[intra]\nalpha_us = 1.0\nbw_GBps = 10.0\n'
                 '[inter]\nalpha_us = 30.0\nbw_GBps = 1.2\n')
    write(add("fabric_ok.toml"), fabric_ok)
    write(add("fabric_syntax.toml"), 'name = "t\n[intra\n')
    write(add("fabric_no_levels.toml"), 'name = "t"\ndescription = "no levels"\n')
    write(add("fabric_neg_bw.toml"), fabric_ok.replace("bw_GBps = 1.2", "bw_GBps = -1.2"))
    write(add("fabric_zero_bw.toml"), fabric_ok.replace("bw_GBps = 1.2", "bw_GBps = 0.0"))
    write(add("fabric_neg_alpha.toml"), fabric_ok.replace("alpha_us = 30.0", "alpha_us = -30.0"))
    write(add("fabric_string_bw.toml"), fabric_ok.replace("bw_GBps = 1.2", 'bw_GBps = "fast"'))
    write(add("fabric_unknown_key.toml"), fabric_ok + "colour = \"blue\"\n")
    write(add("fabric_empty.toml"), "")
    write(add("fabric_nan.toml"), fabric_ok.replace("bw_GBps = 1.2", "bw_GBps = nan"))
    write(add("fabric_inf_alpha.toml"), fabric_ok.replace("alpha_us = 30.0", "alpha_us = inf"))
    write(add("fabric_binary.toml"), b"\x00\x01\xff\xfe\n", "wb")

    # Compute profiles.
    write(add("profile_syntax.toml"), "name = [\n")
    write(add("profile_empty.toml"), "")

    # Study files, one defect each (study run --dry-run reads them without running).
    study_ok = 'name = "s"\nprogram = "bench"\nranks = 1\n[fixed]\nb = "8"\ne = "64"\n'
    write(add("study_ok.toml"), study_ok)
    write(add("study_syntax.toml"), 'name = "s\nprogram = bench\n')
    write(add("study_unknown_top.toml"), study_ok.replace('ranks = 1', 'ranks = 1\ncolour = "red"'))
    write(add("study_no_program.toml"), 'name = "s"\nranks = 1\n')
    write(add("study_bad_program.toml"), study_ok.replace('"bench"', '"benchmark"'))
    write(add("study_bad_launcher.toml"), study_ok.replace('ranks = 1', 'ranks = 1\nlauncher = "ssh"'))
    write(add("study_ranks_zero.toml"), study_ok.replace('ranks = 1', 'ranks = 0'))
    write(add("study_ranks_text.toml"), study_ok.replace('ranks = 1', 'ranks = "two"'))
    write(add("study_repeats_neg.toml"), study_ok.replace('ranks = 1', 'ranks = 1\nrepeats = -1'))
    write(add("study_timeout_neg.toml"), study_ok.replace('ranks = 1', 'ranks = 1\ntimeout_s = -5'))
    write(add("study_timeout_text.toml"), study_ok.replace('ranks = 1', 'ranks = 1\ntimeout_s = "long"'))
    write(add("study_sweep_empty.toml"), study_ok + '[sweep]\nalgo = []\n')
    write(add("study_sweep_scalar.toml"), study_ok + '[sweep]\nalgo = "ring"\n')
    write(add("study_fixed_and_swept.toml"), study_ok + '[sweep]\nb = ["8", "16"]\n')
    write(add("study_out_key.toml"), study_ok + 'out = "x.h5"\n')
    write(add("study_both_forms.toml"), study_ok + '[[grid]]\nname = "g"\nprogram = "bench"\n')
    write(add("study_grid_bad_name.toml"),
          'name = "s"\nranks = 1\n[[grid]]\nname = "a b"\nprogram = "bench"\n')
    write(add("study_grid_dup.toml"),
          'name = "s"\nranks = 1\n[[grid]]\nname = "g"\nprogram = "bench"\n[[grid]]\nname = "g"\nprogram = "bench"\n')
    write(add("study_grid_unknown_key.toml"),
          'name = "s"\nranks = 1\n[[grid]]\nname = "g"\nprogram = "bench"\ncolour = 1\n')
    write(add("study_testbed_key.toml"), study_ok.replace('ranks = 1', 'ranks = 1\n[testbed]\nspeed = 1'))
    write(add("study_cal_no_name.toml"), study_ok + '[[model.calibrate]]\ngrids = ["bench"]\n')
    write(add("study_cal_bad_grid.toml"), study_ok + '[[model.calibrate]]\nname = "f"\ngrids = ["nope"]\n')
    write(add("study_compare_no_fabric.toml"), study_ok + '[model.compare]\ngrids = ["bench"]\n')
    write(add("study_compare_from_bad.toml"),
          study_ok + '[model.compare]\nfabric = "tcp-10g"\ncompute_from = { grid = "nope" }\n')
    write(add("study_predict_no_options.toml"), study_ok + '[[model.predict]]\nname = "p"\n')
    write(add("study_scale_missing.toml"), study_ok)
    write(add("study_empty.toml"), "")
    return f


def load_cases(path):
    cases = []
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) != 6:
                sys.exit(f"{path}:{n}: {len(cols)} columns, want 6 (id program args env expect words)")
            cid, prog, args, env, expect, words = cols
            if prog not in list(PROGRAMS) + ["study"]:
                sys.exit(f"{path}:{n}: unknown program '{prog}'")
            expect, _, cuda = expect.partition(";")
            case = dict(id=cid, program=prog, args=args, env=env, expect=int(expect),
                        words=[w for w in words.split("|") if w], line=n, cuda=None)
            if cuda:
                m = re.fullmatch(r"cuda:([12]):(.+)", cuda)
                if not m:
                    sys.exit(f"{path}:{n}: expect '{expect};{cuda}': the CUDA variant is cuda:STATUS:WORDS")
                case["cuda"] = (int(m.group(1)), [w for w in m.group(2).split("|") if w])
            cases.append(case)
    ids = [c["id"] for c in cases]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        sys.exit(f"{path}: duplicate case ids {sorted(dup)}")
    return cases


def expand(text, fixtures, d):
    def fx(m):
        name = m.group(1)
        if name not in fixtures:
            raise KeyError(f"unknown fixture '{name}'")
        return fixtures[name]
    return re.sub(r"\{f:([^}]+)\}", fx, text).replace("{d}", d)


def gpu_present():
    """True when nvidia-smi lists a GPU (then the CUDA-less cases do not apply)."""
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        return p.returncode == 0 and "GPU" in p.stdout
    except (OSError, subprocess.TimeoutExpired):
        return False


def for_build(c, cuda_build):
    """The case as this build must pass it: a build with CUDA takes the case's CUDA variant."""
    if c["cuda"] is None or not cuda_build:
        return c
    status, words = c["cuda"]
    return dict(c, expect=status, words=words)


def run_case(c, bindir, fixtures, root):
    d = os.path.join(root, "cases", c["id"])
    os.makedirs(d)
    args = shlex.split(expand(c["args"], fixtures, d))
    if c["program"] == "study":
        argv = ["/usr/bin/python3", os.path.join(REPO, "scripts", "study")] + args
    else:
        argv = [os.path.join(bindir, PROGRAMS[c["program"]])] + args
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", GRADSYNC_BIN=bindir)
    for k in ("GRADSYNC_TIMEOUT_S", "GRADSYNC_CHUNK_BYTES", "GRADSYNC_CHANNELS", "GRADSYNC_SWEEP_STALE", "GRADSYNC_DEBUG"):
        env.pop(k, None)
    if c["env"] != "-":
        for kv in shlex.split(expand(c["env"], fixtures, d)):
            k, _, v = kv.partition("=")
            env[k] = v
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, cwd=d, env=env, capture_output=True, text=True, errors="replace", timeout=CASE_TIMEOUT_S,
                           stdin=subprocess.DEVNULL)
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        rc, err = "timeout", ""
    wall = time.monotonic() - t0
    problems = []
    if rc != c["expect"]:
        problems.append(f"exit {rc}, want {c['expect']}")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if len(lines) != 1:
        problems.append(f"{len(lines)} stderr lines, want 1")
    low = err.lower()
    missing = [w for w in c["words"] if w.lower() not in low]
    if missing:
        problems.append(f"stderr lacks {missing}")
    temps = [os.path.join(r, n) for r, _, fs in os.walk(d) for n in fs if re.search(r"\.tmp\.\d+", n)]
    if temps:
        problems.append(f"temp files left: {temps}")
    return c, problems, err, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="folder with gradsync-bench, gradsync-train, gradsync-model")
    ap.add_argument("--cases", default=os.path.join(HERE, "cases.tsv"))
    ap.add_argument("--cuda", choices=["ON", "OFF"], default="OFF",
                    help="whether the programs were built with CUDA (GRADSYNC_WITH_CUDA)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="regex on case ids")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    cuda_build = a.cuda == "ON"
    cases = [for_build(c, cuda_build) for c in load_cases(a.cases) if re.search(a.only, c["id"])]
    skipped = [c for c in cases if c["cuda"] is not None and cuda_build and gpu_present()]
    if skipped:
        print(f"run_badinput: a GPU is present: {len(skipped)} case(s) about a machine without one skipped "
              f"({', '.join(c['id'] for c in skipped)})")
        cases = [c for c in cases if c not in skipped]
    if a.list:
        for c in cases:
            print(f"{c['id']:40s} {c['program']:6s} exit {c['expect']}  {c['args']}")
        print(f"{len(cases)} case(s)")
        return 0
    for prog in {c["program"] for c in cases} - {"study"}:
        if not os.access(os.path.join(a.bin, PROGRAMS[prog]), os.X_OK):
            print(f"run_badinput: {PROGRAMS[prog]} not built in {a.bin}: skipped", file=sys.stderr)
            return 77
    root = tempfile.mkdtemp(prefix="gs-badinput-")
    t0 = time.monotonic()
    failed = 0
    try:
        os.makedirs(os.path.join(root, "fx"))
        fixtures = make_fixtures(os.path.join(root, "fx"), a.bin)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
            futs = [ex.submit(run_case, c, a.bin, fixtures, root) for c in cases]
            for fut in futs:
                c, problems, err, wall = fut.result()
                if problems:
                    failed += 1
                    print(f"FAIL {c['id']} (cases.tsv:{c['line']}, {wall:.1f} s): {'; '.join(problems)}")
                    for ln in err.splitlines()[:6]:
                        print(f"     | {ln}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"bad-input corpus: {len(cases) - failed}/{len(cases)} cases pass in {time.monotonic() - t0:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
