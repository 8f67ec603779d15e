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
"""
import argparse
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


class Parser(argparse.ArgumentParser):
    """argparse with the programs' one-line usage errors: every rank finds the same bad
    option, so rank 0 alone prints `<prog>: error: <why>` and every rank exits 2; the other
    ranks wait 2 s first, so that a launcher tearing the job down on the first failed
    process cannot lose rank 0's line (as gradsync-bench and gradsync-train do)."""

    def error(self, message):
        if launcher_rank() == 0:
            sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
            sys.stderr.flush()
        else:
            time.sleep(2)
        sys.exit(2)


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


def init_distributed(prog, o):
    """The programs' common start: env:// variables from the launcher, torch's threads, the
    process group (o.backend, else nccl on cuda and gloo on cpu). Returns the backend, or
    None after printing the one-line error when no launcher started this process."""
    import sys

    import torch
    import torch.distributed as dist

    env_from_launcher()
    if "RANK" not in os.environ:
        print(f"gradsync_torch.{prog}: error: not launched by torchrun, srun or mpirun (RANK unset); "
              f"run: scripts/torchrun --nproc-per-node 2 -m gradsync_torch.{prog} ...", file=sys.stderr)
        return None
    torch.set_num_threads(o.threads)
    backend = o.backend or ("nccl" if o.device == "cuda" else "gloo")
    dist.init_process_group(backend)
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
