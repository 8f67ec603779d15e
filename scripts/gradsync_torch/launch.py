"""gradsync_torch.launch — torch.distributed's env:// variables from srun or mpirun.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
Under `srun -n N scripts/torch-python -m gradsync_torch.example ...` (one task per rank) or
`mpirun -np N ...` they are derived here, when RANK is unset:
  RANK, WORLD_SIZE, LOCAL_RANK  SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
                                (Open MPI: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK)
  LOCAL_WORLD_SIZE              the first number of SLURM_TASKS_PER_NODE (OMPI_COMM_WORLD_LOCAL_SIZE)
  MASTER_ADDR                   the job's first node (`scontrol show hostnames`; 127.0.0.1 on one node)
  MASTER_PORT                   20000 + (SLURM_JOB_ID x 7 + SLURM_STEP_ID) mod 20000, so
                                concurrent job steps on one node do not collide; else 29500
Variables already set are left alone.

--comm-sched (the bench and the example; GRADSYNC_TORCH_COMM_SCHED): the scheduling policy
of gloo's communication threads (its TCP event loop and its work threads). On a host with
fewer cores than busy threads, a woken thread of the default policy can wait for the
running one's slice, up to a scheduler tick (4 ms at HZ=250): measured here (2 vCPUs,
2 ranks), a third of gloo's 1 KiB all-reduces took 2-8 ms instead of ~0.3 ms. With
`rr` those threads preempt ordinary compute at once, as they would on a host with a core
to spare; the ranks' own threads keep the default policy.

GRADSYNC_TIMEOUT_S (default 300, as gradsync's own programs, core/params.hpp) is the process
group's timeout: a collective that waits longer for a peer (a rank stopped or stuck, not
dead) fails instead of waiting torch's default 30 minutes, and the launcher ends the run.
Under torchrun each worker also asks Linux for SIGTERM when its launcher dies: torchrun
starts its workers in sessions of their own, so a launcher killed outright (SIGKILL, which
it cannot pass on) left them running, waiting in their collectives.
"""
import argparse
import datetime
import os
import re
import subprocess
import sys
import time


def _first_node(nodelist):
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=20)
        names = out.stdout.split()
        if out.returncode == 0 and names:
            return names[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return re.split(r"[\[,]", nodelist)[0]


def launcher_rank(env=os.environ):
    """This process's rank as its launcher numbers it, before torch.distributed starts
    (torchrun's RANK, Slurm's SLURM_PROCID, Open MPI's OMPI_COMM_WORLD_RANK); 0 without one."""
    for var in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if env.get(var, "").strip().isdigit():
            return int(env[var])
    return 0


ENV_HELP = ("environment: GRADSYNC_TIMEOUT_S (seconds, default 300) bounds every collective's wait for a "
            "peer: a rank that stops fails the others' collectives instead of a hang (torch's own default is 30 "
            "minutes); under torchrun a worker also gets SIGTERM when its launcher dies.")


class Parser(argparse.ArgumentParser):
    """argparse with the programs' one-line usage errors: every rank finds the same bad
    option, so rank 0 alone prints `<prog>: error: <why>` and every rank exits 2; the other
    ranks wait 2 s first, so that a launcher tearing the job down on the first failed
    process cannot lose rank 0's line (as gradsync-bench and gradsync-train do). --help ends
    with the environment every program reads (ENV_HELP)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("epilog", ENV_HELP)
        super().__init__(*args, **kwargs)

    def error(self, message):
        error_line(f"{self.prog}: error: {message} (see --help)")
        sys.exit(2)


def error_line(text):
    """An error every rank finds alike: rank 0 alone writes `text`; the other ranks wait 2 s
    first, so that a launcher tearing the job down on the first failed process cannot lose
    rank 0's line."""
    if launcher_rank() == 0:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    else:
        time.sleep(2)


def env_from_launcher(env=os.environ):
    """Fills the env:// variables from Slurm or Open MPI; returns the launcher's name or None."""
    if "RANK" in env:
        return "torchrun"
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        env["RANK"], env["WORLD_SIZE"] = env["SLURM_PROCID"], env["SLURM_NTASKS"]
        env.setdefault("LOCAL_RANK", env.get("SLURM_LOCALID", "0"))
        per_node = re.match(r"\d+", env.get("SLURM_TASKS_PER_NODE", env["SLURM_NTASKS"]))
        env.setdefault("LOCAL_WORLD_SIZE", per_node.group(0) if per_node else env["SLURM_NTASKS"])
        nodes = env.get("SLURM_JOB_NODELIST", env.get("SLURM_NODELIST", ""))
        single = env.get("SLURM_JOB_NUM_NODES", env.get("SLURM_NNODES", "1")) == "1"
        env.setdefault("MASTER_ADDR", "127.0.0.1" if single or not nodes else _first_node(nodes))
        job = int(env.get("SLURM_JOB_ID", "0") or 0) * 7 + int(env.get("SLURM_STEP_ID", "0") or 0)
        env.setdefault("MASTER_PORT", str(20000 + job % 20000))
        return "srun"
    if "OMPI_COMM_WORLD_RANK" in env:
        env["RANK"], env["WORLD_SIZE"] = env["OMPI_COMM_WORLD_RANK"], env["OMPI_COMM_WORLD_SIZE"]
        env.setdefault("LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
        env.setdefault("LOCAL_WORLD_SIZE", env.get("OMPI_COMM_WORLD_LOCAL_SIZE", env["WORLD_SIZE"]))
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        env.setdefault("MASTER_PORT", "29500")
        return "mpirun"
    return None


# gloo's threads as /proc names them (15 characters at most): the TCP transport's event
# loop and ProcessGroupGloo's work threads.
COMM_THREADS = ("gloo_tcp_loop", "pt_gloo_runloop")
SCHED_POLICIES = {"other": os.SCHED_OTHER, "rr": os.SCHED_RR, "fifo": os.SCHED_FIFO}


def add_comm_sched_option(ap):
    ap.add_argument("--comm-sched", default=os.environ.get("GRADSYNC_TORCH_COMM_SCHED", "other"),
                    help="scheduling policy of gloo's communication threads: other (the default policy) | "
                         "rr[:PRIO] | fifo[:PRIO] (real-time, priority 1..99, default 1; needs root or "
                         "CAP_SYS_NICE): on a host with fewer cores than busy threads a woken gloo thread "
                         "otherwise waits up to a scheduler tick behind compute (default "
                         "$GRADSYNC_TORCH_COMM_SCHED, else other)")


def parse_comm_sched(text):
    """'other' | 'rr[:PRIO]' | 'fifo[:PRIO]' -> (name, priority); ValueError names the option."""
    name, _, prio = text.strip().lower().partition(":")
    if name not in SCHED_POLICIES:
        raise ValueError(f"option --comm-sched: unknown policy '{text}' (known: other, rr[:PRIO], fifo[:PRIO])")
    if name == "other":
        if prio:
            raise ValueError(f"option --comm-sched: 'other' takes no priority, got '{text}'")
        return name, 0
    if not prio:
        return name, 1
    if not prio.isdigit() or not 1 <= int(prio) <= 99:
        raise ValueError(f"option --comm-sched: the priority must be 1..99, got '{text}'")
    return name, int(prio)


def comm_threads():
    """[(tid, name)] of this process's gloo communication threads."""
    out = []
    for tid in sorted(os.listdir("/proc/self/task"), key=int):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:  # the thread ended
            continue
        if name.startswith(COMM_THREADS):
            out.append((int(tid), name))
    return out


def comm_sched_now():
    """The policies gloo's threads run under now, e.g. 'rr:1 (gloo_tcp_loop, pt_gloo_runloop x2)'
    or 'other (...)'; 'none' without such threads. Result files record it as comm_sched."""
    names = {v: k for k, v in SCHED_POLICIES.items()}
    seen = {}
    for tid, name in comm_threads():
        try:
            pol = os.sched_getscheduler(tid)
            prio = os.sched_getparam(tid).sched_priority
        except OSError:
            continue
        key = names.get(pol, f"policy{pol}") + (f":{prio}" if pol in (os.SCHED_FIFO, os.SCHED_RR) else "")
        seen.setdefault(key, {}).setdefault(name, 0)
        seen[key][name] += 1
    if not seen:
        return "none"
    return "; ".join(f"{k} ({', '.join(n if c == 1 else f'{n} x{c}' for n, c in v.items())})" for k, v in seen.items())


def apply_comm_sched(spec):
    """Puts this process's gloo threads under spec: 'rr', 'rr:5', 'fifo:2', 'other', or
    (name, priority) from parse_comm_sched. Call it after init_process_group and one
    collective (gloo's threads are up then). OSError or RuntimeError says why it could not
    (ValueError: a bad spec)."""
    name, prio = parse_comm_sched(spec) if isinstance(spec, str) else spec
    threads = comm_threads()
    if not threads:
        raise RuntimeError("no gloo communication thread in this process (the policy applies to gloo's threads)")
    for tid, _ in threads:
        os.sched_setscheduler(tid, SCHED_POLICIES[name], os.sched_param(prio))


def collective_timeout_s():
    """GRADSYNC_TIMEOUT_S in seconds (default 300); ValueError with the one-line reason when it
    is not a number > 0."""
    raw = os.environ.get("GRADSYNC_TIMEOUT_S", "").strip() or "300"
    try:
        v = float(raw)
    except ValueError:
        v = float("nan")
    if not (v > 0 and v < float("inf")):
        raise ValueError(f"environment GRADSYNC_TIMEOUT_S: must be > 0 seconds (got {raw})")
    return v


def die_with_launcher():
    """Under torchrun (TORCHELASTIC_RUN_ID set): SIGTERM to this process when its parent, the
    launcher, exits (prctl PR_SET_PDEATHSIG), and at once when it has exited already.
    Elsewhere (srun, mpirun: their own clean-up) nothing."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    launcher = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, int(signal.SIGTERM), 0, 0, 0) != 0:  # PR_SET_PDEATHSIG = 1
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != launcher:  # it died before the request
        os.kill(os.getpid(), signal.SIGTERM)


def init_distributed(prog, o):
    """The programs' common start: env:// variables from the launcher, torch's threads, the
    process group (o.backend, else nccl on cuda and gloo on cpu). Returns the backend, or
    None after printing the one-line error when no launcher started this process."""
    env_from_launcher()
    if "RANK" not in os.environ:
        print(f"gradsync_torch.{prog}: error: not launched by torchrun, srun or mpirun (RANK unset); "
              f"run: scripts/torchrun --nproc-per-node 2 -m gradsync_torch.{prog} ...", file=sys.stderr)
        return None
    die_with_launcher()
    # Every rank finds a bad value alike: rank 0's line, the others wait (error_line).
    try:
        timeout = collective_timeout_s()
    except ValueError as e:
        error_line(f"python -m gradsync_torch.{prog}: error: {e}")
        return None

    import torch
    import torch.distributed as dist
    torch.set_num_threads(o.threads)
    backend = o.backend or ("nccl" if o.device == "cuda" else "gloo")
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    spec = getattr(o, "comm_sched_spec", None)
    if spec is not None and spec[0] != "other":
        why = None
        if backend != "gloo":
            why = f"applies to gloo's threads, the backend is {backend}"
        else:
            try:
                dist.barrier()  # gloo's threads are all up once a collective has run
                apply_comm_sched(spec)
            except (OSError, RuntimeError) as e:
                why = (f"cannot set SCHED_{spec[0].upper()}: {e.strerror or e} (needs root or CAP_SYS_NICE)"
                       if isinstance(e, OSError) else str(e))
        failed = torch.tensor([1 if why else 0])
        if backend == "gloo":  # every rank stops if one could not (no rank left waiting in a collective)
            dist.all_reduce(failed, op=dist.ReduceOp.MAX)
        if int(failed):
            if why:
                sys.stderr.write(f"gradsync_torch.{prog}: error: rank {dist.get_rank()}: option --comm-sched "
                                 f"{o.comm_sched}: {why}\n")  # one write: the ranks share the stream
                sys.stderr.flush()
            dist.destroy_process_group()
            return None
    return backend


def exit_now(rc):
    """Ends the process with rc after flushing stdout and stderr, skipping the interpreter's
    C++ teardown. With torch 2.15 and gloo a worker aborts now and then in that teardown,
    after main() has returned and every file is closed ("terminate called without an active
    exception", no Python frame: about 1 run in 6 of the example with --no-record on this
    machine), which torchrun reports as a failed rank. Public reports of the same abort:
    pytorch/pytorch#190489 (gloo, "terminate called without an active exception") and the
    analysis in pytorch/pytorch#179291 (gloo's worker threads still hold work objects whose
    tensors reference Python objects while the interpreter is torn down)."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
