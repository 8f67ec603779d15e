"""gradsync_torch.h5out — provenance and atomic HDF5 writing for the PyTorch bridge.

Purpose: every file the bridge writes carries the same provenance as gradsync's C++ writer
(runtime/core/provenance.hpp, results/README.md "Provenance") and appears atomically.
Approach: the bridge's modules write through gradsync_analysis.atomicfile (atomic_h5,
atomic_file): an unnamed O_TMPFILE inode, named and renamed over the final name only when
complete, so a rank killed mid-write (kill -9, or torchrun's SIGTERM after another rank
failed) leaves no file at all (the C++ writer removes its `<file>.tmp.<pid>` on SIGTERM,
not on kill -9). Strings are variable-length UTF-8, the type the C++ reader
(h5::Reader::attr_string / read_strings) expects; integers are int64.
"""
import datetime
import os
import re
import socket
import subprocess
import sys

import h5py
import numpy as np

SCHEMA_VERSION = 1
STR = h5py.string_dtype(encoding="utf-8")

# The communication-tuning environment recorded in /environment (as provenance.cpp).
_ENV_PREFIXES = ("NCCL_", "OMPI_MCA_", "GRADSYNC_", "UCX_", "GLOO_", "TORCH_", "MASTER_")
_ENV_EXACT = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
              "OMP_NUM_THREADS", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
_ENV_PLUMBING = re.compile(r"^OMPI_MCA_(orte_|ess|pmix|initial_wdir)")


def git_revision():
    """The checkout's revision as the C++ programs write it: 12 hex digits, "-dirty" when
    tracked files differ from HEAD, "unknown" outside git (cmake/git_revision.cmake)."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        rev = out.stdout.strip()
        if out.returncode != 0 or not rev:
            return "unknown"
        st = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True, timeout=10)
        return rev + "-dirty" if st.returncode == 0 and st.stdout.strip() else rev
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def comm_environment():
    env = {}
    for k, v in os.environ.items():
        if (k.startswith(_ENV_PREFIXES) or k in _ENV_EXACT) and not _ENV_PLUMBING.match(k):
            env[k] = v
    return env


def str_array(values):
    return np.array([str(v) for v in values], dtype=object).astype(STR)


def set_attr(obj, name, value):
    """int -> int64, float -> float64, str -> vlen UTF-8, list of str -> vlen string array,
    list of int -> int64 array (the types the C++ reader's attr() accepts)."""
    if isinstance(value, bool):
        obj.attrs.create(name, np.int64(int(value)))
    elif isinstance(value, (int, np.integer)):
        obj.attrs.create(name, np.int64(value))
    elif isinstance(value, (float, np.floating)):
        obj.attrs.create(name, np.float64(value))
    elif isinstance(value, str):
        obj.attrs.create(name, value, dtype=STR)
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value) and value:
        obj.attrs.create(name, str_array(value), dtype=STR)
    elif isinstance(value, (list, tuple)):
        obj.attrs.create(name, np.asarray(value, dtype=np.int64))
    else:
        raise TypeError(f"attribute {name}: unsupported type {type(value).__name__}")


def write_dataset(f, path, values, kind):
    if kind == "str":
        f.create_dataset(path, data=str_array(values), dtype=STR)
    elif kind == "int":
        f.create_dataset(path, data=np.asarray(values, dtype=np.int64).reshape(-1) if np.ndim(values) <= 1
                         else np.asarray(values, dtype=np.int64))
    else:
        f.create_dataset(path, data=np.asarray(values, dtype=np.float64))


def cpu_list(cpus=None):
    """This process's CPU affinity as a list string, e.g. "0-3,8" (core/cpus.hpp's format)."""
    cpus = sorted(set(os.sched_getaffinity(0) if cpus is None else cpus))
    out, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def _ranks_and_cpus_by(keys, cpu_lists):
    """The ranks grouped by key (hostname, machine id): {key: (ranks, distinct CPUs in the union
    of their lists)}; {} when the lists are missing or do not match the keys."""
    if not cpu_lists or len(cpu_lists) != len(keys):
        return {}
    per = {}
    for key, lst in zip(keys, cpu_lists):
        g = per.setdefault(key, [0, set()])
        g[0] += 1
        for part in filter(None, lst.split(",")):
            a, _, b = part.partition("-")
            g[1].update(range(int(a), int(b or a) + 1))
    return {key: (n, len(s)) for key, (n, s) in per.items()}


def cores_per_node(hostnames, cpu_lists):
    """Per host, the distinct CPUs in the union of its ranks' lists; the smallest (0: unknown)."""
    per = _ranks_and_cpus_by(hostnames, cpu_lists)
    return min(c for _, c in per.values()) if per and all(c for _, c in per.values()) else 0


def machine_id():
    """The kernel this process runs on (core/cpus.hpp machine_id): its boot id, which network
    namespaces and containers on one machine share; the hostname where it cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or hostname()
    except OSError:
        return hostname()


def machine_share(machines, cpu_lists):
    """(ranks, cores) of the machine whose ranks have the fewest CPUs each: its rank count and
    the union of their CPU lists (core/cpus.hpp machine_share); (0, 0) when unknown."""
    per = _ranks_and_cpus_by(machines, cpu_lists)
    if not per or not all(c for _, c in per.values()):
        return 0, 0
    return max(per.values(), key=lambda rc: rc[0] / rc[1])


def write_provenance(f, program, hostnames, argv=None, params=None, cpus=None, machines=None):
    """Root attributes and /environment, /params as results/README.md lists them; `cpus`:
    each rank's CPU list (cpu_list()), for cpu_affinity and cores_per_node; `machines`: each
    rank's machine_id(), for machine_ids, machine_ranks and machine_cores."""
    set_attr(f, "schema_version", SCHEMA_VERSION)
    set_attr(f, "program", program)
    set_attr(f, "argv", list(argv if argv is not None else sys.argv) or [""])
    set_attr(f, "git_revision", git_revision())
    set_attr(f, "created_utc", utc_now())
    set_attr(f, "hostnames", list(hostnames))
    set_attr(f, "nranks", len(hostnames))
    set_attr(f, "nnodes", len(set(hostnames)))
    if os.environ.get("SLURM_JOB_ID"):
        set_attr(f, "slurm_job_id", os.environ["SLURM_JOB_ID"])
    if cpus:
        set_attr(f, "cpu_affinity", list(cpus))
        set_attr(f, "cores_per_node", cores_per_node(list(hostnames), list(cpus)))
        if machines and len(machines) == len(cpus):
            ranks, cores = machine_share(list(machines), list(cpus))
            set_attr(f, "machine_ids", list(machines))
            set_attr(f, "machine_ranks", ranks)
            set_attr(f, "machine_cores", cores)
    env = f.create_group("environment")
    for k, v in sorted(comm_environment().items()):
        set_attr(env, k, v)
    p = f.create_group("params")
    for k, v in sorted((params or {}).items()):
        set_attr(p, k, str(v))


def hostname():
    return socket.gethostname()


# gloo's ring all-reduce between hosts moves each rank's share in segments of at most 1 MiB
# (at least two per rank), two in flight, and reduces one while the next arrives
# (gloo/allreduce.h kMaxSegmentSize, gloo/allreduce.cc ring): the model prices such steps
# pipelined, their sums hidden behind the link (netmodel/collectives.cpp level_step). On one
# host (0) the all-reduce is priced whole, as the calibrations of one-host runs were fitted.
GLOO_SEGMENT_BYTES = 1 << 20


def backend_chunk(backend, nnodes, op="allreduce"):
    """(chunk_bytes_used, chunk_reason) a result file records for the backend's all-reduce."""
    if backend == "gloo" and nnodes > 1 and op == "allreduce":
        return GLOO_SEGMENT_BYTES, ("gloo's ring between hosts: segments of at most 1 MiB, two in flight, "
                                    "each reduced while the next arrives (gloo/allreduce.h kMaxSegmentSize)")
    return 0, ""
