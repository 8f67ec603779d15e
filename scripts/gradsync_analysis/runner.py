"""`scripts/study run`: expand a study into points, run the missing ones, collect study.h5.

Resumable: a point whose result file exists is not run again (the programs write their
result atomically, so a file that exists is complete). A point that fails (non-zero exit,
no result, or timeout) is recorded with its exit status and stderr tail in DIR/study.log
and in study.h5, and the study goes on (unless --stop-on-failure). When a failing program
did leave a result (gradsync-bench writes its file before exiting 1 on wrong results), the
file is moved to <label>.failed.h5 so that the next run tries the point again.

One run per results folder: DIR/.study.lock is held (flock) by the study and inherited by
the running point, so it stays held while any of them lives. A second run refuses while
the first study is alive; when the study died (kill -9) but its point lives on, the rerun
ends that point's process group first. A point also gets SIGTERM when the study process
dies (PR_SET_PDEATHSIG), and SIGTERM/SIGHUP of the study end the point's whole session.
A resume removes stale "*.tmp.*" files that killed programs left in DIR.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import h5py

from . import model as model_stage
from . import results, spec, studyfile, tools

TESTBED = os.path.join(tools.REPO, "scripts", "testbed.sh")
SWEEP_ARRAY = os.path.join(tools.REPO, "scripts", "slurm", "sweep-array.sbatch")
TORCHRUN = os.path.join(tools.REPO, "scripts", "torchrun")
TORCH_PYTHON = os.path.join(tools.REPO, "scripts", "torch-python")


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP of the study: handled like ^C (the running point is ended)."""


def _on_terminate(signum, _frame):
    raise Terminated(f"signal {signum}")


def _die_with_parent():
    """preexec_fn of a point: SIGTERM when the study process dies, even by kill -9."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except Exception:  # not Linux: the lock file still protects a rerun
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _end_group(pgid: int, grace_s: float = 5.0):
    """SIGTERM to a process group, SIGKILL after grace_s if anything of it is left."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    t_end = time.monotonic() + grace_s
    while time.monotonic() < t_end:
        if not _group_alive(pgid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class StudyLock:
    """DIR/.study.lock: flock held by the study and, through an inherited descriptor, by its
    running point. The file says "study <pid>" and, while a point runs, "point <pgid>"."""

    def __init__(self, out_dir: str, log):
        self.path = os.path.join(out_dir, ".study.lock")
        self.log = log
        self.fd = None

    def _read(self):
        try:
            with open(self.path) as fh:
                fields = dict(line.split(None, 1) for line in fh.read().splitlines() if " " in line)
            return {k: int(v) for k, v in fields.items() if v.strip().isdigit()}
        except (OSError, ValueError):
            return {}

    def acquire(self):
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        for attempt in range(2):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EACCES) or attempt == 1:
                    os.close(fd)
                    raise tools.ToolError(f"{self.path}: cannot lock the results folder: {e}") from None
                held = self._read()
                study, point = held.get("study"), held.get("point")
                if study and study != os.getpid() and _alive(study):
                    os.close(fd)
                    raise tools.ToolError(f"results folder {os.path.dirname(self.path)} is in use by a running study "
                                          f"(pid {study}); wait for it or stop it first") from None
                if point and _group_alive(point):
                    self.log(f"a point of a killed study still runs (process group {point}): ending it")
                    print(f"study: ending process group {point}, left running by a killed study", file=sys.stderr)
                    _end_group(point)
                # its last processes may take a moment to close the descriptor
                t_end = time.monotonic() + 10
                while time.monotonic() < t_end:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except OSError:
                        time.sleep(0.1)
                else:
                    os.close(fd)
                    raise tools.ToolError(f"results folder {os.path.dirname(self.path)} is still locked by processes "
                                          f"of an earlier study (see {self.path})") from None
                break
        self.fd = fd
        self._write()

    def _write(self, point: int | None = None):
        text = f"study {os.getpid()}\n" + (f"point {point}\n" if point else "")
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, text.encode(), 0)

    def point_started(self, pgid: int):
        self._write(pgid)

    def point_ended(self):
        self._write()

    def release(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def remove_stale_temps(out_dir: str, log) -> int:
    """Removes "<result>.tmp.<pid>" files (and probes) under out_dir: with the lock held no
    program of ours writes there, so every one is left by a killed run."""
    n = 0
    for root, _dirs, files in os.walk(out_dir):
        for f in files:
            if re.search(r"\.tmp\.\d+(\.\d+)?(\.probe)?$", f):
                path = os.path.join(root, f)
                try:
                    os.remove(path)
                    n += 1
                    log(f"removed stale temp file {path}")
                except OSError:
                    pass
    return n


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _hms(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


# Open MPI's own lines around a failed rank: they bury the program's message.
_MPI_NOISE = re.compile(r"^(-{20,}|Primary job +terminated normally|a non-zero exit code\. Per user-direction|"
                        r"mpirun (detected|noticed|has exited)|the job to be terminated|The first process to do so|"
                        r"\s*Process name:|\s*Exit code:|MPI_ABORT was invoked|with errorcode|NOTE: invoking MPI_ABORT|"
                        r"You may or may not see output|exactly when Open MPI kills|\[[^\]]+\] \d+ more process|"
                        r"\[[^\]]+\] Set MCA parameter \"orte_base_help_aggregate\"|"
                        r"# (task \d+ ended|run: |env |gradsync sweep: )|"
                        r"srun: (error: .*Exited with exit code|launch/slurm: _step_signal|Job step aborted)|\s*$)")


def _tail(path: str, lines: int = 20, chars: int = 4000) -> str:
    """The last lines of a log, without Open MPI's boilerplate (all of it if that is all)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            n = fh.tell()
            fh.seek(max(0, n - 64 * 1024))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    all_lines = text.rstrip().splitlines()
    kept = [ln for ln in all_lines if not _MPI_NOISE.match(ln)] or all_lines
    return "\n".join(kept[-lines:])[-chars:]


class Progress:
    """One line: done/total, ok/failed/reused, ETA (from the points run so far)."""

    def __init__(self, name: str, total: int, stream=sys.stderr):
        self.name, self.total, self.stream = name, total, stream
        self.tty = stream.isatty()
        self.done = self.ok = self.failed = self.reused = 0
        self.run_s = []
        self.width = 0

    def show(self, current: str = "", to_run: int = 0, final: bool = True):
        """final=False: a "now running" update, shown only on a terminal."""
        if not final and not self.tty:
            return
        eta = (sum(self.run_s) / len(self.run_s) * to_run) if self.run_s else (0.0 if to_run == 0 else math.nan)
        line = (f"study {self.name}: {self.done}/{self.total} done ({self.ok} ok, {self.failed} failed, "
                f"{self.reused} reused), ETA {_hms(eta)}" + (f" | {current}" if current else ""))
        if self.tty:
            pad = max(0, self.width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def end(self):
        if self.tty and self.width:
            self.stream.write("\n")
            self.stream.flush()
            self.width = 0


class Testbed:
    """Brings the emulated testbed (scripts/testbed.sh) up with the setting a point needs."""

    def __init__(self, log):
        self.current = None
        self.ours = set()
        self.log = log

    def _call(self, name, *args):
        argv = ["bash", TESTBED, "--name", name] + [str(a) for a in args]
        p = subprocess.run(argv, capture_output=True, text=True)
        self.log(f"testbed: $ {tools.quote(argv)} -> exit {p.returncode}; {p.stderr.strip()[-500:]}")
        return p

    def ensure(self, cfg: dict):
        if self.current == cfg:
            return
        up = ["up", "--hosts", cfg["hosts"], "--rate", cfg["rate"], "--nics", cfg["nics"],
              "--ranks-per-host", cfg["ranks_per_host"], "--subnet", cfg["subnet"]]
        if cfg.get("burst"):
            up += ["--burst", cfg["burst"]]
        if cfg.get("docker") == "1":  # a docker0 bridge on every host (testbed.sh up --docker)
            up += ["--docker"]
        if cfg.get("cc"):  # the hosts' TCP congestion control (testbed.sh's default: cubic)
            up += ["--cc", cfg["cc"]]
        p = self._call(cfg["name"], *up)
        if p.returncode != 0 and "already up with other settings" in p.stderr:
            self._call(cfg["name"], "down")
            p = self._call(cfg["name"], *up)
        if p.returncode != 0:
            self.current = None
            raise tools.ToolError(f"testbed up failed (exit {p.returncode}): "
                                  f"{(p.stderr.strip().splitlines() or ['?'])[-1]}")
        if "nothing to do" not in p.stderr:
            self.ours.add(cfg["name"])
        self.current = cfg

    def release(self, keep: bool):
        if keep:
            return
        for name in sorted(self.ours):
            self._call(name, "down")
        self.ours.clear()
        self.current = None


class Runner:
    def __init__(self, study, out_dir, bindir, launcher=None, ranks=None, dry_run=False,
                 stop_on_failure=False, keep_testbed=False, no_model=False, stream=sys.stdout):
        self.study = study
        self.out = os.path.abspath(out_dir)
        self.bindir = bindir
        self.launcher = launcher or study.launcher
        if ranks:
            for g in study.grids:
                if not g.ranks_fixed:
                    g.ranks = ranks
        self.points = study.points()
        self.dry_run = dry_run
        self.stop_on_failure = stop_on_failure
        self.keep_testbed = keep_testbed
        self.no_model = no_model
        self.stream = stream
        self.records = [dict() for _ in self.points]
        self.testbed = Testbed(self._log)
        self.proc = None
        self.lock = None

    # ---- logs ----------------------------------------------------------------------------
    def _log(self, msg: str):
        if self.dry_run:
            return
        os.makedirs(self.out, exist_ok=True)
        with open(os.path.join(self.out, "study.log"), "a") as fh:
            fh.write(f"{_now()} {msg}\n")

    def result_path(self, p) -> str:
        return os.path.join(self.out, p.result_relpath())

    def log_paths(self, p):
        base = os.path.join(self.out, "logs", p.grid, p.label)
        return base + ".out", base + ".err"

    # ---- commands ------------------------------------------------------------------------
    def program_argv(self, p) -> list:
        if self.study.runtime == "torch":
            # Under Slurm each task is one rank: gradsync_torch maps SLURM_PROCID/NTASKS/
            # LOCALID and the first node of the job to torch.distributed's env:// variables.
            exe = [TORCH_PYTHON, "-m", spec.TORCH_MODULES[p.program]]
        else:
            exe = [tools.program(spec.PROGRAMS[p.program], self.bindir)]
        return exe + spec.option_args(p.options) + ["--out", self.result_path(p)]

    def testbed_cfg(self, p) -> dict:
        cfg = self.study.testbed_config(p)
        if "hosts" not in self.study.testbed and "testbed.hosts" not in p.params:
            rph = int(cfg["ranks_per_host"])
            cfg["hosts"] = max(1, -(-p.ranks // rph))
        return {k: spec.fmt_value(v) if k != "hosts" else int(v) for k, v in cfg.items()}

    def torch_testbed_env(self, p, cfg) -> dict:
        """torch.distributed's rendezvous for a PyTorch point on the testbed (mpirun starts one
        python per rank; gradsync_torch maps OMPI_COMM_WORLD_* to RANK/WORLD_SIZE): the store
        on host 0's eth0 address, a port per point, gloo's data over the point's NIC (--net 2:
        eth1), and the PyTorch venv this study runs with. {} for gradsync points."""
        if self.study.runtime != "torch":
            return {}
        subnet = str(cfg["subnet"])
        nic = "eth1" if p.net is not None and spec.fmt_value(p.net) == "2" else "eth0"
        env = {"MASTER_ADDR": f"{subnet}.1", "MASTER_PORT": str(29600 + self.points.index(p) % 2000),
               "GLOO_SOCKET_IFNAME": nic}
        if os.environ.get("GRADSYNC_TORCH_VENV"):
            env["GRADSYNC_TORCH_VENV"] = os.path.abspath(os.environ["GRADSYNC_TORCH_VENV"])
        return env

    def command(self, p):
        """(argv, extra environment) of the point for the local and testbed launchers."""
        prog = self.program_argv(p)
        env = dict(p.env)
        if self.launcher == "local" and self.study.runtime == "torch":
            argv = [TORCHRUN, "--nproc-per-node", str(p.ranks), "-m", spec.TORCH_MODULES[p.program]]
            return argv + spec.option_args(p.options) + ["--out", self.result_path(p)], env
        if self.launcher == "local":
            argv = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(p.ranks)]
            for k, v in p.mca.items():
                argv += ["--mca", k, spec.fmt_value(v)]
            for k in env:
                argv += ["-x", k]
            if os.geteuid() == 0:
                env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            return argv + prog, env
        if self.launcher == "testbed":
            cfg = self.testbed_cfg(p)
            argv = ["bash", TESTBED, "--name", cfg["name"], "run", "--np", str(p.ranks),
                    "--timeout", str(int(p.timeout_s))]
            if p.net is not None:
                argv += ["--net", spec.fmt_value(p.net)]
            for k, v in p.mca.items():
                argv += ["--mca", k, spec.fmt_value(v)]
            for k, v in {**self.torch_testbed_env(p, cfg), **env}.items():
                argv += ["-x", f"{k}={v}"]
            return argv + ["--"] + prog, {}
        # slurm: one line of a sweep-array plan
        pre = [f"{k}={v}" for k, v in env.items()] + \
              [f"OMPI_MCA_{k}={spec.fmt_value(v)}" for k, v in p.mca.items()]
        line = (("env " + " ".join(pre) + " ") if pre else "") + "$GS_LAUNCH " + tools.quote(prog)
        return ["bash", "-c", line], {}

    def display_command(self, p) -> str:
        argv, env = self.command(p)
        if self.launcher == "slurm":
            return f"[slurm array, -n {p.ranks}] {argv[2]}"
        shown = {k: v for k, v in env.items() if not k.startswith("OMPI_ALLOW")}
        return (" ".join(f"{k}={v}" for k, v in shown.items()) + " " if shown else "") + tools.quote(argv)

    # ---- one point -----------------------------------------------------------------------
    def _collect(self, i):
        p, r = self.points[i], self.records[i]
        path = self.result_path(p)
        try:
            if p.program == "bench":
                b = results.Bench(path)
                r["bench"] = b
                r["metrics"] = b.metrics()
            else:
                r["metrics"] = results.Train(path).metrics()
        except Exception as e:  # an unreadable result is a failed point
            r["status"] = "failed"
            r["stderr_tail"] = (r.get("stderr_tail", "") + f"\nresult unreadable: {e}").strip()
            self._log(f"point {p.grid}/{p.label}: result {path} unreadable: {e}")

    def _stale_check(self, i):
        p = self.points[i]
        try:
            with h5py.File(self.result_path(p), "r") as f:
                argv = [x.decode() if isinstance(x, bytes) else str(x) for x in f.attrs.get("argv", [])]
        except Exception:
            return
        want = self.program_argv(p)[1:]

        def strip_out(a):
            return [x for j, x in enumerate(a) if x != "--out" and (j == 0 or a[j - 1] != "--out")]

        if argv and strip_out(argv[1:]) != strip_out(want):
            self._log(f"warning: {p.result_relpath()} was made with other options "
                      f"({tools.quote(argv[1:])}); delete it to run the point again")

    def _mark_failed(self, i, rc, err_path, note=""):
        p, r = self.points[i], self.records[i]
        r["status"] = "timeout" if note == "timeout" else "failed"
        r["exit_status"] = rc
        tail = _tail(err_path)
        if not tail:
            tail = _tail(self.log_paths(p)[0])
        r["stderr_tail"] = ((f"[{note}] " if note else "") + tail).strip()
        res = self.result_path(p)
        if os.path.exists(res):  # keep it for inspection, but not as a finished point
            os.replace(res, res[:-3] + ".failed.h5")
        self._log(f"point {p.grid}/{p.label} FAILED (exit {rc}{', ' + note if note else ''}); "
                  f"stderr tail:\n    " + "\n    ".join(tail.splitlines()[-8:]))

    def _run_one(self, i):
        p, r = self.points[i], self.records[i]
        argv, env = self.command(p)
        outp, errp = self.log_paths(p)
        os.makedirs(os.path.dirname(outp), exist_ok=True)
        os.makedirs(os.path.dirname(self.result_path(p)), exist_ok=True)
        r["command"] = self.display_command(p)
        self._log(f"point {p.grid}/{p.label}: $ {r['command']}")
        t0 = time.monotonic()
        rc, note = None, ""
        with open(outp, "w") as fo, open(errp, "w") as fe:
            fo.write(f"# {r['command']}\n")
            fo.flush()
            # Own session (a terminal's ^C reaches the study only); the lock descriptor is
            # inherited so the folder stays locked while the point lives; SIGTERM on the
            # study's death.
            self.proc = subprocess.Popen(argv, stdout=fo, stderr=fe, env=dict(os.environ, **env),
                                         start_new_session=True, cwd=tools.REPO,
                                         pass_fds=(self.lock.fd,) if self.lock and self.lock.fd is not None else (),
                                         preexec_fn=_die_with_parent)
            if self.lock:
                self.lock.point_started(self.proc.pid)
            # testbed.sh run has its own --timeout (it also ends the ranks in the hosts);
            # ours is the backstop.
            limit = p.timeout_s + (20 if self.launcher == "testbed" else 0)
            try:
                rc = self.proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                note = "timeout"
                self._kill()
                rc = self.proc.wait()
            except KeyboardInterrupt:
                # the point runs in its own session (no terminal SIGINT): end it ourselves
                self._kill()
                raise
            finally:
                self.proc = None
                if self.lock:
                    self.lock.point_ended()
        if self.launcher == "testbed" and rc == 124:
            note = "timeout"
        r["wall_s"] = time.monotonic() - t0
        r["exit_status"] = rc
        if rc == 0 and os.path.exists(self.result_path(p)):
            r["status"] = "ok"
            self._collect(i)
            if r["status"] == "ok":
                self._log(f"point {p.grid}/{p.label} ok in {r['wall_s']:.1f} s")
        else:
            if rc == 0:
                note = note or "no result file written"
            self._mark_failed(i, rc, errp, note)

    def _kill(self):
        """Ends the running point's whole session (mpirun and its ranks), SIGKILL after 5 s."""
        if self.proc is None:
            return
        _end_group(self.proc.pid)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    # ---- the study -----------------------------------------------------------------------
    def plan(self):
        """Prints one line per point: whether it would run, and its command."""
        n = len(self.points)
        todo = 0
        w = len(str(n))
        print(f"# study {self.study.name} ({self.study.path}{', scale ' + self.study.scale if self.study.scale else ''}): "
              f"{n} point(s), launcher {self.launcher}, results in {self.out}", file=self.stream)
        for p in self.points:
            exists = os.path.exists(self.result_path(p))
            todo += not exists
            state = "done" if exists else "run "
            print(f"[{p.index + 1:>{w}}/{n}] {state} {p.grid}/{p.label}: {self.display_command(p)}",
                  file=self.stream)
        print(f"# {todo} to run, {n - todo} done already", file=self.stream)
        return 0

    def _order(self):
        """Points in plan order, grouped by testbed setting (first appearance first)."""
        if self.launcher != "testbed":
            return list(range(len(self.points)))
        keys = []
        for p in self.points:
            k = tuple(sorted(self.testbed_cfg(p).items()))
            if k not in keys:
                keys.append(k)
        return sorted(range(len(self.points)),
                      key=lambda i: (keys.index(tuple(sorted(self.testbed_cfg(self.points[i]).items()))), i))

    def _preflight(self):
        """What every point needs, checked before the output folder is made: a missing
        program or venv is one error line, not one failed point per point."""
        if self.study.runtime == "torch":
            tools.need_torch_venv()
            return
        for prog in {p.program for p in self.points}:
            tools.need(tools.program(spec.PROGRAMS[prog], self.bindir), spec.PROGRAMS[prog])
        if self.launcher == "local" and not shutil.which("mpirun"):
            raise tools.ToolError("mpirun not found (Debian package openmpi-bin)")

    def run(self) -> int:
        if self.dry_run:
            return self.plan()
        self._preflight()
        os.makedirs(self.out, exist_ok=True)
        self.lock = StudyLock(self.out, self._log)
        self.lock.acquire()
        try:
            return self._run_locked()
        finally:
            self.lock.release()

    def _run_locked(self) -> int:
        kept = os.path.join(self.out, "study.toml")
        # Resuming from the folder's own copy (study run DIR/study.toml --out DIR) keeps it.
        if not (os.path.exists(kept) and os.path.samefile(self.study.path, kept)):
            shutil.copyfile(self.study.path, kept)
        remove_stale_temps(self.out, self._log)
        self._log(f"study {self.study.name} from {self.study.path}: {len(self.points)} point(s), "
                  f"launcher {self.launcher}, bin {self.bindir}")
        prog = Progress(self.study.name, len(self.points))
        todo = [i for i in self._order() if not os.path.exists(self.result_path(self.points[i]))]
        for i, p in enumerate(self.points):
            r = self.records[i]
            r["command"] = self.display_command(p)
            if i not in todo:
                r.update(status="ok", reused=True, exit_status=-1)
                self._stale_check(i)
                self._collect(i)
                prog.done += 1
                prog.reused += 1
                prog.ok += r["status"] == "ok"
                prog.failed += r["status"] != "ok"
            else:
                r["status"] = "pending"
        prog.show(to_run=len(todo))
        interrupted = False
        old_handlers = {sig: signal.signal(sig, _on_terminate) for sig in (signal.SIGTERM, signal.SIGHUP)}
        try:
            if self.launcher == "slurm":
                self._run_slurm(todo, prog)
            else:
                self._run_direct(todo, prog)
        except KeyboardInterrupt:
            interrupted = True
            self._kill()
            self._log("interrupted; points not run stay pending")
        finally:
            for sig, h in old_handlers.items():
                signal.signal(sig, h)
            prog.end()
            self.testbed.release(self.keep_testbed)
        info = {}
        if not self.no_model and self.study.model and not interrupted:
            info = model_stage.run_stage(self.study, self.points, self.records, self.out, self.bindir,
                                         self._log, self.stream)
        path = os.path.join(self.out, "study.h5")
        studyfile.write(path, self.study, self.points, self.records, info)
        nfail = sum(r.get("status") in ("failed", "timeout") for r in self.records)
        npend = sum(r.get("status") == "pending" for r in self.records)
        nok = sum(r.get("status") == "ok" for r in self.records)
        print(f"study {self.study.name}: {nok} ok, {nfail} failed, {npend} not run; table {path}; "
              f"log {os.path.join(self.out, 'study.log')}", file=self.stream)
        for i, r in enumerate(self.records):
            if r.get("status") in ("failed", "timeout"):
                p = self.points[i]
                last = (r.get("stderr_tail") or "").strip().splitlines()
                print(f"  FAILED {p.grid}/{p.label} (exit {r.get('exit_status')}): {last[-1] if last else ''}",
                      file=self.stream)
        for e in info.get("errors", []):
            print(f"  model: {e}", file=self.stream)
        if interrupted:
            return 130
        return 1 if nfail or npend else 0

    def _run_direct(self, todo, prog):
        left = len(todo)
        for i in todo:
            p = self.points[i]
            prog.show(f"running {p.grid}/{p.label}", left, final=False)
            if self.launcher == "testbed":
                try:
                    self.testbed.ensure(self.testbed_cfg(p))
                except tools.ToolError as e:
                    r = self.records[i]
                    r.update(status="failed", exit_status=-1, stderr_tail=str(e), wall_s=math.nan)
                    self._log(f"point {p.grid}/{p.label} FAILED: {e}")
                    prog.done += 1
                    prog.failed += 1
                    left -= 1
                    if self.stop_on_failure:
                        break
                    continue
            self._run_one(i)
            r = self.records[i]
            left -= 1
            prog.done += 1
            prog.run_s.append(r.get("wall_s", 0.0))
            if r["status"] == "ok":
                prog.ok += 1
            else:
                prog.failed += 1
            prog.show(f"last: {p.grid}/{p.label} {r['status']}", left)
            studyfile.write(os.path.join(self.out, "study.h5"), self.study, self.points, self.records)
            if r["status"] != "ok" and self.stop_on_failure:
                self._log("stopping after the first failure (--stop-on-failure)")
                break

    # ---- Slurm: one job array per rank count -----------------------------------------------
    def _run_slurm(self, todo, prog):
        if not shutil.which("sbatch"):
            raise tools.ToolError("sbatch not found (Debian package slurm-wlm); or use --launcher local")
        if not os.environ.get("SLURM_CONF") and not os.path.exists("/etc/slurm/slurm.conf"):
            raise tools.ToolError("no Slurm configured: start one with scripts/slurm/local-cluster.sh start "
                                  "and export the SLURM_CONF it prints")
        groups = {}
        for i in todo:
            groups.setdefault(self.points[i].ranks, []).append(i)
        for ranks, idx in groups.items():
            if self.stop_on_failure and prog.failed:
                break
            sdir = os.path.join(self.out, "slurm", f"np{ranks}-{int(time.time())}")
            os.makedirs(sdir, exist_ok=True)
            plan = os.path.join(sdir, "plan.txt")
            with open(plan, "w") as fh:
                fh.write(f"# study {self.study.name}: {len(idx)} point(s) with {ranks} rank(s)\n")
                for i in idx:
                    p = self.points[i]
                    os.makedirs(os.path.dirname(self.result_path(p)), exist_ok=True)
                    os.makedirs(os.path.dirname(self.log_paths(p)[0]), exist_ok=True)
                    fh.write(self.command(p)[0][2] + "\n")
                    self.records[i]["command"] = self.display_command(p)
            tmax = max(self.points[i].timeout_s for i in idx)
            argv = ["sbatch", "--wait", f"--array=1-{len(idx)}", "-n", str(ranks),
                    f"--time={max(1, math.ceil(tmax / 60))}", f"--output={sdir}/task-%a.log",
                    f"--chdir={tools.REPO}", SWEEP_ARRAY, plan, sdir]
            self._log(f"slurm: $ {tools.quote(argv)}")
            t0 = time.monotonic()
            seen = set()
            with open(os.path.join(sdir, "sbatch.log"), "w") as fo:
                self.proc = subprocess.Popen(argv, stdout=fo, stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    self._poll_slurm(idx, sdir, t0, seen, prog, todo)
                except KeyboardInterrupt:
                    self._scancel(os.path.join(sdir, "sbatch.log"))
                    raise
                rc = self.proc.returncode
                self.proc = None
            self._slurm_leftovers(idx, seen, sdir, rc, prog)

    def _poll_slurm(self, idx, sdir, t0, seen, prog, todo):
        while True:
            ended = self.proc.poll() is not None
            for k, i in enumerate(idx, start=1):
                if k in seen or not os.path.exists(os.path.join(sdir, f"task-{k}.rc")):
                    continue
                seen.add(k)
                self._slurm_point_done(i, k, sdir, time.monotonic() - t0, prog)
                prog.show(f"last: {self.points[i].grid}/{self.points[i].label} "
                          f"{self.records[i]['status']}", len(todo) - prog.done + prog.reused)
            if ended:
                return
            time.sleep(1.0)

    def _scancel(self, sbatch_log):
        """Cancels the array job whose id sbatch printed ("Submitted batch job N")."""
        try:
            with open(sbatch_log) as fh:
                words = fh.read().split()
            job = words[words.index("job") + 1]
        except (OSError, ValueError, IndexError):
            return
        subprocess.run(["scancel", job], capture_output=True)
        self._log(f"slurm: cancelled job {job}")

    def _slurm_leftovers(self, idx, seen, sdir, rc, prog):
        for k, i in enumerate(idx, start=1):
            if k not in seen:  # the task never ran (cancelled, node failure, time limit)
                r = self.records[i]
                r.update(status="failed", exit_status=-1, wall_s=math.nan,
                         stderr_tail=f"slurm task {k} left no exit status (sbatch exit {rc}): "
                                     + _tail(os.path.join(sdir, f"task-{k}.log"), 8))
                self._log(f"point {self.points[i].grid}/{self.points[i].label} FAILED: {r['stderr_tail']}")
                prog.done += 1
                prog.failed += 1

    def _slurm_point_done(self, i, k, sdir, elapsed, prog):
        p, r = self.points[i], self.records[i]
        with open(os.path.join(sdir, f"task-{k}.rc")) as fh:
            rc = int(fh.read().strip() or -1)
        log = os.path.join(sdir, f"task-{k}.log")
        outp, errp = self.log_paths(p)
        if os.path.exists(log):
            shutil.copyfile(log, errp)
        r["wall_s"] = elapsed
        r["exit_status"] = rc
        prog.done += 1
        prog.run_s.append(elapsed / max(1, len(prog.run_s) + 1))
        if rc == 0 and os.path.exists(self.result_path(p)):
            r["status"] = "ok"
            self._collect(i)
        else:
            self._mark_failed(i, rc, errp, "" if rc else "no result file written")
        prog.ok += r["status"] == "ok"
        prog.failed += r["status"] != "ok"
