#!/usr/bin/python3
"""The fault-injection suite: real processes, real signals, a real full disk.

Every case starts its processes with a unique GS_FAULT_TAG in their environment, so the
survivors of a case can be found in /proc whatever process group or session they moved to.
Each case asserts, as it applies:
  - every process of the case gone within GRADSYNC_TIMEOUT_S + 5 s of the fault,
  - a named error (exit status and the words of the one gradsync line on stderr),
  - the result complete (readable, with its rows) or absent, and never a "*.tmp.*" file,
  - for studies: finished points kept, the interrupted one rerun.

  run_faults.py --bin BUILD/bin [--case REGEX] [--list]
Prints one line per case and, at the end, the case count and the worst time-to-exit.
"""
import argparse
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TIMEOUT_S = 6          # GRADSYNC_TIMEOUT_S of every case
GRACE_S = 5            # what the issue allows on top of it
BIG_SWEEP = ["-b", "1M", "-e", "16M", "-f", "2", "-n", "2000", "-w", "1"]  # 10+ s even on a fast host: a kill 1.5-2 s in lands inside it


class CaseFailed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise CaseFailed(msg)


def tagged_pids(tag):
    pids = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/environ", "rb") as fh:
                if b"GS_FAULT_TAG=" + tag.encode() in fh.read():
                    pids.append(int(d[6:]))
        except OSError:
            pass
    return [p for p in pids if p != os.getpid()]


def proc_info(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = dict(x.split(b"=", 1) for x in fh.read().split(b"\0") if b"=" in x)
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return os.path.basename(argv[0].decode()), env, state
    except OSError:
        return None, {}, None


def rank_pid(tag, prog, rank, wait_s=30):
    t_end = time.monotonic() + wait_s
    while time.monotonic() < t_end:
        for p in tagged_pids(tag):
            name, env, _ = proc_info(p)
            if name == prog and env.get(b"OMPI_COMM_WORLD_RANK") == str(rank).encode():
                return p
        time.sleep(0.1)
    raise CaseFailed(f"rank {rank} of {prog} never appeared")


def wait_gone(tag, since, limit_s):
    """Seconds from `since` until no tagged process is left (reaped zombies do not count)."""
    while True:
        live = [p for p in tagged_pids(tag) if proc_info(p)[2] not in (None, "Z")]
        now = time.monotonic()
        if not live:
            return now - since
        if now - since > limit_s:
            names = [proc_info(p)[0] for p in live]
            for p in live:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            raise CaseFailed(f"{len(live)} process(es) still alive {limit_s:.0f} s after the fault: {names}")
        time.sleep(0.1)


def temps_in(d):
    return [os.path.join(r, n) for r, _, fs in os.walk(d) for n in fs if re.search(r"\.tmp\.\d+", n)]


def bench_file_complete(path):
    import h5py
    with h5py.File(path, "r") as f:
        return "/oop" in f and len(f.attrs.get("argv", [])) > 0


class Ctx:
    def __init__(self, bindir, root):
        self.bin = bindir
        self.root = root
        self.worst = 0.0
        self.tag = None
        self.dir = None

    def env(self, **extra):
        e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                 OMPI_MCA_rmaps_base_oversubscribe="1", GRADSYNC_TIMEOUT_S=str(TIMEOUT_S),
                 GS_FAULT_TAG=self.tag, GRADSYNC_BIN=self.bin)
        e.update(extra)
        return e

    def prog(self, name):
        return os.path.join(self.bin, name)

    def mpirun(self, np_, prog, args):
        return ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np_), self.prog(prog)] + args

    def start(self, argv, **envx):
        return subprocess.Popen(argv, cwd=self.dir, env=self.env(**envx), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)

    def finish(self, p, since, limit_s=TIMEOUT_S + GRACE_S, record=True):
        try:
            out, err = p.communicate(timeout=limit_s + 30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            raise CaseFailed("the launcher did not exit")
        took = wait_gone(self.tag, since, limit_s)
        if record:  # a time-to-exit after a fault (not a whole normal run)
            self.worst = max(self.worst, took)
        return p.returncode, out, err, took


def gs_lines(err):
    return [ln for ln in err.splitlines() if ln.startswith("gradsync-") and "error" in ln]


def expect_error(err, words):
    lines = gs_lines(err)
    check(lines, f"no gradsync error line in stderr: {err[-400:]!r}")
    text = " ".join(lines).lower()
    for w in words:
        check(w.lower() in text, f"error line lacks '{w}': {lines[0]!r}")


# ---- cases -------------------------------------------------------------------------------------

def case_bench_mixed_e(c):
    """defect 2: ranks with different -e end at once with the option named, no file."""
    out = os.path.join(c.dir, "r.h5")
    argv = ["mpirun", "--oversubscribe", "-np", "1", c.prog("gradsync-bench"), "-e", "1K", "--out", out, ":",
            "-np", "1", c.prog("gradsync-bench"), "-e", "64K", "--out", out]
    t0 = time.monotonic()
    rc, _, err, _ = c.finish(c.start(argv), t0)
    check(rc == 2, f"exit {rc}, want 2")
    expect_error(err, ["option -e", "differs", "rank(s) 1"])
    check(len(gs_lines(err)) == 1, f"{len(gs_lines(err))} gradsync lines, want 1 (rank 0 only)")
    check(not os.path.exists(out) and not temps_in(c.dir), "a result or temp file was written")


def case_bench_mixed_env_chunk(c):
    """defect 2: a mixed GRADSYNC_CHUNK_BYTES is named under the option it feeds."""
    argv = ["mpirun", "--oversubscribe", "-np", "1", "-x", "GRADSYNC_CHUNK_BYTES=64K", c.prog("gradsync-bench"),
            "--algo", "ring", "-e", "1M", ":", "-np", "1", "-x", "GRADSYNC_CHUNK_BYTES=128K",
            c.prog("gradsync-bench"), "--algo", "ring", "-e", "1M"]
    t0 = time.monotonic()
    rc, _, err, _ = c.finish(c.start(argv), t0)
    check(rc == 2, f"exit {rc}, want 2")
    expect_error(err, ["--chunk-bytes", "differs"])


def case_bench_mixed_dtype(c):
    argv = ["mpirun", "--oversubscribe", "-np", "1", c.prog("gradsync-bench"), "-d", "half", "-e", "1K", ":",
            "-np", "1", c.prog("gradsync-bench"), "-e", "1K"]
    t0 = time.monotonic()
    rc, _, err, _ = c.finish(c.start(argv), t0)
    check(rc == 2, f"exit {rc}, want 2")
    expect_error(err, ["option -d", "differs"])


def case_bench_out_folder_before_measuring(c):
    """defect 5: --out naming a folder fails before the (long) sweep, exit 2."""
    t0 = time.monotonic()
    rc, _, err, took = c.finish(c.start(c.mpirun(2, "gradsync-bench", BIG_SWEEP + ["--out", c.dir])), t0)
    check(rc == 2, f"exit {rc}, want 2")
    expect_error(err, ["--out", "folder"])
    check(took < 20, f"took {took:.1f} s: the sweep ran before the check")


def case_bench_out_unwritable(c):
    t0 = time.monotonic()
    rc, _, err, _ = c.finish(c.start(c.mpirun(2, "gradsync-bench", BIG_SWEEP + ["--out", "/proc/gs-nope/x.h5"])), t0)
    check(rc == 2, f"exit {rc}, want 2")
    expect_error(err, ["--out", "/proc/gs-nope"])


def _bench_signal_rank(c, sig, rank, expect_words):
    out = os.path.join(c.dir, "r.h5")
    p = c.start(c.mpirun(2, "gradsync-bench", BIG_SWEEP + ["--out", out]))
    victim = rank_pid(c.tag, "gradsync-bench", rank)
    time.sleep(1.5)  # inside the sweep
    t0 = time.monotonic()
    os.kill(victim, sig)
    rc, _, err, _ = c.finish(p, t0)
    check(rc != 0, "exit 0 after a rank was killed")
    if expect_words:
        expect_error(err, expect_words)
    check(not os.path.exists(out), "a result file exists after the run died")
    check(not temps_in(c.dir), f"temp files left: {temps_in(c.dir)}")


def case_bench_kill9_rank1(c):
    _bench_signal_rank(c, signal.SIGKILL, 1, [])


def case_bench_kill9_rank0(c):
    _bench_signal_rank(c, signal.SIGKILL, 0, [])


def case_bench_sigstop_rank1(c):
    """A stopped rank: the other times out naming the wait (GRADSYNC_TIMEOUT_S), all end."""
    _bench_signal_rank(c, signal.SIGSTOP, 1, ["timed out", "GRADSYNC_TIMEOUT_S"])


def case_bench_sigterm_rank0(c):
    _bench_signal_rank(c, signal.SIGTERM, 0, [])


def _bench_kill_mpirun(c, delay_s):
    out = os.path.join(c.dir, "r.h5")
    p = c.start(c.mpirun(2, "gradsync-bench", BIG_SWEEP + ["--out", out]))
    rank_pid(c.tag, "gradsync-bench", 1)
    time.sleep(delay_s)
    t0 = time.monotonic()
    os.kill(p.pid, signal.SIGKILL)
    c.finish(p, t0)
    check(not os.path.exists(out) and not temps_in(c.dir), "a result or temp file after mpirun was killed")


def case_bench_kill9_mpirun_early(c):
    _bench_kill_mpirun(c, 0.0)


def case_bench_kill9_mpirun_mid(c):
    _bench_kill_mpirun(c, 2.0)


def case_bench_sigterm_mpirun_mid(c):
    out = os.path.join(c.dir, "r.h5")
    p = c.start(c.mpirun(2, "gradsync-bench", BIG_SWEEP + ["--out", out]))
    rank_pid(c.tag, "gradsync-bench", 1)
    time.sleep(2.0)
    t0 = time.monotonic()
    os.kill(p.pid, signal.SIGTERM)
    c.finish(p, t0)
    check(not os.path.exists(out) and not temps_in(c.dir), "a result or temp file after mpirun got SIGTERM")


OVERLAP_SWEEP = ["-b", "1M", "-e", "8M", "-n", "60", "-w", "1"]  # seconds long on 2 ranks


def _start_overlapping(c, argvs):
    """Starts the runs and makes sure all of them are measuring at the same time (else a
    later run would legitimately replace an earlier one's finished file)."""
    ps = []
    for argv in argvs:
        before = set(tagged_pids(c.tag))
        ps.append(c.start(argv))
        t_end = time.monotonic() + 30
        while time.monotonic() < t_end and not any(
                proc_info(q)[0] == "gradsync-bench" for q in set(tagged_pids(c.tag)) - before):
            time.sleep(0.05)
    time.sleep(0.5)
    if any(p.poll() is not None for p in ps):
        raise CaseFailed("SKIP: the runs did not overlap (machine too slow to start them together)")
    return ps


def case_bench_concurrent_same_out(c):
    """defect 4: two overlapping runs with one --out: both results survive, the second is told so."""
    out = os.path.join(c.dir, "same.h5")
    argv = c.mpirun(2, "gradsync-bench", OVERLAP_SWEEP + ["--out", out])
    t0 = time.monotonic()
    p1, p2 = _start_overlapping(c, [argv, argv])
    r1 = p1.communicate(timeout=300)
    r2 = p2.communicate(timeout=300)
    wait_gone(c.tag, t0, 300)
    rcs = sorted([p1.returncode, p2.returncode])
    files = sorted(glob.glob(os.path.join(c.dir, "same*.h5")))
    check(os.path.exists(out) and bench_file_complete(out), "no complete result under the --out name")
    check(rcs == [0, 1], f"exit statuses {rcs}, want one 0 and one 1")
    expect_error(r1[1] + r2[1], ["written by another run", "conflict"])
    check(len(files) == 2 and all(bench_file_complete(f) for f in files), f"results kept: {files}, want 2 complete")
    check(not temps_in(c.dir), "temp files left")


def case_bench_concurrent_default_names(c):
    """defect 4: overlapping runs with default names (same second) never collide."""
    argv = c.mpirun(2, "gradsync-bench", OVERLAP_SWEEP)
    t0 = time.monotonic()
    ps = _start_overlapping(c, [argv] * 3)
    for p in ps:
        p.communicate(timeout=300)
        check(p.returncode == 0, f"exit {p.returncode}")
    wait_gone(c.tag, t0, 300)
    files = glob.glob(os.path.join(c.dir, "results", "bench-*.h5"))
    check(len(files) == 3 and all(bench_file_complete(f) for f in files), f"{len(files)} results, want 3: {files}")


def _mount_tmpfs(path, size):
    os.makedirs(path, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True)
    return r.returncode == 0


def case_full_disk(c):
    """A disk already full: refused before measuring (exit 2); a disk that fills while the
    result is written: exit 1 naming the file, no temp, no result."""
    mnt = os.path.join(c.dir, "small")
    if not _mount_tmpfs(mnt, "64k"):
        raise CaseFailed("SKIP: cannot mount a tmpfs here")
    try:
        # 1. fill it completely
        fd = os.open(os.path.join(mnt, "filler"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while os.write(fd, b"\0" * 1024) > 0:
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        t0 = time.monotonic()
        rc, _, err, _ = c.finish(c.start(c.mpirun(2, "gradsync-bench", BIG_SWEEP + ["--out", mnt + "/r.h5"])), t0)
        check(rc == 2, f"full disk: exit {rc}, want 2")
        expect_error(err, ["--out", "No space left"])
        check(not temps_in(mnt), f"temp left on the full disk: {temps_in(mnt)}")
        for prog, args in (("gradsync-train", ["--model", "mlp", "--steps", "2", "--out", mnt + "/t.h5"]),):
            t0 = time.monotonic()
            rc, _, err, _ = c.finish(c.start(c.mpirun(1, prog, args)), t0)
            check(rc == 2, f"{prog} on a full disk: exit {rc}, want 2")
            expect_error(err, ["No space left"])
        # gradsync-model writes without a pre-check: the failed create must not leave a 0-byte temp
        t0 = time.monotonic()
        rc, _, err, _ = c.finish(c.start([c.prog("gradsync-model"), "predict", "--fabric", "tcp-10g",
                                          "--out", mnt + "/p.h5"]), t0)
        check(rc == 1, f"gradsync-model on a full disk: exit {rc}, want 1")
        expect_error(err, ["p.h5"])
        check(not os.path.exists(mnt + "/p.h5") and not temps_in(mnt), f"model left {os.listdir(mnt)}")
        os.remove(os.path.join(mnt, "filler"))
        # 2. room for the probe, not for the result (many sizes x 400 iterations of raw times)
        with open(os.path.join(mnt, "filler"), "wb") as fh:
            fh.write(b"\0" * (40 * 1024))
        t0 = time.monotonic()
        args = ["-b", "8", "-e", "64K", "-f", "2", "-n", "2000", "-w", "0", "--out", mnt + "/r.h5"]
        rc, _, err, _ = c.finish(c.start(c.mpirun(1, "gradsync-bench", args)), t0, limit_s=120, record=False)
        check(rc == 1, f"disk filling during the write: exit {rc}, want 1")
        expect_error(err, ["r.h5"])
        check(not os.path.exists(mnt + "/r.h5") and not temps_in(mnt), "a result or temp file on the full disk")
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)


def case_train_mixed_option(c):
    argv = ["mpirun", "--oversubscribe", "-np", "1", c.prog("gradsync-train"), "--model", "mlp", "--steps", "2",
            "--bucket-mb", "1", ":", "-np", "1", c.prog("gradsync-train"), "--model", "mlp", "--steps", "2",
            "--bucket-mb", "2"]
    t0 = time.monotonic()
    rc, _, err, _ = c.finish(c.start(argv), t0)
    check(rc != 0, "exit 0 with mixed options")
    expect_error(err, ["--bucket-mb", "differs"])


def case_train_usage_error_once(c):
    """defect 7: a bad option on 3 ranks is printed once (rank 0), exit 2."""
    for prog, args in (("gradsync-train", ["--model", "mlp", "--channels", "0"]),
                       ("gradsync-bench", ["-o", "avg", "--op", "allgather"])):
        t0 = time.monotonic()
        rc, _, err, _ = c.finish(c.start(c.mpirun(3, prog, args)), t0)
        check(rc == 2, f"{prog}: exit {rc}, want 2")
        check(len(gs_lines(err)) == 1, f"{prog}: {len(gs_lines(err))} error lines, want 1: {gs_lines(err)}")


def case_train_out_folder(c):
    t0 = time.monotonic()
    rc, _, err, took = c.finish(c.start(c.mpirun(2, "gradsync-train", ["--model", "mlp", "--steps", "400",
                                                                       "--out", c.dir])), t0)
    check(rc == 2, f"exit {rc}, want 2")
    expect_error(err, ["--out", "folder"])
    check(took < 20, f"took {took:.1f} s: training ran before the check")


def _train_kill(c, who):
    out = os.path.join(c.dir, "t.h5")
    p = c.start(c.mpirun(2, "gradsync-train", ["--model", "mlp", "--steps", "100000", "--out", out]))
    victim = p.pid if who == "mpirun" else rank_pid(c.tag, "gradsync-train", 1)
    rank_pid(c.tag, "gradsync-train", 1)
    time.sleep(2.0)
    t0 = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    c.finish(p, t0)
    check(not os.path.exists(out) and not temps_in(c.dir), "a result or temp file after the kill")


def case_train_kill9_rank1(c):
    _train_kill(c, "rank")


def case_train_kill9_mpirun(c):
    _train_kill(c, "mpirun")


def case_train_sigstop_rank1(c):
    out = os.path.join(c.dir, "t.h5")
    p = c.start(c.mpirun(2, "gradsync-train", ["--model", "mlp", "--steps", "100000", "--out", out]))
    victim = rank_pid(c.tag, "gradsync-train", 1)
    time.sleep(2.0)
    t0 = time.monotonic()
    os.kill(victim, signal.SIGSTOP)
    rc, _, err, _ = c.finish(p, t0)
    check(rc != 0, "exit 0")
    expect_error(err, ["timed out"])
    check(not os.path.exists(out) and not temps_in(c.dir), "a result or temp file")


STUDY = """name = "faults"
program = "bench"
ranks = 2
timeout_s = 120
[fixed]
b = "1M"
e = "8M"
n = {n}
{rest}
"""


def _study(c, n_iters, rest='w = 1\n[sweep]\nalgo = ["ring", "rd", "mpi"]'):
    """The study file (rest: its last [fixed] keys and its [sweep]) and the command running it."""
    path = os.path.join(c.dir, "faults.toml")
    with open(path, "w") as fh:
        fh.write(STUDY.format(n=n_iters, rest=rest))
    out = os.path.join(c.dir, "out")
    return ["/usr/bin/python3", os.path.join(REPO, "scripts", "study"), "run", path, "--out", out, "--no-model"], out


def _study_kill(c, sig):
    """defect 1: a killed study leaves nothing running; the rerun keeps finished points,
    reruns the interrupted one, and no two runs share a folder."""
    argv, out = _study(c, 60)
    p = c.start(argv)
    # wait until the second point runs
    t_end = time.monotonic() + 90
    while time.monotonic() < t_end:
        if len(glob.glob(os.path.join(out, "**", "*.h5"), recursive=True)) >= 1 and \
                any(proc_info(q)[0] == "gradsync-bench" for q in tagged_pids(c.tag)):
            break
        time.sleep(0.2)
    else:
        raise CaseFailed("the study never reached its second point")
    done_before = {f: os.stat(f).st_mtime_ns for f in glob.glob(os.path.join(out, "**", "*.h5"), recursive=True)}
    time.sleep(1.0)
    t0 = time.monotonic()
    os.kill(p.pid, sig)
    c.finish(p, t0)
    check(not temps_in(out), f"temp files left: {temps_in(out)}")
    # a temp file a killed program left (kill -9 while writing): the rerun removes it
    stale = os.path.join(out, "stale-point.h5.tmp.999999")
    with open(stale, "wb") as fh:
        fh.write(b"\0" * 96)
    # rerun: completes every point, keeps the finished ones
    c.tag = uuid.uuid4().hex
    t1 = time.monotonic()
    rc, sout, err, _ = c.finish(c.start(argv), t1, limit_s=300, record=False)
    check(rc == 0, f"rerun exit {rc}: {err[-300:]}")
    results = [f for f in glob.glob(os.path.join(out, "**", "*.h5"), recursive=True) if not f.endswith("study.h5")]
    check(len(results) == 3, f"{len(results)} point results after the rerun, want 3")
    for f, m in done_before.items():
        if not f.endswith("study.h5"):
            check(os.stat(f).st_mtime_ns == m, f"finished point {f} was run again")
    check(not temps_in(out), "temp files left after the rerun (a stale one was planted)")


def case_study_kill9(c):
    _study_kill(c, signal.SIGKILL)


def case_study_sigterm(c):
    _study_kill(c, signal.SIGTERM)


def case_study_second_run_refused(c):
    argv, out = _study(c, 150)
    p = c.start(argv)
    t_end = time.monotonic() + 60
    while time.monotonic() < t_end and not os.path.exists(os.path.join(out, ".study.lock")):
        time.sleep(0.1)
    time.sleep(1.0)
    r = subprocess.run(argv, cwd=c.dir, env=c.env(), capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "in use by a running study" in r.stderr, f"second run: exit {r.returncode}, {r.stderr!r}")
    t0 = time.monotonic()
    os.killpg(p.pid, signal.SIGTERM)
    c.finish(p, t0)


SLURM_PORTS = ("16857", "16858")  # this suite's own local Slurm (tests/slurm uses 16837/16838)


def case_slurm_time_expiry(c):
    """A study job killed by Slurm's --time: nothing left running, finished points kept,
    the interrupted one rerun (here with the local launcher)."""
    if os.geteuid() != 0 or not (shutil.which("slurmctld") and shutil.which("munged") and shutil.which("sbatch")):
        raise CaseFailed("SKIP: needs root, slurm-wlm and munge")
    cdir = os.path.join(c.dir, "cluster")
    cl = ["bash", os.path.join(REPO, "scripts", "slurm", "local-cluster.sh"), "--dir", cdir,
          "--ctld-port", SLURM_PORTS[0], "--slurmd-port", SLURM_PORTS[1]]
    r = subprocess.run(cl + ["start"], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise CaseFailed(f"SKIP: local Slurm did not start: {(r.stderr or r.stdout)[-300:]}")
    try:
        # Six points of 25 s each whatever the machine's speed: slurmctld checks the limit
        # every 30 s or so, so the minute's cut comes at 60-110 s (74 s and 106 s measured
        # here), after one to four finished points and never after all six. A point's length
        # is wall-clock time, not work: a bench sweep's speed on 2 busy vCPUs varies 2x from
        # run to run (6-13 ms an iteration of a 1-8 MiB ring within ten minutes), so each
        # point is an mlp run whose step waits for its loader's emulated I/O (one worker,
        # 32 samples x 5 ms asleep: 160 ms a step; the mlp's compute and all-reduce, a few ms,
        # hide behind it).
        steps = 150
        path = os.path.join(c.dir, "faults.toml")
        with open(path, "w") as fh:
            fh.write('name = "faults"\nprogram = "train"\nranks = 2\ntimeout_s = 120\n[fixed]\n'
                     f'model = "mlp"\nsteps = {steps}\n"loader-workers" = 1\n"data-time-us" = 5000\n'
                     '[sweep]\nseed = [1, 2, 3, 4, 5, 6]\n')
        out = os.path.join(c.dir, "out")
        argv = ["/usr/bin/python3", os.path.join(REPO, "scripts", "study"), "run", path, "--out", out, "--no-model"]
        planned = f"points of {steps} steps of 160 ms"
        job = os.path.join(c.dir, "job.sh")
        with open(job, "w") as fh:
            fh.write("#!/bin/bash\nexec " + " ".join(argv) + "\n")
        env = c.env(SLURM_CONF=os.path.join(cdir, "slurm.conf"))
        t0 = time.monotonic()
        sb = subprocess.run(["sbatch", "--wait", "--time=1", "-n", "2", "-o", os.path.join(c.dir, "job.log"), job],
                            cwd=c.dir, env=env, capture_output=True, text=True, timeout=400)
        took = time.monotonic() - t0
        if sb.returncode == 0:
            with open(os.path.join(c.dir, "job.log"), errors="replace") as fh:
                tail = " | ".join(fh.read().strip().splitlines()[-6:])
            raise CaseFailed(f"the job was not cut by --time (exit 0 after {took:.0f} s; {planned}); job.log ends: {tail}")
        wait_gone(c.tag, time.monotonic(), GRACE_S)
        check(not temps_in(out), f"temp files left: {temps_in(out)}")
        done = {f: os.stat(f).st_mtime_ns for f in glob.glob(os.path.join(out, "**", "*.h5"), recursive=True)
                if not f.endswith("study.h5")}
        check(done, f"no point finished within the job's minute (job ran {took:.0f} s; {planned})")
        print(f"     the job was cut after {took:.0f} s with {len(done)} of 6 points finished; {planned}", flush=True)
        c.tag = uuid.uuid4().hex
        rc, _, err, _ = c.finish(c.start(argv), time.monotonic(), limit_s=400, record=False)
        check(rc == 0, f"rerun exit {rc}: {err[-300:]}")
        results = [f for f in glob.glob(os.path.join(out, "**", "*.h5"), recursive=True) if not f.endswith("study.h5")]
        check(len(results) == 6, f"{len(results)} point results after the rerun, want 6")
        for f, m in done.items():
            check(os.stat(f).st_mtime_ns == m, f"finished point {f} was run again")
    finally:
        subprocess.run(cl + ["stop"], capture_output=True, timeout=120)


CASES = [(n[5:], f) for n, f in sorted(globals().items()) if n.startswith("case_")]

# What killed Open MPI jobs leave (core/stale_shm.hpp): a killed rank or mpirun never
# unlinks its shared-memory segment file, and a killed mpirun never removes its session
# directory; gradsync's next program start removes those at least SEGMENT_AGE_S old that no
# process maps (segments) or whose mpirun is gone (session directories).
HOST = socket.gethostname().split('.')[0]
SEGMENT_PREFIX = f"/dev/shm/vader_segment.{HOST}."
SESSION_TOP = os.path.join(os.environ.get("OMPI_MCA_orte_tmpdir_base") or os.environ.get("TMPDIR") or "/tmp",
                           f"ompi.{HOST}.{os.geteuid()}")
SEGMENT_AGE_S = 10


def pid_gone(pid):
    try:
        os.kill(pid, 0)
        return False
    except ProcessLookupError:
        return True
    except PermissionError:
        return False


def segment_files():
    """This user's segment files and the session directories of mpiruns that are gone."""
    out = set()
    for f in glob.glob(SEGMENT_PREFIX + "*"):
        try:
            if os.stat(f).st_uid == os.geteuid():
                out.add(f)
        except OSError:
            pass
    for d in glob.glob(os.path.join(SESSION_TOP, "pid.*")):
        if re.fullmatch(r"pid\.\d+", os.path.basename(d)) and pid_gone(int(os.path.basename(d)[4:])):
            out.add(d)
    return out


def mapped_files():
    out = set()
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps) as fh:
                out.update(ln.split(None, 5)[5].strip() for ln in fh if "/dev/shm/" in ln and len(ln.split(None, 5)) == 6)
        except OSError:
            pass
    return out


def segments_left(c, before):
    """The segment files and session directories the suite's killed jobs left (new since
    `before`; files mapped by no process, directories of mpiruns that are gone) must be gone
    after the next gradsync program starts. Returns an error or None."""
    left = sorted(segment_files() - before - mapped_files())
    if not left:
        print("ok   segments: none of the killed jobs' segment files or session directories is left", flush=True)
        return None
    newest = max(os.stat(f).st_mtime for f in left if os.path.exists(f))
    time.sleep(max(0.0, newest + SEGMENT_AGE_S + 1 - time.time()))
    c.tag, c.dir = uuid.uuid4().hex, c.root
    rc, _, err, _ = c.finish(c.start(c.mpirun(1, "gradsync-bench", ["-b", "8", "-e", "8", "-n", "1", "-w", "0",
                                                                   "--out", os.path.join(c.root, "sweep.h5")])),
                             time.monotonic(), record=False)
    if rc != 0:
        return f"gradsync-bench after the cases: exit {rc}: {err[-300:]}"
    still = [f for f in left if os.path.exists(f) and f not in mapped_files()]
    if still:
        return f"{len(still)} of the {len(left)} segment files killed jobs left are still there: {still}"
    print(f"ok   segments: the {len(left)} Open MPI segment file(s) and session director(ies) the killed jobs "
          "left were removed by the next program start", flush=True)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--case", default="")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    cases = [(n, f) for n, f in CASES if re.search(a.case, n)]
    if a.list:
        for n, f in cases:
            print(f"{n:36s} {(f.__doc__ or '').strip().splitlines()[0] if f.__doc__ else ''}")
        return 0
    for prog in ("gradsync-bench", "gradsync-train"):
        if not os.access(os.path.join(a.bin, prog), os.X_OK):
            print(f"run_faults: {prog} not built: skipped")
            return 77
    if not shutil.which("mpirun"):
        print("run_faults: no mpirun: skipped")
        return 77
    root = tempfile.mkdtemp(prefix="gs-faults-")
    os.chmod(root, 0o755)  # munged wants its socket's folders searchable by all
    c = Ctx(a.bin, root)
    failed = skipped = 0
    t_all = time.monotonic()
    segments_before = segment_files()
    try:
        for name, fn in cases:
            c.tag = uuid.uuid4().hex
            c.dir = os.path.join(root, name)
            os.makedirs(c.dir)
            t0 = time.monotonic()
            try:
                fn(c)
                print(f"ok   {name} ({time.monotonic() - t0:.1f} s)", flush=True)
            except CaseFailed as e:
                if str(e).startswith("SKIP"):
                    skipped += 1
                    print(f"skip {name}: {e}", flush=True)
                else:
                    failed += 1
                    print(f"FAIL {name}: {e}", flush=True)
            finally:
                for pid in tagged_pids(c.tag):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
        err = segments_left(c, segments_before)
        if err:
            failed += 1
            print(f"FAIL segments: {err}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"fault suite: {len(cases) - failed - skipped}/{len(cases)} cases pass ({skipped} skipped), "
          f"worst time-to-exit after a fault {c.worst:.1f} s (limit GRADSYNC_TIMEOUT_S {TIMEOUT_S} + {GRACE_S} s), "
          f"{time.monotonic() - t_all:.0f} s in all")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
