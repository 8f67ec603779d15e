#!/usr/bin/python3
"""End-to-end checks of gradsync-bench: run it as a user would, read its table, its --json
and its HDF5 file, and check that they say the same thing and follow the documented schema
(results/README.md); check that bad options are refused with status 2 before anything runs.

    check_bench.py --bench BIN --case NAME -- MPIEXEC [FLAGS...]

The launcher prefix after "--" is completed with "-np N BIN ARGS". Each case runs in a
fresh temporary directory. Exit status 0 = pass, 1 = fail, 77 = skipped (no h5py).
"""

import argparse
import functools
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
except ImportError as e:  # run with /usr/bin/python3 (Debian's python3-h5py)
    print(f"SKIP: {e} (needs h5py and numpy)")
    sys.exit(77)

ELEM = {"float": 4, "half": 2, "bfloat16": 2}
OPS_PER_RANK = {"reducescatter", "allgather", "alltoall"}  # sizes rounded to elem * nranks
REDOP_OPS = {"allreduce", "reducescatter"}
ROOT_OPS = {"broadcast"}
RUN_TIMEOUT_S = 120


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


class Bench:
    def __init__(self, binary, launcher, workdir):
        self.binary = binary
        self.launcher = launcher
        self.workdir = workdir

    def run(self, np_, args, mpi=True, env_extra=None):
        cmd = (self.launcher + ["-np", str(np_)] if mpi else []) + [self.binary] + args
        env = dict(os.environ)
        env.setdefault("GRADSYNC_TIMEOUT_S", "60")
        env.update(env_extra or {})
        p = subprocess.run(cmd, cwd=self.workdir, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        return p

    def run_ok(self, np_, args):
        p = self.run(np_, args)
        self.last_stderr = p.stderr  # for cases that read the log (GRADSYNC_DEBUG=INFO)
        if p.returncode != 0:
            raise Failure(f"exit status {p.returncode} for np={np_} {' '.join(args)}\n"
                          f"--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
        return p.stdout


# ---- what the bench should have done ---------------------------------------------------------

def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text)
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def sweep(minb, maxb, factor=2, step=0):
    sizes, s = [], minb
    while s <= maxb:
        sizes.append(s)
        s = s + step if step else (1 if s == 0 else s * factor)
    return sizes


def expected_rows(op, dtype, nranks, sizes):
    """(size_bytes, count) per swept size, with nccl-tests' rounding."""
    if op == "pingpong":
        return [(s, s) for s in sizes]
    e = ELEM[dtype]
    rows = []
    for s in sizes:
        elems = s // e
        if op in OPS_PER_RANK:
            count = elems // nranks
            rows.append((count * nranks * e, count))
        else:
            rows.append((elems * e, elems))
    return rows


def bus_factor(op, n):
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in OPS_PER_RANK:
        return (n - 1) / n
    return 1.0


# ---- the table -------------------------------------------------------------------------------

def parse_table(stdout, op, auto):
    lines = stdout.splitlines()
    rows = [l.split() for l in lines if l.strip() and not l.startswith("#")]
    width = 4 if op == "pingpong" else 13 + (1 if auto else 0)
    for r in rows:
        check(len(r) == width, f"table row has {len(r)} fields, expected {width}: {r}")
    if op != "pingpong":
        check(any(re.match(r"#\s+size\s+count\s+type\s+redop\s+root\s+time\s+algbw\s+busbw\s+#wrong\s+time\s+algbw"
                           r"\s+busbw\s+#wrong", l) for l in lines), "no nccl-tests column header")
        check(any(re.match(r"#\s+\(B\)\s+\(elements\)\s+\(us\)\s+\(GB/s\)\s+\(GB/s\)\s+\(us\)", l) for l in lines),
              "no units line")
    oob = [l for l in lines if l.startswith("# Out of bounds values :")]
    avg = [l for l in lines if l.startswith("# Avg bus bandwidth    :")]
    out = [l for l in lines if l.startswith("# Results written to ")]
    check(len(oob) == 1 and len(avg) == 1 and len(out) == 1, "footer lines missing:\n" + stdout)
    i = lines.index(avg[0])
    check(i + 1 < len(lines) and lines[i + 1] == "", "no blank line after the footer")
    return rows, oob[0], float(avg[0].split(":")[1]), out[0][len("# Results written to "):].strip()


def close(text, value, decimals=None):
    """A table number agrees with the file's value up to the table's rounding."""
    if decimals is None:
        decimals = len(text.split(".")[1]) if "." in text else 0
    return abs(float(text) - value) <= 0.5 * 10 ** -decimals + 1e-9 * abs(value)


# ---- the file --------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def checkout_revision():
    """This checkout's HEAD as result files name it (12 hex digits), "unknown" outside git."""
    head = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True)
    return head.stdout.strip() if head.returncode == 0 and head.stdout.strip() else "unknown"


def check_file(path, op, algo, dtype, nranks, iters, table_rows, check_on, redop="sum", root=0, warmup=None):
    check(os.path.isfile(path), f"result file {path} missing")
    check(not glob.glob(os.path.join(os.path.dirname(path) or ".", "*.tmp.*")), "a temporary file was left behind")
    with h5py.File(path, "r") as f:
        a = f.attrs
        for name in ("schema_version", "program", "argv", "git_revision", "created_utc", "hostnames", "nranks",
                     "nnodes", "op", "algo", "dtype", "redop", "ranks_per_node", "chunk_bytes", "channels",
                     "iters", "warmup", "check", "root", "chunk_bytes_used", "chunk_reason"):
            check(name in a, f"root attribute '{name}' missing")
        if op == "allreduce" and algo == "ring" and a["chunk_bytes"] == 0 and a["nranks"] > 1:  # auto, one node
            check(a["chunk_bytes_used"] == 4 << 20 and "shared-memory" in str(a["chunk_reason"]),
                  f"auto chunk {a['chunk_bytes_used']} ({a['chunk_reason']!r}), want 4 MiB on one node")
        check(a["program"] == "gradsync-bench", "program attribute")
        # the revision the build was made from (taken at build time; "-dirty" with uncommitted changes)
        want = checkout_revision()
        check(str(a["git_revision"]).split("-dirty")[0] == want,
              f"git_revision {a['git_revision']!r}, the checkout is at {want} (rebuild after a commit)")
        check(a["op"] == op and a["algo"] == algo, f"op/algo attributes {a['op']}/{a['algo']}")
        check(a["dtype"] == ("byte" if op == "pingpong" else dtype), f"dtype attribute {a['dtype']}")
        check(a["redop"] == (redop if op in REDOP_OPS else "none"), f"redop attribute {a['redop']}")
        check(a["root"] == (root if op in ROOT_OPS else -1), f"root attribute {a['root']}")
        check(a["nranks"] == nranks and len(a["hostnames"]) == nranks, "nranks / hostnames")
        check(a["nnodes"] >= 1 and 1 <= a["ranks_per_node"] <= nranks, "nnodes / ranks_per_node")
        check(a["iters"] == iters and a["check"] == (1 if check_on else 0), "iters / check attributes")
        if warmup is not None:
            check(a["warmup"] == warmup, "warmup attribute")
        check(len(a["argv"]) >= 1 and str(a["argv"][0]).endswith("gradsync-bench"), "argv attribute")
        check("environment" in f and "params" in f, "/environment or /params group missing")
        check("GRADSYNC_TIMEOUT_S" in f["params"].attrs, "/params lacks GRADSYNC_TIMEOUT_S")
        s = len(table_rows)
        size = f["size_bytes"][:]
        count = f["count"][:]
        check(size.shape == (s,) and size.dtype == np.int64, f"size_bytes shape {size.shape} dtype {size.dtype}")
        check(count.shape == (s,) and count.dtype == np.int64, "count shape/dtype")
        algo_used = [x.decode() if isinstance(x, bytes) else x for x in f["algo_used"][:]]
        check(len(algo_used) == s, "algo_used shape")
        if op == "pingpong":
            g = f["pingpong"]
            raw = g["half_rtt_us"][:]
            check(raw.shape == (s, iters), f"half_rtt_us shape {raw.shape}")
            check(np.allclose(g["half_rtt_us_avg"][:], raw.mean(axis=1)), "half_rtt_us_avg is not the mean")
            bw = g["bw_GBps"][:]
            check(bw.shape == (s,), "bw_GBps shape")
            for i, row in enumerate(table_rows):
                check(int(row[0]) == size[i], f"row {i}: size {row[0]} vs {size[i]}")
                check(close(row[1], g["half_rtt_us_avg"][i]), f"row {i}: time {row[1]} vs {g['half_rtt_us_avg'][i]}")
                check(close(row[2], bw[i]), f"row {i}: bw {row[2]} vs {bw[i]}")
                check(math.isclose(bw[i], size[i] / g["half_rtt_us_avg"][i] / 1e3, rel_tol=1e-9, abs_tol=1e-12),
                      "bw != size / half_rtt")
                want = "N/A" if not check_on else str(g["nwrong"][i])
                check(row[3] == want, f"row {i}: #wrong {row[3]} vs {want}")
            return
        factor = bus_factor(op, nranks)
        for col, mode in ((5, "oop"), (9, "ip")):
            g = f[mode]
            raw = g["time_us"][:]
            check(raw.shape == (s, iters), f"/{mode}/time_us shape {raw.shape}")
            check((raw > 0).all(), f"/{mode}/time_us has non-positive times")
            avg = g["time_us_avg"][:]
            check(np.allclose(avg, raw.mean(axis=1)), f"/{mode}/time_us_avg is not the mean of time_us")
            for name in ("algbw_GBps", "busbw_GBps", "nwrong"):
                check(g[name].shape == (s,), f"/{mode}/{name} shape")
            algbw, busbw, nwrong = g["algbw_GBps"][:], g["busbw_GBps"][:], g["nwrong"][:]
            check(np.allclose(algbw, size / avg / 1e3), f"/{mode}/algbw != size / time")
            check(np.allclose(busbw, algbw * factor), f"/{mode}/busbw != algbw * {factor}")
            for i, row in enumerate(table_rows):
                check(close(row[col], avg[i]), f"row {i} {mode}: time {row[col]} vs {avg[i]}")
                check(close(row[col + 1], algbw[i]), f"row {i} {mode}: algbw {row[col + 1]} vs {algbw[i]}")
                check(close(row[col + 2], busbw[i]), f"row {i} {mode}: busbw {row[col + 2]} vs {busbw[i]}")
                if check_on:
                    check(row[col + 3] == str(nwrong[i]), f"row {i} {mode}: #wrong {row[col + 3]} vs {nwrong[i]}")
                else:
                    check(row[col + 3] == "N/A" and nwrong[i] == -1, f"row {i} {mode}: unchecked #wrong")
        for i, row in enumerate(table_rows):
            check(int(row[0]) == size[i] and int(row[1]) == count[i], f"row {i}: size/count vs file")
            check(row[2] == dtype, f"row {i}: type {row[2]}")
            check(row[3] == (redop if op in REDOP_OPS else "none"), f"row {i}: redop {row[3]}")
            check(int(row[4]) == (root if op in ROOT_OPS else -1), f"row {i}: root {row[4]}")
            if len(row) == 14:
                check(row[13] == algo_used[i], f"row {i}: algo column {row[13]} vs {algo_used[i]}")
            if algo != "auto":
                check(algo_used[i] == algo, f"algo_used {algo_used[i]} for a fixed algo {algo}")


# ---- one run, checked end to end --------------------------------------------------------------

def measure(bench, np_, op="allreduce", algo=None, dtype="float", b="8", e="64K", f=4, n=3, w=1, redop="sum",
            root=0, check_on=True, extra=(), out=True):
    algo_name = algo or ("auto" if op == "allreduce" else "mpi")
    args = ["--op", op, "-b", b, "-e", e, "-f", str(f), "-n", str(n), "-w", str(w), "-c", "1" if check_on else "0"]
    if algo:
        args += ["--algo", algo]
    if op != "pingpong":
        args += ["-d", dtype, "-o", redop]
    if op in ROOT_OPS:
        args += ["--root", str(root)]
    path = None
    if out:
        path = os.path.join(bench.workdir, f"{op}-{algo_name}-{dtype}-{redop}-np{np_}.h5")
        args += ["--out", path]
    args += list(extra)
    stdout = bench.run_ok(np_, args)
    rows, oob, avg, written = parse_table(stdout, op, algo_name == "auto")
    want = expected_rows(op, dtype, np_, sweep(parse_size(b), parse_size(e), f))
    check(len(rows) == len(want), f"{len(rows)} rows for {len(want)} sizes:\n{stdout}")
    for row, (size, count) in zip(rows, want):
        check(int(row[0]) == size, f"row {row[:2]} but expected size {size}")
        if op != "pingpong":
            check(int(row[1]) == count, f"row {row[:2]} but expected count {count}")
        if check_on:
            wrong = [row[3]] if op == "pingpong" else [row[8], row[12]]
            check(all(x == "0" for x in wrong), f"wrong elements in row {row}")
    check(oob.startswith("# Out of bounds values : 0 OK"), f"footer: {oob}")
    if path:
        check(written == path, f"'Results written to {written}' but --out {path}")
    else:
        path = os.path.join(bench.workdir, written)
    check_file(path, op, algo_name, dtype, np_, n, rows, check_on, redop=redop, root=root, warmup=w)
    with h5py.File(path, "r") as fh:
        check(math.isclose(fh.attrs["avg_busbw_GBps"], avg, rel_tol=1e-4, abs_tol=1e-6), "avg busbw vs file")
    print(f"ok   np={np_} {op:13s} {algo_name:12s} {dtype:8s} {redop}: {len(rows)} sizes")
    return path


# ---- cases -----------------------------------------------------------------------------------

def case_allreduce(bench):
    # The default file name, under results/ of the current directory.
    stdout = bench.run_ok(2, ["-b", "8", "-e", "4K", "-f", "8", "-n", "2", "-w", "1"])
    _, _, _, written = parse_table(stdout, "allreduce", True)
    check(re.fullmatch(r"results/bench-allreduce-auto-\d{8}T\d{6}Z(-\d+)?\.h5", written), f"default path {written}")
    check(os.path.isfile(os.path.join(bench.workdir, written)), "default result file missing")
    measure(bench, 2, "allreduce")
    measure(bench, 3, "allreduce", "ring", "half", redop="avg", extra=["--chunk-bytes", "1K", "--channels", "2"])
    measure(bench, 3, "allreduce", "rabenseifner", "bfloat16", b="0", e="16K")
    measure(bench, 2, "allreduce", "mpi", "float", check_on=False)
    # --off-cache: every iteration after each rank wrote 1 MiB of its own; recorded.
    path = measure(bench, 2, "allreduce", "ring", "float", b="1K", e="64K", extra=["--off-cache", "1M"])
    with h5py.File(path, "r") as fh:
        check(int(fh.attrs["off_cache_bytes"]) == 1 << 20, f"off_cache_bytes {fh.attrs['off_cache_bytes']}")


def case_allreduce_algos(bench):
    helptext = bench.run(1, ["--help"], mpi=False).stdout
    m = re.search(r"allreduce:\s+([\w, ]+)\n", helptext)
    check(m, "--help does not list the allreduce algorithms")
    names = [x.strip() for x in m.group(1).split(",")]
    check("auto" in names and "mpi" in names, f"registry names {names}")
    for name in names:
        measure(bench, 3, "allreduce", name, "float", b="4", e="64K", f=16, n=2, w=1)


def case_collectives(bench):
    measure(bench, 3, "reducescatter", "mpi", "half")
    measure(bench, 3, "reducescatter", "ring", "float", redop="avg", extra=["--channels", "2", "--chunk-bytes", "512"])
    measure(bench, 3, "allgather", "mpi", "bfloat16")
    measure(bench, 3, "allgather", "ring", "half", extra=["--channels", "3"])
    measure(bench, 3, "alltoall", "mpi", "float")
    measure(bench, 2, "alltoall", "pairwise", "half")
    measure(bench, 3, "broadcast", "mpi", "float", root=2)
    measure(bench, 3, "broadcast", "binomial", "bfloat16", root=1)
    # sendrecv: to rank+1 while receiving from rank-1 (the duplex sweep); busbw = algbw.
    measure(bench, 3, "sendrecv", "mpi", "half")
    measure(bench, 2, "sendrecv", "mpi", "float")
    # pieces: the same exchange in --chunk-bytes pieces (rd/rabenseifner's); 64K messages in
    # 1000-byte pieces (not a multiple of 2: whole half elements), exact either way.
    measure(bench, 3, "sendrecv", "pieces", "half", extra=["--chunk-bytes", "1001"])
    measure(bench, 2, "sendrecv", "pieces", "float", extra=["--chunk-bytes", "4K"])


def case_pingpong(bench):
    measure(bench, 2, "pingpong", b="0", e="64K", f=4, n=5)
    measure(bench, 2, "pingpong", b="1", e="4K", f=8, n=2, check_on=False)
    path = measure(bench, 2, "pingpong", b="8", e="4K", f=8, n=2, extra=["--off-cache", "256K"])
    with h5py.File(path, "r") as fh:
        check(int(fh.attrs["off_cache_bytes"]) == 256 << 10, f"off_cache_bytes {fh.attrs['off_cache_bytes']}")


def case_busy(bench):
    """--busy-threads: the sweep runs while each rank's threads spin; the results are right,
    recorded, and every spinning thread is stopped and joined when the sweep ends (else the
    run would hang or spin on past its end: the launch's timeout and the log catch it)."""
    debug = os.environ.get("GRADSYNC_DEBUG")
    os.environ["GRADSYNC_DEBUG"] = "INFO"  # the bench logs each rank's join
    try:
        path = measure(bench, 2, "allreduce", b="1K", e="64K", f=4, n=5, w=1, extra=["--busy-threads", "1"])
        err = bench.last_stderr
        pp = measure(bench, 2, "pingpong", b="8", e="512", f=8, n=2, extra=["--busy-threads", "1"])
        err_pp = bench.last_stderr
    finally:
        if debug is None:
            os.environ.pop("GRADSYNC_DEBUG", None)
        else:
            os.environ["GRADSYNC_DEBUG"] = debug
    for p, log in ((path, err), (pp, err_pp)):
        with h5py.File(p, "r") as fh:
            check(int(fh.attrs["busy_threads"]) == 1, f"{p}: busy_threads {fh.attrs['busy_threads']}")
        joins = re.findall(r"busy threads stopped and joined: (\d+) threads?, (\d+) xorshift steps", log)
        check(len(joins) == 2, f"{p}: want one 'stopped and joined' line per rank, got {joins}\n{log}")
        check(all(int(n) == 1 and int(steps) > 0 for n, steps in joins), f"{p}: joins {joins}")
    print("ok   --busy-threads 1: allreduce and pingpong right, recorded, every thread joined")


def case_buffers(bench):
    """--buffers: shared (the default on one node: registered in the node's shared memory,
    where shm reads its peers' buffers in place from 256 KiB on) and private give right
    results past that size, every element checked, and the file records what was used;
    pingpong always runs on private buffers."""
    for np_ in (2, 3):
        for mode in ("shared", "private"):
            for algo in ("shm", "ring"):
                path = measure(bench, np_, "allreduce", algo, "half", b="64K", e="1M", f=4, n=2, w=1,
                               redop="avg" if np_ == 3 else "sum", extra=["--buffers", mode])
                with h5py.File(path, "r") as fh:
                    check(fh.attrs["buffers"] == mode, f"{path}: buffers {fh.attrs['buffers']}, asked {mode}")
                os.remove(path)
    default = measure(bench, 2, "allreduce", "shm", b="256K", e="1M", f=4, n=2, w=1)
    pp = measure(bench, 2, "pingpong", b="8", e="512", f=8, n=2)
    with h5py.File(default, "r") as fh, h5py.File(pp, "r") as gh:
        check(fh.attrs["buffers"] == "shared", f"default buffers {fh.attrs['buffers']}")
        check(gh.attrs["buffers"] == "private", f"pingpong buffers {gh.attrs['buffers']}")
    print("ok   --buffers shared and private: shm and ring right on 2 and 3 ranks, recorded")
    # Shared memory too small for the buffers (a container's /dev/shm): Open MPI maps the
    # window under osc_sm_backing_directory; a 4 MiB tmpfs there cannot hold 2 x 8 MiB. The
    # run ends with one line naming --buffers and the way out, and leaves no file. Needs a
    # tmpfs mount (root): skipped where that is refused.
    small = os.path.join(bench.workdir, "smallshm")
    os.makedirs(small)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", small], capture_output=True).returncode != 0:
        print("skip --buffers shared on a full /dev/shm: cannot mount a tmpfs here")
        return
    try:
        out = os.path.join(bench.workdir, "never.h5")
        p = bench.run(2, ["--algo", "shm", "-b", "8M", "-e", "8M", "-n", "1", "-w", "0", "--out", out],
                      env_extra={"OMPI_MCA_osc_sm_backing_directory": small})
    finally:
        subprocess.run(["umount", small], capture_output=True)
        os.rmdir(small)
    check(p.returncode != 0, f"a full shared memory: exit status 0\n{p.stdout}")
    lines = [l for l in p.stderr.splitlines() if l.startswith("gradsync-bench: error:")]
    check(len(lines) >= 1 and "--buffers shared" in lines[0] and "--buffers private" in lines[0],
          f"want an error line naming --buffers shared and --buffers private:\n{p.stderr}")
    check(not os.path.exists(out), "a failed run left its result file")
    print("ok   --buffers shared on a full shared memory: one error line naming --buffers private, no file")


def case_net(bench):
    """/net: per-rank, per-interface bytes of the sweep. Two ranks on this host forced onto
    TCP over loopback: lo must have carried at least the ring's bytes of the timed iterations."""
    os.environ.update(OMPI_MCA_btl="self,tcp", OMPI_MCA_btl_tcp_if_include="lo")
    try:
        path = measure(bench, 2, "allreduce", "ring", "float", b="64K", e="1M", f=4, n=3, w=1)
    finally:
        for k in ("OMPI_MCA_btl", "OMPI_MCA_btl_tcp_if_include"):
            os.environ.pop(k, None)
    with h5py.File(path, "r") as f:
        check("net" in f, "no group /net")
        g = f["net"]
        names = list(g["interface"].asstr()[:])
        tx, rx = g["tx_bytes"][:], g["rx_bytes"][:]
        check(tx.shape == (2, len(names)) and rx.shape == tx.shape, f"/net shapes {tx.shape} {rx.shape} for {names}")
        check(tx.dtype.kind == "i", f"/net/tx_bytes dtype {tx.dtype}")
        check("lo" in names, f"no 'lo' among the interfaces {names}")
        check(g.attrs["window"] and g.attrs["description"], "/net attributes")
        lo = names.index("lo")
        # ring all-reduce on 2 ranks: each rank sends S per call; 3 timed calls per size and mode
        least = sum(2 * 3 * s for s in (65536, 262144, 1048576))
        for r in range(2):
            check(tx[r, lo] >= least and rx[r, lo] >= least, f"rank {r}: lo tx {tx[r, lo]} rx {rx[r, lo]} < {least}")
        # each rank's host's TCP congestion control, as the kernel says it
        with open("/proc/sys/net/ipv4/tcp_congestion_control") as fh:
            cc = fh.read().strip()
        got = list(g["tcp_congestion_control"].asstr()[:])
        check(got == [cc, cc], f"/net/tcp_congestion_control {got}, the host runs {cc}")
    print(f"ok   /net: {names}, lo tx {list(tx[:, lo])}, TCP {cc}")


def case_json(bench):
    path = os.path.join(bench.workdir, "j.h5")
    out = bench.run_ok(2, ["-b", "8", "-e", "1K", "-f", "4", "-n", "2", "--json", "--out", path])
    j = json.loads(out)  # stdout is exactly one JSON object
    for k in ("op", "algo", "dtype", "redop", "nranks", "nnodes", "iters", "warmup", "check", "chunk_bytes",
              "chunk_bytes_used", "chunk_reason", "channels", "rows", "out_of_bounds", "avg_busbw_GBps", "out"):
        check(k in j, f"JSON lacks '{k}'")
    check(j["out"] == path and os.path.isfile(path), "JSON 'out' is not the file written")
    check(j["out_of_bounds"] == 0, "JSON out_of_bounds")
    check(len(j["rows"]) == len(sweep(8, 1024, 4)), "JSON row count")
    with h5py.File(path, "r") as f:
        for i, r in enumerate(j["rows"]):
            check(r["size_bytes"] == f["size_bytes"][i] and r["count"] == f["count"][i], "JSON size/count")
            check(r["algo_used"] == f["algo_used"][i].decode(), "JSON algo_used")
            for mode in ("oop", "ip"):
                m = r[mode]
                check(set(m) == {"time_us", "algbw_GBps", "busbw_GBps", "nwrong"}, f"JSON {mode} keys {set(m)}")
                check(math.isclose(m["time_us"], f[mode]["time_us_avg"][i], rel_tol=1e-6), "JSON time vs file")
                check(m["nwrong"] == 0, "JSON nwrong")
    out = bench.run_ok(2, ["--op", "pingpong", "-b", "0", "-e", "64", "-n", "2", "-c", "0", "--json", "--out", path])
    j = json.loads(out)
    check(j["op"] == "pingpong" and j["out_of_bounds"] is None, "pingpong JSON")
    check(all(set(r) >= {"size_bytes", "half_rtt_us", "bw_GBps", "nwrong"} and r["nwrong"] is None
              for r in j["rows"]), "pingpong JSON rows")
    print("ok   --json (allreduce, pingpong)")


# Options refused before anything runs: (arguments, text the message must contain).
USAGE_CASES = [
    (["--op", "gather"], "--op"),
    (["--algo", "nope"], "--algo"),
    (["--op", "reducescatter", "--algo", "rd"], "--algo"),
    (["--op", "alltoall", "--algo", "ring"], "--algo"),
    (["--op", "pingpong", "--algo", "ring"], "--algo"),
    (["-d", "int8"], "-d"),
    (["-o", "max"], "-o"),
    (["-b", "4K", "-e", "1K"], "-e"),
    (["-b", "-8"], "-b"),
    (["-e", "lots"], "-e"),
    (["-b", "1.5"], "-b"),
    (["-f", "1"], "-f"),
    (["-f", "2", "-i", "8"], "-i"),
    (["-i", "0"], "-i"),
    (["-n", "0"], "-n"),
    (["-w", "-1"], "-w"),
    (["-c", "2"], "-c"),
    (["--channels", "0"], "--channels"),
    (["--chunk-bytes", "0"], "--chunk-bytes"),
    (["--off-cache", "lots"], "--off-cache"),
    (["--off-cache", "-1"], "--off-cache"),
    (["--busy-threads", "-1"], "--busy-threads"),
    (["--busy-threads", "x"], "--busy-threads"),
    (["--busy-threads", "257"], "--busy-threads"),
    (["--buffers", "pinned"], "--buffers"),
    (["--root", "-1"], "--root"),
    (["--frobnicate"], "--frobnicate"),
    (["stray"], "positional"),
]


def expect_usage_error(bench, np_, args, needle, mpi=True):
    out = os.path.join(bench.workdir, "never.h5")
    p = bench.run(np_, args + ["--out", out], mpi=mpi)
    check(p.returncode == 2, f"{args}: exit status {p.returncode}, expected 2\n{p.stdout}\n{p.stderr}")
    lines = [l for l in p.stderr.splitlines() if l.startswith("gradsync-bench: error:")]
    check(len(lines) == 1, f"{args}: expected one error line (rank 0 only), got {lines}\n{p.stderr}")
    check(needle in lines[0], f"{args}: message does not name {needle}: {lines[0]}")
    check(p.stdout == "", f"{args}: printed on stdout: {p.stdout}")
    left = [x for x in os.listdir(bench.workdir)]
    check(left == [], f"{args}: left files behind: {left}")


def case_usage(bench):
    for args, needle in USAGE_CASES:
        expect_usage_error(bench, 1, args, needle, mpi=False)
    # Through the launcher: every rank refuses, one message, status 2.
    expect_usage_error(bench, 2, ["-b", "4K", "-e", "1K"], "-e")
    expect_usage_error(bench, 2, ["--algo", "nope"], "--algo")
    # Refusals that need the rank count.
    expect_usage_error(bench, 3, ["--op", "pingpong"], "pingpong")
    expect_usage_error(bench, 1, ["--op", "pingpong"], "pingpong", mpi=False)
    expect_usage_error(bench, 2, ["--op", "broadcast", "--root", "2"], "--root")
    # --help needs no launcher.
    p = bench.run(1, ["--help"], mpi=False)
    check(p.returncode == 0 and "Usage:" in p.stdout and "rounded down" in p.stdout, "--help")
    check(os.listdir(bench.workdir) == [], "--help left files behind")
    print(f"ok   {len(USAGE_CASES) + 5} refused option sets, --help")


def case_runtime_error(bench):
    # The result file's folder cannot exist (its parent is a file): refused right after
    # start, before the measurement, on every rank together: status 2 (a bad --out is a bad
    # request), one line from rank 0 naming the option and the path, no file.
    blocker = os.path.join(bench.workdir, "plainfile")
    open(blocker, "w").close()
    p = bench.run(2, ["-e", "1K", "--out", os.path.join(blocker, "x.h5")])
    check(p.returncode == 2, f"exit status {p.returncode}, expected 2\n{p.stderr}")
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("gradsync-bench: error:")]
    check(len(lines) == 1 and re.search(r"option --out: .*plainfile", lines[0]),
          f"want one error line naming --out and the path:\n{p.stderr}")
    check(not re.search(r"^\s+\d+\s+\d+", p.stdout, re.M), "rows printed before the failure")
    check(sorted(os.listdir(bench.workdir)) == ["plainfile"], f"left files: {os.listdir(bench.workdir)}")
    print("ok   unwritable --out: status 2 before measuring, one line naming the option and path")


CASES = {
    "allreduce": case_allreduce,
    "allreduce_algos": case_allreduce_algos,
    "collectives": case_collectives,
    "pingpong": case_pingpong,
    "json": case_json,
    "usage": case_usage,
    "runtime_error": case_runtime_error,
    "net": case_net,
    "busy": case_busy,
    "buffers": case_buffers,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", required=True, help="path of gradsync-bench")
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("launcher", nargs="+", help="mpiexec and its flags (after --)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gs-bench-") as d:
        try:
            CASES[a.case](Bench(os.path.abspath(a.bench), a.launcher, d))
        except Failure as e:
            print(f"FAIL [{a.case}]: {e}")
            return 1
        except subprocess.TimeoutExpired as e:
            print(f"FAIL [{a.case}]: timed out: {e}")
            return 1
    print(f"PASS [{a.case}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
