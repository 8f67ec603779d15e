#!/usr/bin/python3
"""Tests of the PyTorch bridge (scripts/gradsync_torch; CTest label "torch"). CPU, gloo, 2 ranks.

  test_torch.py --case recorder|membership|calibrate|codecs|killed|sched|testbed|slurm [--keep DIR]

  recorder    the example trainer (scripts/torchrun ... -m gradsync_torch.example) writes a
              gradsync-train file: every /steps and /buckets column, consistent bucket rows
              (ready <= start <= end, one row per bucket per step), /model sums to the bucket
              bytes, the loss falls; gradsync-model compare reads it (C++ schema reader);
              the recorder's --trace is valid trace-event JSON with every rank;
              gradsync_torch.overhead times both copies' steps, its recorder times only
              its own copy's collectives, and its scratch file goes
  membership  recorded /model/tensor_bucket and bucket bytes equal DDP's own assignment
              (the reducer's rebuilt_per_bucket_param_indices and
              dist._compute_bucket_assignment_by_size), with no hook + overlap, fp16 +
              no overlap, PowerSGD + overlap; PowerSGD on two buckets without the recorder
              (gradsync_torch.hooks runs them one at a time, as the recorder does: gloo
              aborts or hangs otherwise) trains to the recorded run's loss
  calibrate   the torch bench writes a gradsync-bench file (nccl-tests table, #wrong 0) that
              calibrate fits; with --busy-threads 1 the file says so, no spinner outlives
              the sweep and calibrate fits the contention from it; calibrate takes a
              --no-overlap run's bucket all-reduces;
              calibrate --compute reads the recorder file (and says why it cannot fit a
              non-zoo model); compare --json and --trace on the fitted fabric; compare
              --compute-from: a run from its own file is its replay, a one-bucket run from
              the no-overlap run's compute keeps its one bucket
  codecs      gradsync_torch.codecs times PyTorch's fp16/bf16/PowerSGD hooks (every case, its
              counters, bytes_per_second); calibrate --kernels fits the file (PowerSGD with
              per-matrix costs, the casts' rates); a torch study with kernels = true runs
              it (--quick) and its compare --compute-from prices a PowerSGD run at those
              rates; --hook none is one line, no file
  killed      a rank killed (SIGKILL) mid-run leaves no result file; an exception inside the
              atomic writer leaves neither the file nor its temp file; a writer killed
              mid-write leaves no file under the final name; a bad option under torchrun
              prints one line (rank 0's) and writes nothing; none of these launches leaves
              torchrun's log folder behind
  sched       --comm-sched: the bench's file records gloo's threads' policy (other by
              default, rr:1 with rr); bad values give one line and no file; without
              CAP_SYS_NICE (as root: setpriv) every rank names the option and no file is
              written; a train file records it and compare --compute-from reads it (a
              bucket inside backward runs alone and backward waits for it)
  testbed     the example on the emulated testbed (root): both ranks on host 0, and one rank
              per host over the shaped link (mpirun starts the ranks; host 0's address is the
              rendezvous); the files record 1 and 2 nodes and gloo's 1 MiB segments between
              hosts; predict --from-run and compare --compute-from price the one-host run on two
  slurm       PyTorch under a private local Slurm (root; skipped without slurm-wlm): `srun -n
              2 scripts/torch-python -m gradsync_torch.example` writes a 2-rank train file,
              and a torch study with launcher = "slurm" (bench + train grids, one job array)
              writes and reads back every point
GRADSYNC_BIN names the build's bin folder (gradsync-model). The PyTorch venv is
$GRADSYNC_TORCH_VENV or <repo>/.venv-torch; without it the test exits 77 (skipped) with a
line saying how to install it.
"""
import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import re
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
TORCHRUN = os.path.join(REPO, "scripts", "torchrun")
TPY = os.path.join(REPO, "scripts", "torch-python")
FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL:", msg, flush=True)
    return cond


def run(cmd, cwd, timeout=240, expect=0, env=None):
    """Runs cmd in its own session; past `timeout` the whole session is killed (torchrun's
    workers too, which a plain kill of torchrun would leave running) and TimeoutExpired is
    raised as subprocess.run raises it."""
    t = time.time()
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True, env=None if env is None else dict(os.environ, **env)) as q:
        try:
            out, err = q.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(q.pid, signal.SIGKILL)
            q.communicate()
            raise
    p = subprocess.CompletedProcess(cmd, q.returncode, out, err)
    print(f"$ {' '.join(cmd)}  -> rc {p.returncode} ({time.time() - t:.1f} s)", flush=True)
    if expect is not None and p.returncode != expect:
        print(p.stdout[-3000:], p.stderr[-3000:], sep="\n")
        check(False, f"{cmd[0]} {' '.join(cmd[1:4])}... exited {p.returncode}, expected {expect}")
    return p


def model_bin():
    b = os.environ.get("GRADSYNC_BIN", os.path.join(REPO, "build", "bin"))
    return os.path.join(b, "gradsync-model")


def example(tmp, out, *args, steps=8):
    return run([TORCHRUN, "--nproc-per-node", "2", "-m", "gradsync_torch.example", "--steps", str(steps),
                "--warmup", "2", "--batch", "16", "--out", out, *args], tmp)


def check_train_file(path, nranks=2):
    with h5py.File(path, "r") as f:
        a = f.attrs
        check(a["program"] == "gradsync-train" and a["source"] == "pytorch", f"{path}: program/source")
        check(int(a["nranks"]) == nranks and int(a["nnodes"]) * int(a["ranks_per_node"]) == nranks, "nranks")
        for k in ["backend", "bucket_mb", "first_bucket_mb", "hook", "hook_params", "compress", "precision", "amp",
                  "topology", "git_revision", "argv", "hostnames", "warmup_steps", "bucket_bytes", "torch_version"]:
            check(k in a, f"{path}: attribute {k} missing")
        n = int(a["steps"])
        for k in ["step", "loss", "step_time_s", "data_s", "forward_s", "backward_s", "comm_exposed_s",
                  "optimizer_s", "bytes_sent", "comm_total_s", "encode_s", "decode_s", "reducer_s", "cpu_s", "loss_scale",
                  "skipped"]:
            check(f"steps/{k}" in f and f[f"steps/{k}"].shape == (n,), f"{path}: /steps/{k} missing or not [{n}]")
        st = f["steps/step_time_s"][:]
        parts = sum(f[f"steps/{k}"][:] for k in ["data_s", "forward_s", "backward_s", "comm_exposed_s", "reducer_s",
                                                  "optimizer_s"])
        check(np.all(st > 0) and np.all(np.isfinite(st)), "step times positive")
        # step_time is the max over ranks, the parts are means: parts never exceed it by much.
        check(np.all(parts <= st * 1.05 + 1e-3), f"phases ({parts}) within the step ({st})")
        # Each rank's phases tile its step, so the means of the phases lie between the
        # fastest and the slowest rank's step (the spread between ranks is timing, not
        # checked: a gloo call that waits a scheduler tick moves it by milliseconds).
        if "ranks/step_time_s" in f and f["ranks/step_time_s"].shape == (n, nranks):
            rs = f["ranks/step_time_s"][:]
            tiles = sum(f[f"ranks/{k}"][:] for k in ["data_s", "forward_s", "backward_s", "comm_exposed_s",
                                                    "reducer_s", "optimizer_s"])
            check(np.allclose(tiles, rs, rtol=1e-6, atol=1e-9), f"each rank's phases tile its step: {tiles / rs}")
            check(np.all(parts >= rs.min(axis=1) * (1 - 1e-6)) and np.all(parts <= rs.max(axis=1) * (1 + 1e-6)),
                  f"phases' means ({parts}) between the fastest and slowest rank's step ({rs})")
        check(len(a["cpu_affinity"]) == nranks and int(a["cores_per_node"]) >= 1, "cpu_affinity, cores_per_node")
        # One machine (torchrun on localhost): one machine id, all ranks on it, its CPUs the
        # ranks' CPUs; each rank's process used CPU in every step.
        check(len(a["machine_ids"]) == nranks and len(set(a["machine_ids"])) == 1 and int(a["machine_ranks"]) == nranks
              and int(a["machine_cores"]) >= int(a["cores_per_node"]),
              f"machine_ids {list(a['machine_ids'])}, machine_ranks {a['machine_ranks']}, cores {a['machine_cores']}")
        check(np.all(f["ranks/cpu_s"][:] > 0), f"/ranks/cpu_s {f['ranks/cpu_s'][:].tolist()}")
        # /ranks: every rank's own columns; /steps is their max (step time) and means.
        for k in ["step_time_s", "data_s", "forward_s", "backward_s", "comm_exposed_s", "optimizer_s", "reducer_s",
                  "encode_s", "decode_s", "cpu_s"]:
            if not check(f"ranks/{k}" in f and f[f"ranks/{k}"].shape == (n, nranks),
                         f"{path}: /ranks/{k} missing or not [{n}, {nranks}]"):
                continue
            per = f[f"ranks/{k}"][:]
            agg = per.max(axis=1) if k == "step_time_s" else per.mean(axis=1)
            check(np.allclose(agg, f[f"steps/{k}"][:], rtol=1e-9, atol=1e-12, equal_nan=True),
                  f"/steps/{k} from /ranks/{k}")
        step, bucket = f["buckets/step"][:], f["buckets/bucket"][:]
        ready, start, end = f["buckets/ready_s"][:], f["buckets/start_s"][:], f["buckets/end_s"][:]
        bad = np.flatnonzero(~((ready <= start + 1e-9) & (start <= end) & (ready >= 0)))
        check(bad.size == 0, f"ready <= start <= end: rows {bad[:5]} step {step[bad[:5]]} ready {ready[bad[:5]]} "
              f"start {start[bad[:5]]} end {end[bad[:5]]}")
        nb = int(a["num_buckets"])
        last = step == n - 1
        check(sorted(bucket[last].tolist()) == list(range(nb)), f"last step has buckets 0..{nb - 1}")
        numel, tb = f["model/tensor_numel"][:], f["model/tensor_bucket"][:]
        check(int(numel.sum()) * 4 == int(np.sum(f["buckets/bytes"][:][last])), "/model numel x 4 == bucket bytes")
        check(np.all(tb >= 0) and np.all(tb < nb), "every tensor in a bucket")
        check(int(np.sum(f["model/tensor_ndim"][:])) == f["model/tensor_shape"].shape[0], "tensor_shape length")
        # Each gradient is ready after forward and no later than DDP hands its bucket over
        # (rank 0's medians after warmup; the bucket's own median + 0.5 ms of slack).
        if check("model/tensor_ready_s" in f and f["model/tensor_ready_s"].shape == numel.shape,
                 f"{path}: /model/tensor_ready_s missing or not [{numel.size}]"):
            tr = f["model/tensor_ready_s"][:]
            warm = step >= int(a["warmup_steps"])
            bready = [float(np.median(ready[warm & (bucket == b)])) for b in range(nb)]
            # Rank 0's forward end (the means over ranks hold another rank's waits).
            d0 = f["ranks/data_s"][:, 0] + f["ranks/forward_s"][:, 0] if "ranks/data_s" in f else \
                f["steps/data_s"][:] + f["steps/forward_s"][:]
            fwd_end = float(np.median(d0[int(a["warmup_steps"]):]))
            late = [i for i in range(tr.size) if not (0.8 * fwd_end < tr[i] <= bready[tb[i]] + 5e-4)]
            check(not late, f"tensor ready {tr} within rank 0's forward end {fwd_end} .. their buckets' ready "
                  f"{bready} (tensors {late})")
        return dict(a), f["steps/loss"][:]


def case_recorder(tmp):
    out, trace = os.path.join(tmp, "run.h5"), os.path.join(tmp, "trace.json")
    example(tmp, out, "--bucket-mb", "0.1", "--hook", "fp16", "--trace", trace, steps=12)
    if not check(os.path.exists(out), "example wrote no file"):
        return
    a, loss = check_train_file(out)
    check(a["compress"] == "fp16" and a["hook"] == "fp16" and int(a["overlap"]) == 1, "hook fp16 recorded")
    check(int(a["num_buckets"]) >= 3, f"0.1 MB buckets on the example CNN: {a['num_buckets']} buckets")
    check(np.mean(loss[-3:]) < np.mean(loss[:3]), f"loss falls ({loss[:3]} -> {loss[-3:]})")
    p = run([model_bin(), "compare", out, "--fabric", "tcp-10g", "--json"], tmp)
    if p.returncode == 0:
        j = json.loads(p.stdout)["runs"][0]
        check(j["compute"] == "real" and j["measured_step_time_s"] > 0 and j["predicted_step_time_s"] > 0,
              "compare reads the recorder file")
        check(len(j["predicted_buckets"]) == int(a["num_buckets"]), "compare plans the recorded buckets")
        check(j["measured_codec_s"] is not None and j["measured_codec_s"] > 0,
              f"compare reads the fp16 buckets' codec time ({j['measured_codec_s']})")
    with open(trace) as f:
        t = json.load(f)
    ev = t["traceEvents"]
    names = {e["name"] for e in ev}
    check({"forward", "backward", "optimizer", "data wait", "all-reduce bucket 0", "codec bucket 0"} <= names,
          f"trace events {names}")
    # Per bucket, the fp16 hook's collective and its codec (the cast, and the cast back in
    # the callback) do not overlap, and lie inside the bucket's hook call .. completion.
    with h5py.File(out, "r") as f:
        codec, ready, end = f["buckets/codec_s"][:], f["buckets/ready_s"][:], f["buckets/end_s"][:]
    check(np.all(np.isfinite(codec)) and np.all(codec > 0) and np.all(codec <= end - ready + 1e-9),
          f"fp16: per-bucket codec_s measured and within the bucket ({codec})")
    check({e["tid"] for e in ev if e["ph"] == "X"} == {0, 1, 2, 3}, "trace has both ranks' compute and comm")
    check(all(e["dur"] >= 0 and "ts" in e and "pid" in e for e in ev if e["ph"] == "X"), "trace X events well formed")
    # The ranks' clocks are lined up by their all-reduces (trace.py): the same collective
    # ends at about the same trace time on both ranks (each rank stamps it in its own
    # callback, so a descheduled thread can be late by a scheduler tick).
    ends = {}
    for e in ev:
        if e["ph"] == "X" and e["name"].startswith("all-reduce"):
            k = (e["args"]["step"], e["args"]["bucket"], e["args"].get("collective", 0))
            ends.setdefault(k, {})[e["tid"]] = e["ts"] + e["dur"]
    gaps = [abs(v[1] - v[3]) for v in ends.values() if 1 in v and 3 in v]
    check(len(gaps) >= 12 and np.median(gaps) < 1000,
          f"both ranks' all-reduce ends line up in the trace ({len(gaps)}, median gap "
          f"{np.median(gaps) if gaps else float('nan'):.0f} us)")
    # The same rule on made-up clocks: rank 1's clock runs 7.3 s ahead of rank 0's and its
    # steps start a few ms later; rank 2 shares no bucket with rank 0 (its own first step).
    sys.path.insert(0, os.path.join(REPO, "scripts"))
    from gradsync_torch.trace import rank_bases

    def row(t0, ends):
        return {"abs": [t0] * 6, "buckets": [[i, 4, 0.0, 0.0, e] for i, e in enumerate(ends)]}
    made_up = [{"rows": [row(100.0, [0.010, 0.020]), row(100.05, [0.012, 0.021])]},
               {"rows": [row(107.304, [0.006, 0.016]), row(107.353, [0.009, 0.018])]},
               {"rows": [{"abs": [50.0] * 6, "buckets": []}]}]
    b = rank_bases(made_up)
    check(len(b) == 3 and abs(b[0] - 100.0) < 1e-9 and abs(b[1] - 107.3) < 1e-9 and b[2] == 50.0,
          f"rank_bases on made-up clocks: {b}")
    # The recorder's overhead, measured in one job: a plain and a recorded copy of the model
    # in alternating blocks. Every step of both is timed; the recorder times only its own
    # steps' collectives (a plain fp16 step's all-reduce counted by it would leave that
    # step's codec_s NaN); its scratch file goes when --out is not given.
    oj, ko = os.path.join(tmp, "overhead.json"), os.path.join(tmp, "overhead.h5")
    p = run([TORCHRUN, "--nproc-per-node", "2", "-m", "gradsync_torch.overhead", "--pairs", "2", "--block", "3",
             "--warmup", "1", "--batch", "16", "--bucket-mb", "0.1", "--hook", "fp16", "--json", oj, "--out", ko], tmp)
    if p.returncode == 0 and check(os.path.exists(oj) and os.path.exists(ko), "overhead wrote its JSON and file"):
        with open(oj) as f:
            j = json.load(f)
        check(len(j["step_time_s"]["plain"]) == 6 and len(j["step_time_s"]["recorded"]) == 6
              and len(j["pair_ratios"]) == 2 and j["plain_s"] > 0 and j["recorded_s"] > 0,
              f"overhead: 2 pairs of 3 timed steps each ({ {k: len(v) for k, v in j['step_time_s'].items()} })")
        with h5py.File(ko, "r") as f:
            nsteps, codec = len(f["steps/step_time_s"]), f["buckets/codec_s"][:]
        check(nsteps == 7, f"overhead: the recorded copy's 1 + 6 steps in its file ({nsteps})")
        check(np.all(np.isfinite(codec)), "overhead: the plain copy's all-reduces were timed by the recorder")
    # Without --out (nothing written), against PyTorch's Python allreduce_hook as the plain copy.
    oj2 = os.path.join(tmp, "overhead2.json")
    before = set(os.listdir(tmp))
    p = run([TORCHRUN, "--nproc-per-node", "2", "-m", "gradsync_torch.overhead", "--pairs", "1", "--block", "2",
             "--warmup", "1", "--batch", "8", "--plain-hook", "allreduce", "--json", oj2], tmp, env={"TMPDIR": tmp})
    # (torch keeps its own compile cache there: torchinductor_<user>)
    left = sorted(n for n in set(os.listdir(tmp)) - before - {"overhead2.json"} if not n.startswith("torchinductor_"))
    check(left == [], f"overhead without --out left files in its TMPDIR: {left}")
    if p.returncode == 0 and check(os.path.exists(oj2), "overhead --plain-hook allreduce wrote its JSON"):
        with open(oj2) as f:
            j = json.load(f)
        check(j.get("plain_hook") == "allreduce" and len(j["step_time_s"]["plain"]) == 2,
              f"overhead --plain-hook allreduce: {j.get('plain_hook')}, {len(j['step_time_s']['plain'])} plain steps")
    # The A/A control (neither copy recorded), opening with the recorded copy's block; --out
    # with --control is refused (nothing to write).
    oj3 = os.path.join(tmp, "overhead3.json")
    p = run([TORCHRUN, "--nproc-per-node", "2", "-m", "gradsync_torch.overhead", "--pairs", "1", "--block", "2",
             "--warmup", "1", "--batch", "8", "--control", "--first-block", "recorded", "--json", oj3], tmp,
            env={"TMPDIR": tmp})
    if p.returncode == 0 and check(os.path.exists(oj3), "overhead --control wrote its JSON"):
        with open(oj3) as f:
            j = json.load(f)
        check(j.get("control") is True and j.get("first_block") == "recorded"
              and len(j["step_time_s"]["recorded"]) == 2 and "control: neither copy recorded" in p.stdout,
              f"overhead --control --first-block recorded: {j.get('control')}, {j.get('first_block')}, {p.stdout}")
    p = run([TORCHRUN, "--nproc-per-node", "2", "-m", "gradsync_torch.overhead", "--control", "--out",
             os.path.join(tmp, "x.h5")], tmp, expect=None)
    errs = [ln for ln in p.stderr.splitlines() if "option --out" in ln]
    check(p.returncode != 0 and len(errs) >= 1 and not os.path.exists(os.path.join(tmp, "x.h5")),
          f"overhead --control --out: rc {p.returncode}, {errs}")


def case_membership(tmp):
    # No hook: DDP's own all-reduce observed on the process group (native_hook.cpp's
    # PgObserver, the default where torch has process-group hooks), the C++ comm hook
    # (GRADSYNC_TORCH_NATIVE_HOOK=hook), the Python hook they replace
    # (GRADSYNC_TORCH_NATIVE_HOOK=0), and the fallback when they cannot be built (no
    # compiler, an empty extensions folder); with a hook or without overlap: the Python hook.
    pg_hooks = subprocess.run([TPY, "-c", "import torch.distributed as d, sys; "
                               "sys.exit(0 if hasattr(d.ProcessGroup, 'register_pre_hook') else 1)"],
                              capture_output=True).returncode == 0
    expect_hook = {"pg": "pg" if pg_hooks else "native", "native": "native"}
    for case, hook, overlap, cap in [("pg", "none", "1", "0.03"), ("native", "none", "1", "0.03"),
                                     ("none", "none", "1", "0.03"), ("fallback", "none", "1", "0.03"),
                                     ("fp16", "fp16", "0", "0.03"), ("powersgd", "powersgd", "1", "0.03")]:
        out, js = os.path.join(tmp, f"m-{case}.h5"), os.path.join(tmp, f"m-{case}.json")
        env = {"GRADSYNC_TORCH_NATIVE_HOOK": {"pg": "1", "native": "hook", "fallback": "1"}.get(case, "0")}
        if case == "fallback":
            env.update(CXX="/bin/false", TORCH_EXTENSIONS_DIR=os.path.join(tmp, "no-extensions"))
        p = run([TORCHRUN, "--nproc-per-node", "2", os.path.join(HERE, "membership_case.py"), out, js, hook, overlap,
                 cap], tmp, env=env)
        unavailable = [ln for ln in p.stderr.splitlines() if "native hook unavailable" in ln]
        if case == "fallback":
            check(len(unavailable) == 2 and all(ln.startswith("gradsync_torch.record: rank ") for ln in unavailable),
                  f"{case}: one line per rank saying the native hook is unavailable ({unavailable})")
        else:
            check(not unavailable, f"{case}: the native hook built and loaded ({unavailable})")
        if used_hook := [ln for ln in p.stdout.splitlines() if ln.startswith("membership_case: ")]:
            # pg: DDP runs as without the recorder (no communication hook registered); the
            # C++ and Python hooks are registered with DDP.
            want = "no comm hook" if expect_hook.get(case) == "pg" else "a comm hook registered"
            check(used_hook == [f"membership_case: {want}"], f"{case}: {used_hook}, expected {want}")
        else:
            check(False, f"{case}: membership_case.py did not say whether a comm hook was registered")
        if not check(os.path.exists(out) and os.path.exists(js), f"{case}: no result"):
            continue
        with open(js) as f:
            ddp = json.load(f)
        ddp_sizes = ddp["bucket_sizes"]
        with h5py.File(out, "r") as f:
            tb = f["model/tensor_bucket"][:].tolist()
            n = int(f.attrs["steps"])
            last = f["buckets/step"][:] == n - 1
            got_bytes = [int(b) for _, b in sorted(zip(f["buckets/bucket"][:][last], f["buckets/bytes"][:][last]))]
            overlap_attr = int(f.attrs["overlap"])
            dec, serial = f["steps/decode_s"][:], int(f.attrs["serial_buckets"])
            codec = f["buckets/codec_s"][:]
            enc0, bstep = f["ranks/encode_s"][:, 0], f["buckets/step"][:]
            used = f.attrs["recorder_hook"]
            used = used.decode() if isinstance(used, bytes) else str(used)
            ready, start, end = f["buckets/ready_s"][:], f["buckets/start_s"][:], f["buckets/end_s"][:]
            bwd, exposed = f["steps/backward_s"][:], f["steps/comm_exposed_s"][:]
            bucket_ids, step_time = f["buckets/bucket"][:], f["steps/step_time_s"][:]
        check(used == expect_hook.get(case, "python"), f"{case}: recorder_hook {used}")
        # Every bucket stamped in order (ready <= start <= end, end after ready); backward and
        # the exposed communication measured.
        check(np.all(np.isfinite(end)) and np.all(ready <= start) and np.all(start <= end) and np.all(end > ready),
              f"{case}: bucket stamps ready {ready} start {start} end {end}")
        check(np.all(bwd > 0) and np.all(exposed >= 0), f"{case}: backward_s {bwd}, comm_exposed_s {exposed}")
        # Every step after DDP's rebuild (at the second forward) has each bucket once,
        # launched inside its own step (not the twin's).
        per_step = [sorted(bucket_ids[bstep == i].tolist()) for i in range(n)]
        check(len(per_step) > 1 and all(b == list(range(len(ddp_sizes))) for b in per_step[1:]),
              f"{case}: buckets per step {per_step}, DDP has {len(ddp_sizes)}")
        check(np.all(ready >= 0) and np.all(ready <= step_time[bstep]),
              f"{case}: bucket ready times {ready} outside their steps {step_time}")
        # PowerSGD on gloo (serial buckets): the hook's collectives are timed, and the work in
        # its callbacks is decode_s; elsewhere the buckets overlap and decode_s is absent.
        if hook == "powersgd":
            check(serial == 1 and np.all(np.isfinite(dec)) and np.all(dec >= 0) and np.max(dec) > 0,
                  f"{hook}: decode_s measured ({dec})")
        else:
            check(serial == 0 and np.all(np.isnan(dec)), f"{hook}: decode_s absent ({dec})")
        # Per-bucket codec: 0 without a hook; measured (every collective attributed) for the
        # fp16 hook without overlap and PowerSGD's serial buckets.
        check(np.all(codec == 0) if hook == "none" else (np.all(np.isfinite(codec)) and np.all(codec > 0)),
              f"{hook}: /buckets/codec_s {codec}")
        # encode_s is part of the codec: the hook call up to its first collective, not the
        # callbacks (and their collectives' waits) that run inside the call when that
        # collective completed first.
        if hook != "none":
            per_step = np.array([codec[bstep == i].sum() for i in range(len(enc0))])
            over = np.flatnonzero(enc0 > per_step + 1e-6)
            check(over.size == 0, f"{hook}: rank 0's encode_s exceeds its buckets' codec_s at steps {over}: "
                  f"{enc0[over]} > {per_step[over]}")
        recorded = [sorted(i for i, b in enumerate(tb) if b == k) for k in range(max(tb) + 1)]
        check(len(ddp["reducer"]) >= 2, f"{hook}: the case has several buckets ({ddp['reducer']})")
        check(recorded == [sorted(b) for b in ddp["reducer"]], f"{hook}: recorded {recorded} != reducer {ddp['reducer']}")
        check(recorded == [sorted(b) for b in ddp["computed"]],
              f"{hook}: recorded {recorded} != _compute_bucket_assignment_by_size {ddp['computed']}")
        check(got_bytes == ddp["bucket_sizes"], f"{hook}: bucket bytes {got_bytes} != DDP {ddp['bucket_sizes']}")
        check(overlap_attr == int(overlap), f"{hook}: overlap attribute")
    # PowerSGD on gloo with two buckets (1 MB: the example's fc and conv buckets), with and
    # without the recorder: both finish (unserialised, gloo aborted with "Received data
    # size doesn't match" or hung) at the same loss.
    losses = []
    for extra in (["--no-record"], ["--out", os.path.join(tmp, "ps.h5")]):
        p = run([TORCHRUN, "--nproc-per-node", "2", "-m", "gradsync_torch.example", "--steps", "10", "--warmup", "2",
                 "--batch", "16", "--bucket-mb", "1", "--hook", "powersgd:rank=4", *extra], tmp, timeout=180)
        losses += [ln.split("loss ")[1].split(",")[0] for ln in p.stdout.splitlines()
                   if ln.startswith("gradsync_torch.example:") and "loss " in ln]
    check(len(losses) == 2 and losses[0] == losses[1], f"PowerSGD without / with the recorder: losses {losses}")


def case_calibrate(tmp):
    bench = os.path.join(tmp, "bench.h5")
    # Up to 16 MiB: on 2 cores gloo's calls wait for a scheduler tick whatever their size,
    # so a sweep ending at 4 MiB barely grew with size (twelve on 2026-12-07: 1 KiB 0.6-5.2
    # ms, 4 MiB 4.4-11.5 ms) and calibrate refused one in CI ("fitted bandwidth is not
    # positive"); 16 MiB took 12.9-23.0 ms. Three sweeps of each kind, each size's times
    # scaled by exp(N(0, 0.7)), 150 draws per sweep: calibrate refused 23 of 450 ending at
    # 4 MiB and 2 of 450 ending at 16 MiB. The plain and the busy sweep share these sizes.
    sweep = [TORCHRUN, "--nproc-per-node", "2", "-m", "gradsync_torch.bench", "-b", "1K", "-e", "16M", "-f", "4",
             "-n", "5", "-w", "1"]
    p = run(sweep + ["--off-cache", "1M", "--out", bench], tmp)
    check("# Avg bus bandwidth" in p.stdout and "Out of bounds values : 0 OK" in p.stdout, "nccl-tests table")
    check("off-cache: 1048576 bytes" in p.stdout, "the table header names --off-cache")
    with h5py.File(bench, "r") as f:
        check(f.attrs["program"] == "gradsync-bench" and f.attrs["op"] == "allreduce", "bench file attributes")
        check(int(f.attrs["off_cache_bytes"]) == 1 << 20, "off_cache_bytes recorded")
        check(f["oop/time_us"].shape == (8, 5) and np.all(f["oop/nwrong"][:] == 0), "bench raw table, #wrong 0")
    p = run([TORCHRUN, "--nproc-per-node", "2", "-m", "gradsync_torch.bench", "--op", "all", "-b", "1K", "-e", "64K",
             "-f", "8", "-n", "3", "-w", "1", "--out", os.path.join(tmp, "all.h5")], tmp)
    for op in ["allreduce", "allgather", "broadcast"]:
        check(os.path.exists(os.path.join(tmp, f"all-{op}.h5")), f"--op all wrote {op}")
    for op in ["reducescatter", "alltoall"]:  # gloo may lack them: a file, or one line saying so
        check(os.path.exists(os.path.join(tmp, f"all-{op}.h5")) or f"op {op} " in p.stderr, f"{op}: file or reason")
    fab = os.path.join(tmp, "torch-gloo.toml")
    run([model_bin(), "calibrate", bench, "-o", fab], tmp)
    # The same sweep while a process per rank spins: the file says so, the spinners end with
    # the sweep, and calibrate fits the level's contention from it (not its alpha and bw).
    busy = os.path.join(tmp, "bench-busy.h5")
    p = run(sweep + ["--busy-threads", "1", "--out", busy], tmp)
    check("busy-threads: 1" in p.stdout, "the table header names --busy-threads")
    with h5py.File(busy, "r") as f:
        check(int(f.attrs["busy_threads"]) == 1 and np.all(f["oop/nwrong"][:] == 0), "busy_threads recorded, #wrong 0")
    spinning = subprocess.run(["pgrep", "-f", "while True: pass"], capture_output=True, text=True).stdout.split()
    check(spinning == [], f"spinners outlived the sweep: {spinning}")
    p = run([model_bin(), "calibrate", bench, busy, "-o", os.path.join(tmp, "busy.toml"), "--json"], tmp)
    if p.returncode == 0:
        lv = json.loads(p.stdout)["levels"][0]
        # The level's robust fit may drop an outlier of the plain sweep; no busy point is in it.
        files = {os.path.basename(pt["file"]) for pt in lv["points"]}
        check(files == {"bench.h5"} and "while the host computes (1 busy thread per rank)" in lv["notes"],
              f"busy points fit the contention only: level points from {files}, notes {lv['notes']}")
        check(lv["contention"] >= 1 and lv["contention_us"] >= 0, f"contention {lv['contention']} {lv['contention_us']}")
    run_no = os.path.join(tmp, "no-overlap.h5")
    example(tmp, run_no, "--bucket-mb", "0.5", "--no-overlap", steps=8)
    p = run([model_bin(), "calibrate", run_no, bench, "-o", os.path.join(tmp, "both.toml"), "--json"], tmp)
    if p.returncode == 0:
        j = json.loads(p.stdout)
        check("no-overlap.h5" not in json.dumps(j.get("skipped", [])), "the --no-overlap run's buckets are used")
    p = run([model_bin(), "calibrate", "--compute", run_no, "-o", os.path.join(tmp, "prof.toml")], tmp, expect=None)
    check("not in the zoo" in p.stdout + p.stderr and "not a gradsync-train file" not in p.stderr,
          "calibrate --compute reads the recorder file and names why it cannot fit it")
    trace = os.path.join(tmp, "cmp.json")
    p = run([model_bin(), "compare", run_no, "--fabric", fab, "--json", "--trace", trace], tmp)
    if p.returncode == 0:
        r = json.loads(p.stdout)["runs"][0]
        check(r["overlap"] is False and math.isfinite(r["step_error_pct"]), "compare of the no-overlap run")
        with open(trace) as f:
            ev = json.load(f)["traceEvents"]
        procs = {e["args"]["name"].split(":")[0] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
        check(procs == {"measured", "predicted"}, f"trace processes {procs}")
        for pid in (0, 1):
            names = {e["name"] for e in ev if e["ph"] == "X" and e["pid"] == pid}
            check({"forward", "backward", "optimizer", "data wait", "all-reduce bucket 0"} <= names,
                  f"trace pid {pid}: {names}")
    # compare --compute-from: another run's compute under this run's buckets. The no-overlap
    # run predicted from its own compute is its replay; a one-bucket run from the no-overlap
    # run's compute keeps its own bucket.
    own = json.loads(run([model_bin(), "compare", run_no, "--fabric", fab, "--json"], tmp).stdout)
    same = json.loads(run([model_bin(), "compare", run_no, "--fabric", fab, "--json", "--compute-from", run_no],
                          tmp).stdout)
    check(abs(same["runs"][0]["predicted_step_time_s"] - own["runs"][0]["predicted_step_time_s"]) < 1e-9,
          f"--compute-from the run itself is its replay ({same['runs'][0]['predicted_step_time_s']} vs "
          f"{own['runs'][0]['predicted_step_time_s']})")
    one = os.path.join(tmp, "one-bucket.h5")
    example(tmp, one, "--bucket-mb", "25", steps=8)
    j = json.loads(run([model_bin(), "compare", one, "--fabric", fab, "--json", "--compute-from", run_no],
                       tmp).stdout)
    with h5py.File(run_no, "r") as f:
        ref_buckets = int(f.attrs["num_buckets"])
    check(j["compute_from"] == run_no and len(j["runs"][0]["predicted_buckets"]) == 1 and ref_buckets > 1,
          f"--compute-from: {j['compute_from']}, {len(j['runs'][0]['predicted_buckets'])} bucket(s) predicted, "
          f"{ref_buckets} in the reference")


def case_codecs(tmp):
    """gradsync_torch.codecs: PyTorch's hooks timed through the recorder, as Google Benchmark
    JSON that calibrate --kernels fits (per-matrix and per-bucket costs included) and that
    compare --kernels prices a PowerSGD run with."""
    kb = os.path.join(tmp, "codecs.json")
    p = run([TORCHRUN, "--nproc-per-node", "2", "-m", "gradsync_torch.codecs", "--quick", "--steps", "4",
             "--warmup", "1", "--out", kb], tmp)
    if not check(p.returncode == 0 and os.path.exists(kb), "codecs: no JSON"):
        return
    with open(kb) as f:
        doc = json.load(f)
    rows = {b["name"]: b for b in doc["benchmarks"]}
    want = {f"{c}_{part}/{m}" for c in ("fp16", "bf16") for part in ("encode", "decode", "collective", "allreduce")
            for m in ("0.25", "1")}
    want |= {f"powersgd_{part}/{s}" for part in ("encode", "decode", "collective", "allreduce")
             for s in ("64/1", "128/1", "256/1", "32/16")}
    want |= {f"{c}_codec_wait/{m}" for c in ("fp16", "bf16") for m in ("0.25", "1")}
    want |= {f"powersgd_codec_wait/{s}" for s in ("64/1", "128/1", "256/1", "32/16")}
    check(set(rows) == want, f"codecs cases: {sorted(set(rows) ^ want)} differ")
    check(doc["context"]["ranks"] == 2 and doc["context"]["backend"] == "gloo", f"context {doc['context']}")
    waits = {}
    for name, b in rows.items():
        t = b["real_time"] * 1e-9
        if "_codec_wait/" in name:
            # Per step the slowest rank's codec, beyond the slower rank's median: never below 0.
            check(math.isfinite(t) and t >= 0 and b["ranks"] == 2 and b["codec_s"] > 0 and b["buckets"] == 1,
                  f"{name}: wait {t} s, {b}")
            waits.setdefault(name.split("_codec_wait")[0], []).append(t / (0.5641895835 * b["codec_s"]))
            continue
        check(math.isfinite(t) and t > 0 and b["time_unit"] == "ns" and b["buckets"] == 1,
              f"{name}: time {t} s, {b['buckets']} bucket(s)")
        if name.startswith("powersgd"):
            side, k = (int(x) for x in name.split("/")[1:])
            check(b["matrix"] == side and b["matrices"] == k and b["rank"] == 4 and b["hook"] == "powersgd:rank=4",
                  f"{name}: counters {b}")
            if name.startswith(("powersgd_collective", "powersgd_allreduce")):
                # The hook's all-reduces of a compressed step: P and Q, and the 1-D batch if any.
                check(b["collectives"] in (2, 3), f"{name}: {b['collectives']} collectives a step")
        elif "_collective/" in name or "_allreduce/" in name:
            # The cast hooks' one all-reduce per step, timed as the hook runs it and plain.
            check(b["collectives"] == 1 and "bytes_per_second" not in b, f"{name}: {b}")
        else:
            check(abs(b["bytes_per_second"] * t - b["MiB"] * (1 << 20)) < 1e-3 * b["MiB"] * (1 << 20),
                  f"{name}: bytes_per_second x time = the fp32 input bytes")
    th = os.path.join(tmp, "torch-hooks.toml")
    p = run([model_bin(), "calibrate", "--kernels", kb, "--name", "torch-hooks", "-o", th, "--json"], tmp)
    if p.returncode == 0:
        j = json.loads(p.stdout)
        check(j["powersgd_encode_flops"] > 0 and j["powersgd_decode_flops"] > 0, f"PowerSGD fitted: {j}")
        check({"fp16_encode", "fp16_decode", "bf16_encode", "bf16_decode"} <= set(j["Bps"]), f"casts fitted: {j['Bps']}")
        check(any("cases of k square matrices" in n for n in j["notes"]), f"notes: {j['notes']}")
        # The codec's jitter: sigma = wait / (E[max of 2] x codec), the median over a hook's cases.
        for c, v in waits.items():
            v = sorted(v)
            med = (v[len(v) // 2] + v[(len(v) - 1) // 2]) / 2
            got = j["codec_sigma"].get(c)
            check(got is not None and abs(got - med) <= 1e-5 * max(med, 1e-3), f"{c} codec sigma {got}, measured {v}")
        # What the hooks add to their collectives: the hook's time less the plain all-reduce's
        # (never below 0), PowerSGD's median over the cases, the casts' by fp32 bucket size.
        def added(name):
            return max(0.0, (rows[name.replace("_allreduce", "_collective")]["real_time"] -
                             rows[name]["real_time"]) * 1e-9)
        per = sorted(added(f"powersgd_allreduce/{s}") for s in ("64/1", "128/1", "256/1", "32/16"))
        check(abs(j["powersgd_collective_extra_s"] - (per[1] + per[2]) / 2) < 1e-9 * max(per[2], 1e-6) + 1e-12
              and j["powersgd_collective_s"] == 0,
              f"the hook's extra per collective: {j['powersgd_collective_extra_s']} s, the median of {per}")
        for c in ("fp16", "bf16"):
            got = j["hook_extra_s"].get(c)
            exp = [[m * (1 << 20), added(f"{c}_allreduce/{m:g}")] for m in (0.25, 1)]
            check(got is not None and len(got) == 2 and all(abs(g[0] - e[0]) < 1 and abs(g[1] - e[1]) < 1e-9
                                                           for g, e in zip(got, exp)),
                  f"the {c} hook's extra by size: {got}, measured {exp}")
    # A torch study with `kernels = true` times the hooks itself (--quick: the quick cases) and
    # prices a PowerSGD run predicted from a hook-less run's compute at those rates.
    study = os.path.join(tmp, "mini.toml")
    with open(study, "w") as f:
        f.write('name = "torch-mini"\nruntime = "torch"\nlauncher = "local"\nranks = 2\ntimeout_s = 120\n'
                '[[grid]]\nname = "train"\nprogram = "train"\n'
                'fixed = { steps = 5, warmup = 2, batch = 16, bucket-mb = 25 }\n'
                'sweep = { hook = ["none", "powersgd:rank=4"] }\n'
                '[[model.calibrate]]\nname = "hooks"\nkernels = true\ncomm-sched = "rr"\n'
                '[model.compare]\nfabric = "shm-local"\nkernels = "hooks"\n'
                'compute_from = { grid = "train", where = { hook = "none" } }\n[scale.quick]\n')
    sdir = os.path.join(tmp, "study")
    run([os.path.join(REPO, "scripts", "study"), "run", study, "--out", sdir, "--quick",
         "--bin", os.path.dirname(model_bin())], tmp)
    cf = os.path.join(sdir, "model", "compare-compute-from.json")
    if check(os.path.exists(cf), "mini study: no compare-compute-from.json"):
        with open(os.path.join(sdir, "model", "hooks.bench.json")) as f:
            names = [b["name"] for b in json.load(f)["benchmarks"]]
        check(sum(n.startswith("powersgd_encode/") for n in names) == 4, f"mini study: the quick cases ({names})")
        with open(os.path.join(sdir, "model", "hooks.bench.json")) as f:
            sched = json.load(f)["context"].get("comm_sched")
        check(sched == "rr", f"mini study: the codecs ran with the entry's comm-sched ({sched})")
        with open(os.path.join(sdir, "model", "model.log")) as f:
            cmd = [ln for ln in f if "--compute-from" in ln]
        check(len(cmd) == 1 and "--kernels " + os.path.join(sdir, "model", "hooks.toml") in cmd[0],
              f"mini study: compare --compute-from with the hooks' rates ({cmd})")
        with open(cf) as f:
            runs = json.load(f)["runs"]
        ps = [r for r in runs if r["compress"].startswith("powersgd")]
        check(len(ps) == 1 and ps[0]["predicted_codec_s"] > 0 and math.isfinite(ps[0]["step_error_pct"]),
              f"mini study: the PowerSGD run's codec priced ({ps})")
    # A hook without a codec is refused in one line, nothing written.
    bad = os.path.join(tmp, "bad.json")
    p = run([TORCHRUN, "--nproc-per-node", "2", "-m", "gradsync_torch.codecs", "--hook", "none", "--out", bad], tmp,
            expect=None)
    lines = [ln for ln in p.stderr.splitlines() if "error:" in ln]
    check(p.returncode != 0 and len(lines) == 1 and "--hook" in lines[0] and not os.path.exists(bad),
          f"--hook none: rc {p.returncode}, {lines}")


def case_sched(tmp):
    # --comm-sched: gloo's threads under a real-time policy, recorded in bench and train files;
    # bad values and a missing privilege give one line per rank and no file.
    plain, rr = os.path.join(tmp, "plain.h5"), os.path.join(tmp, "rr.h5")
    bench = [TORCHRUN, "--nproc-per-node", "2", "-m", "gradsync_torch.bench", "-b", "1K", "-e", "64K", "-f", "8",
             "-n", "3", "-w", "1"]
    run(bench + ["--out", plain], tmp)
    run(bench + ["--comm-sched", "rr", "--out", rr], tmp)
    with h5py.File(plain, "r") as f:
        check(str(f.attrs["comm_sched"]).startswith("other (gloo_tcp_loop"), f"default policy: {f.attrs['comm_sched']}")
    with h5py.File(rr, "r") as f:
        s = str(f.attrs["comm_sched"])
        check(s.startswith("rr:1 (") and "gloo_tcp_loop" in s and "pt_gloo_runloop" in s, f"rr recorded: {s}")
        check(np.all(f["oop/nwrong"][:] == 0), "rr: #wrong 0")
    for bad, why in [("rr:0", "the priority must be 1..99"), ("idle", "unknown policy"), ("other:2", "no priority")]:
        out = os.path.join(tmp, "bad.h5")
        p = run(bench + ["--comm-sched", bad, "--out", out], tmp, expect=None)
        lines = [ln for ln in p.stderr.splitlines() if "error: option --comm-sched" in ln]
        check(p.returncode != 0 and len(lines) == 1 and why in lines[0], f"--comm-sched {bad}: {lines}")
        check(not os.path.exists(out), f"--comm-sched {bad} wrote a file")
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv:
        out = os.path.join(tmp, "noperm.h5")
        p = run([setpriv, "--bounding-set=-sys_nice", "--inh-caps=-sys_nice"] + bench +
                ["--comm-sched", "fifo:5", "--out", out], tmp, expect=None)
        lines = [ln for ln in p.stderr.splitlines() if "option --comm-sched fifo:5: cannot set SCHED_FIFO" in ln]
        check(p.returncode != 0 and {ln.split("rank ")[1][0] for ln in lines} == {"0", "1"},
              f"without CAP_SYS_NICE: one line per rank, got {lines}")
        check(not os.path.exists(out), "a refused --comm-sched wrote a file")
    else:
        print("note: not root or no setpriv: the missing-privilege check is skipped")
    # A script that puts only rank 1's gloo threads under SCHED_RR: the file says each rank's.
    if os.geteuid() == 0:
        script, mixed = os.path.join(tmp, "one_rank_rr.py"), os.path.join(tmp, "mixed.h5")
        with open(script, "w") as fh:
            fh.write(ONE_RANK_RR_SCRIPT)
        run([TORCHRUN, "--nproc-per-node", "2", script, mixed], tmp)
        if check(os.path.exists(mixed), "the one-rank SCHED_RR script wrote no file"):
            with h5py.File(mixed, "r") as f:
                s = str(f.attrs["comm_sched"])
            check(s.startswith("rank 0: other (") and "; rank 1: rr:1 (" in s, f"per-rank policies: {s}")
    # A train file records it, and compare reads it: with backward timed alone (--compute-from
    # a no-overlap run) on 2 ranks and 2 cores, a bucket inside backward runs alone when gloo's
    # threads preempt compute, at the CPU share (twice as long) when they share it.
    no = os.path.join(tmp, "no.h5")
    example(tmp, no, "--bucket-mb", "0.5", "--no-overlap", "--comm-sched", "rr", steps=6)
    ov = os.path.join(tmp, "ov.h5")
    example(tmp, ov, "--bucket-mb", "0.5", "--comm-sched", "rr", steps=6)
    with h5py.File(ov, "r") as f:
        check(str(f.attrs["comm_sched"]).startswith("rr:1 ("), f"train file: {f.attrs['comm_sched']}")
        threads = int(f.attrs["compute_threads"])
    shared = os.path.join(tmp, "ov-shared.h5")
    shutil.copy(ov, shared)
    with h5py.File(shared, "r+") as f:
        f.attrs["comm_sched"] = "other (gloo_tcp_loop, pt_gloo_runloop x2)"
    fab = os.path.join(tmp, "two-cores.toml")
    with open(fab, "w") as f:
        f.write('name = "two-cores"\n[intra]\nalpha_us = 100\nbw_GBps = 0.5\ncores_per_node = 2\n'
                '[inter]\nalpha_us = 100\nbw_GBps = 0.5\ncores_per_node = 2\n')
    got = {}
    for name, path in (("rr", ov), ("shared", shared), ("alone", no)):
        p = run([model_bin(), "compare", path, "--fabric", fab, "--json", "--compute-from", no], tmp)
        if p.returncode == 0:
            got[name] = json.loads(p.stdout)["runs"][0]
    if check(len(got) == 3 and threads == 1, f"the compares ran, compute_threads {threads}"):
        r, s = got["rr"], got["shared"]
        inside = [b for b in s["predicted_buckets"] if b["contention_s"] > 0]
        check(inside != [], "some bucket runs inside backward")
        check(all(b["contention_s"] == 0 for b in r["predicted_buckets"]), "preempting: no bucket slowed by compute")
        check(r["predicted_comm_total_s"] < s["predicted_comm_total_s"] - 1e-6,
              f"preempting: less communication time ({r['predicted_comm_total_s']} vs {s['predicted_comm_total_s']})")
        base = got["alone"]["predicted_backward_s"]  # the reference's own backward
        check(r["predicted_backward_s"] > base * 1.001,
              f"preempting: backward stops while a bucket is in flight ({r['predicted_backward_s']} vs {base})")


def marked_workers(mark, local_rank=None):
    """pids of the processes whose environment holds `mark` (a GS_TORCH_TEST_MARK=... entry)
    and, when given, LOCAL_RANK=local_rank: a launch's workers (torchrun starts each in a
    session of its own, so its process group does not find them)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if mark in env and (local_rank is None or f"LOCAL_RANK={local_rank}" in env):
            pids.append(int(pid))
    return pids


def kill_all(pids):
    """SIGKILL to each of `pids` that still runs (what outlived a launch, so a failing check
    leaves nothing running)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def rank1_worker_of(mark, timeout=120):
    """Rank 1's worker of the launch marked `mark`, once it runs (None after `timeout` s)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        time.sleep(2)
        found = marked_workers(mark, 1)
        if found:
            return found[0]
    return None


def marked_launch(tmp, tag, out, log=None, tmpdir=None, **env):
    """A 2-rank example of 100000 steps writing `out`, its processes marked
    GS_TORCH_TEST_MARK={tmp}/{tag}, in a session of its own: (Popen, the mark's environ entry)."""
    mark = f"{tmp}/{tag}"
    proc = subprocess.Popen([TORCHRUN, "--nproc-per-node", "2", "-m", "gradsync_torch.example", "--steps", "100000",
                             "--warmup", "1", "--batch", "8", "--out", out], cwd=tmp,
                            stdout=log if log else subprocess.DEVNULL, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True,
                            env=dict(os.environ, GS_TORCH_TEST_MARK=mark, TMPDIR=tmpdir or tmp, **env))
    return proc, f"GS_TORCH_TEST_MARK={mark}"


def signal_rank1(proc, mark, sig, settle_s, what):
    """Once rank 1's worker of the launch runs, and `settle_s` seconds later, sends it `sig`;
    False (the launch killed) when no such worker appeared."""
    victim = rank1_worker_of(mark)
    if victim is not None:
        time.sleep(settle_s)
    if not check(victim is not None, f"no worker of rank 1 found ({what})"):
        os.killpg(proc.pid, signal.SIGKILL)
        return False
    os.kill(victim, sig)
    return True


def case_killed(tmp):
    log = open(os.path.join(tmp, "torchrun.log"), "w")
    proc, mark = marked_launch(tmp, "killed", os.path.join(tmp, "killed.h5"), log)
    # Once rank 1's worker runs and has stepped a while, SIGKILL it (no clean-up).
    if not signal_rank1(proc, mark, signal.SIGKILL, 8, "killed run"):
        return
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    check(proc.returncode != 0, "torchrun reports the killed rank")
    log.close()
    left = [n for n in os.listdir(tmp) if n.startswith("killed.h5")]
    check(left == [], f"a killed run left {left}")
    # The writer itself (gradsync_analysis.atomicfile): an exception leaves nothing; a
    # writer killed mid-write (SIGKILL, or the SIGTERM torchrun sends the other ranks when
    # one fails) leaves no file either, neither the final name nor a temp.
    code = ("import sys; sys.path.insert(0, %r)\nfrom gradsync_analysis.atomicfile import atomic_h5\n"
            "import time\np = sys.argv[1]\ntry:\n    with atomic_h5(p) as f:\n        f['x'] = [1.0]\n"
            "        raise RuntimeError('boom')\nexcept RuntimeError:\n    pass\n"
            "with atomic_h5(p + '.2') as f:\n    f['x'] = [1.0]\n    print('writing', flush=True)\n"
            "    time.sleep(60)\n") % os.path.join(REPO, "scripts")
    for sig in (signal.SIGKILL, signal.SIGTERM):
        w = subprocess.Popen([TPY, "-c", code, os.path.join(tmp, "w.h5")], stdout=subprocess.PIPE, text=True)
        check(w.stdout.readline().strip() == "writing", "writer started")
        w.send_signal(sig)
        w.wait()
        w.stdout.close()
        names = [n for n in os.listdir(tmp) if n.startswith("w.h5")]
        check(names == [], f"a writer that raised, then one killed by {sig.name} mid-write, left {names}")
    # A bad option under torchrun: one line, from rank 0 only (every rank finds it), no file.
    for mod, bad in (("gradsync_torch.example", ["--hook", "bogus"]), ("gradsync_torch.bench", ["-n", "0"]),
                     ("gradsync_torch.overhead", ["--block", "0"]),
                     ("gradsync_torch.overhead", ["--hook", "fp16", "--plain-hook", "allreduce"])):
        p = subprocess.run([TORCHRUN, "--nproc-per-node", "2", "-m", mod, *bad, "--out", os.path.join(tmp, "bad.h5")],
                           cwd=tmp, capture_output=True, text=True, timeout=120, env=dict(os.environ, TMPDIR=tmp))
        ours = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith(f"python -m {mod}: error:")]
        check(p.returncode != 0 and len(ours) == 1, f"{mod} {' '.join(bad)}: rc {p.returncode}, error lines {ours}")
        check("usage:" not in p.stderr, f"{mod} {' '.join(bad)} printed argparse's usage block")
    check(not os.path.exists(os.path.join(tmp, "bad.h5")), "a refused run wrote its result file")
    # Every program's --help names GRADSYNC_TIMEOUT_S (gradsync_torch.launch.ENV_HELP).
    for mod in ("gradsync_torch.example", "gradsync_torch.bench", "gradsync_torch.codecs", "gradsync_torch.overhead"):
        h = subprocess.run([TPY, "-m", mod, "--help"], cwd=tmp, capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "scripts")))
        check(h.returncode == 0 and "GRADSYNC_TIMEOUT_S" in h.stdout, f"{mod} --help: rc {h.returncode}, no GRADSYNC_TIMEOUT_S")
    # GRADSYNC_TIMEOUT_S: a bad value is one line; a rank that stops (SIGSTOP: alive, silent)
    # fails the other's collective after that many seconds, not torch's 30 minutes, and the
    # launcher ends the run: no result file, no process left.
    p = subprocess.run([TORCHRUN, "--nproc-per-node", "2", "-m", "gradsync_torch.example", "--steps", "3",
                        "--warmup", "1", "--out", os.path.join(tmp, "bad.h5")], cwd=tmp, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, TMPDIR=tmp, GRADSYNC_TIMEOUT_S="abc"))
    ours = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith("python -m gradsync_torch.example: error:")]
    check(p.returncode != 0 and ours == ["python -m gradsync_torch.example: error: environment GRADSYNC_TIMEOUT_S: "
                                         "must be > 0 seconds (got abc)"], f"GRADSYNC_TIMEOUT_S=abc: rc {p.returncode}, {ours}")
    log = open(os.path.join(tmp, "stalled.log"), "w")
    proc, mark = marked_launch(tmp, "stall", os.path.join(tmp, "stalled.h5"), log, GRADSYNC_TIMEOUT_S="5")
    if not signal_rank1(proc, mark, signal.SIGSTOP, 5, "stalled run"):
        return
    stopped_at = time.time()
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    took = time.time() - stopped_at
    # torchrun runs its workers in sessions of their own: what outlived it is killed here
    # (and counted below), so a failing check leaves nothing running either.
    time.sleep(1)
    left_running = marked_workers(mark, 0) + marked_workers(mark, 1)
    kill_all(left_running)
    log.close()
    text = open(os.path.join(tmp, "stalled.log")).read()
    check(proc.returncode != 0 and took < 80, f"a stopped rank: torchrun exited {proc.returncode} after {took:.0f} s "
          f"(GRADSYNC_TIMEOUT_S=5); log tail {text[-1500:]}")
    check("timed out" in text.lower() or "timeout" in text.lower(), f"the log does not name the time-out: {text[-1500:]}")
    check(not [n for n in os.listdir(tmp) if n.startswith("stalled.h5")], "a stalled run left its result file")
    check(left_running == [], f"workers {left_running} outlived the stalled run")
    # The launcher itself killed outright (SIGKILL: it cannot stop its workers, which run in
    # sessions of their own): the workers follow it (gradsync_torch.launch.die_with_launcher).
    orphan_tmp = os.path.join(tmp, "orphan-tmp")  # a killed agent's log folder stays (_torchrun.py): not here
    os.makedirs(orphan_tmp, exist_ok=True)
    proc, mark = marked_launch(tmp, "orphan", os.path.join(tmp, "orphan.h5"), tmpdir=orphan_tmp)
    victim = rank1_worker_of(mark)
    if check(victim is not None, "no worker of rank 1 found (orphan run)"):
        time.sleep(3)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline, alive = time.time() + 20, marked_workers(mark)
        while alive and time.time() < deadline:
            time.sleep(1)
            alive = marked_workers(mark)
        kill_all(alive)
        check(alive == [], f"workers {alive} outlived their launcher by 20 s")
        check(not [n for n in os.listdir(tmp) if n.startswith("orphan.h5")], "the orphaned run left its result file")
    # torchrun's per-launch log folders (under $TMPDIR = tmp here) went with the launches.
    logs = [n for n in os.listdir(tmp) if n.startswith(("gs-torchrun.", "torchelastic_"))]
    check(logs == [], f"torchrun left its log folders {logs}")


# A user's DDP loop that accumulates K micro-steps per optimizer step. "nosync": the first K-1
# backwards under DDP's no_sync() (what the recorder takes); "every": each one synchronizes;
# "probe": K = 1 after a forward without backward (training mode, gradients on) each step;
# "skip": K = 1, every third optimizer step left out (as GradScaler's step after an inf).
# HOOK "fp16": DDP's fp16_compress_hook (the recorder's Python hook), "none": DDP's own.
ACCUMULATING_SCRIPT = """
import sys, torch, torch.nn as nn, torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
import gradsync_torch
mode, k, out, hook = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group("gloo")
torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 64, 10))
m = nn.parallel.DistributedDataParallel(net)
opt = torch.optim.Adam(m.parameters(), 1e-3)
rec = gradsync_torch.record(m, opt, out=out, warmup_steps=1,
                            hook=default_hooks.fp16_compress_hook if hook == "fp16" else None)
for step in range(6):
    if mode == "probe":
        m(torch.randn(4, 3, 8, 8)).sum().item()
    for i in range(k):
        x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))
        if mode == "nosync" and i < k - 1:
            with m.no_sync():
                nn.functional.cross_entropy(m(x), y).backward()
        else:
            nn.functional.cross_entropy(m(x), y).backward()
    if not (mode == "skip" and step % 3 == 1):
        opt.step()
    opt.zero_grad()
rec.close()
dist.destroy_process_group()
# torch 2.15 + gloo may abort a worker in the interpreter's teardown, recorder or not, with
# destroy_process_group() too (launch.exit_now); the package's programs end this way.
from gradsync_torch.launch import exit_now
exit_now(0)
"""


# DDP on 2 ranks, recorded, with rank 1's gloo threads under SCHED_RR and rank 0's left alone.
ONE_RANK_RR_SCRIPT = """
import sys, torch, torch.nn as nn, torch.distributed as dist
import gradsync_torch
from gradsync_torch.launch import apply_comm_sched, exit_now
dist.init_process_group("gloo")
torch.manual_seed(0)
m = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)))
opt = torch.optim.SGD(m.parameters(), 0.01)
rec = gradsync_torch.record(m, opt, out=sys.argv[1], warmup_steps=1)
dist.barrier()
if dist.get_rank() == 1:
    apply_comm_sched("rr")
for step in range(4):
    nn.functional.cross_entropy(m(torch.randn(8, 64)), torch.randint(0, 10, (8,))).backward()
    opt.step()
    opt.zero_grad()
rec.close()
dist.destroy_process_group()
exit_now(0)  # (see ACCUMULATING_SCRIPT)
"""


# The example's accumulated step (Stepper with K-1 earlier micro-batches under no_sync()) gives
# the gradient of one batch of all K x 32 samples (DDP averages over the ranks either way).
SAME_GRADIENT_SCRIPT = """
import sys, torch, torch.distributed as dist, torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from gradsync_torch import example
dist.init_process_group("gloo")
o = example.options(["--accumulate", "4", "--no-record"])
net, batch = example.build(o, torch.device("cpu"))
m = DDP(net)
class Keep(torch.optim.SGD):
    def step(self, closure=None):
        self.g = [p.grad.clone() for p in m.parameters()]
opt = Keep(m.parameters(), lr=0.0)
bs = [batch(i, dist.get_rank(), 32) for i in range(4)]
example.Stepper(o)(m, opt, bs[-1][0], bs[-1][1], bs[:-1])
F.cross_entropy(m(torch.cat([b[0] for b in bs])), torch.cat([b[1] for b in bs])).backward()
d = max(float((a - p.grad).abs().max() / p.grad.abs().max()) for a, p in zip(opt.g, m.parameters()))
print(f"rank {dist.get_rank()}: accumulated vs one batch: max relative difference {d:.2e}")
dist.destroy_process_group()
from gradsync_torch.launch import exit_now  # (see ACCUMULATING_SCRIPT)
exit_now(0)
"""


def case_accumulate(tmp):
    # The example with 3 micro-steps per optimizer step (the first two under no_sync()).
    out, trace = os.path.join(tmp, "acc.h5"), os.path.join(tmp, "acc.json")
    example(tmp, out, "--accumulate", "3", "--bucket-mb", "1", "--hook", "fp16", "--trace", trace, steps=8)
    if not check(os.path.exists(out), "example --accumulate 3 wrote no file"):
        return
    a, _ = check_train_file(out)
    check(int(a["accumulate"]) == 3, f"accumulate recorded: {a['accumulate']}")
    with h5py.File(out, "r") as f:
        n, nb = int(a["steps"]), int(a["num_buckets"])
        rows = np.bincount(f["buckets/step"][:], minlength=n)
        # (DDP rebuilds its buckets after its first step)
        check(np.all(rows[1:] == nb), f"one set of buckets per optimizer step (the synchronized backward): {rows}")
        per = {k: f[f"ranks/{k}"][:] for k in ["data_s", "forward_s", "backward_s"]}
        check(all(np.all(v > 0) for v in per.values()), "data, forward and backward positive on every rank")
        # The buckets are the last micro-step's: ready after the two earlier micro-steps' forward
        # and backward and the last forward (rank 0).
        ready = f["buckets/ready_s"][:]
        first = np.array([ready[(f["buckets/step"][:] == i)].min() for i in range(n)])
        lead = per["data_s"][:, 0] + per["forward_s"][:, 0] + per["backward_s"][:, 0] * 0.5
        check(np.all(first > 0.8 * lead - 1e-3), f"bucket ready after the earlier micro-steps: {first} vs {lead}")
        # backward_sync_s: the synchronized micro-step's backward, a part of backward_s; it
        # ends rank 0's data + forward + backward, and its buckets are ready inside it.
        sync = f["ranks/backward_sync_s"][:]
        check(np.all(sync > 0) and np.all(sync < per["backward_s"]), "backward_sync_s inside backward_s, every rank")
        start = per["data_s"][:, 0] + per["forward_s"][:, 0] + per["backward_s"][:, 0] - sync[:, 0]
        check(np.all(first[1:] >= start[1:] - 1e-6), f"buckets ready in the synchronized backward: {first} vs {start}")
        check(np.allclose(f["steps/backward_sync_s"][:], sync.mean(axis=1)), "/steps/backward_sync_s: the ranks' mean")
    with open(trace) as fh:
        ev = [e for e in json.load(fh)["traceEvents"] if e["ph"] == "X" and e["tid"] == 0]
    micro = sorted({(e["name"], e["args"].get("micro_step")) for e in ev if e["args"].get("step") == n - 1
                    and "micro_step" in e["args"]})
    check(micro == [(nm, i) for nm in ("backward", "data wait", "forward") for i in (0, 1)],
          f"trace: the last step's two earlier micro-steps drawn: {micro}")
    # compare replays 3 micro-steps of a third of the recorded forward each (not 3 x the sum).
    p = run([model_bin(), "compare", out, "--fabric", "shm-local", "--json"], tmp)
    if p.returncode == 0:
        j = json.loads(p.stdout)["runs"][0]
        r = j["predicted_forward_s"] / j["measured_forward_s"]
        check(0.6 < r < 1.5, f"compare: predicted forward / measured {r:.2f} (3 micro-steps)")
    # predict --from-run --accumulate: the recorded micro-step's compute K times, one synchronized.
    by = {}
    for k in (3, 6):
        p = run([model_bin(), "predict", "--from-run", out, "--fabric", "shm-local", "--accumulate", str(k), "--json"],
                tmp)
        if check(p.returncode == 0, f"predict --from-run --accumulate {k}: {p.stderr.strip()}"):
            by[k] = json.loads(p.stdout)
    if len(by) == 2:
        check(by[3]["accumulate"] == 3 and by[6]["accumulate"] == 6, "predict --json: accumulate")
        r = by[6]["forward_s"] / by[3]["forward_s"]
        # (each is the forward of the step whose predicted time is the median: not always one row)
        check(1.6 < r < 2.4, f"6 micro-steps' forward about twice 3's: {r:.4f}")
        check(by[6]["backward_s"] > by[3]["backward_s"], "6 micro-steps' backward longer than 3's")
    same = os.path.join(tmp, "same_gradient.py")
    with open(same, "w") as fh:
        fh.write(SAME_GRADIENT_SCRIPT)
    p = run([TORCHRUN, "--nproc-per-node", "2", same], tmp)
    diffs = [float(x) for x in re.findall(r"max relative difference ([0-9.e+-]+)", p.stdout)]
    check(len(diffs) == 2 and max(diffs) < 1e-4, f"--accumulate 4 gradient == one batch of 128's: {diffs}")
    # A user's loop: Adam, BatchNorm, no_sync() accumulation; then the same loop synchronizing in
    # every micro-step, which the recorder refuses at close in one line, writing nothing.
    script = os.path.join(tmp, "accumulating.py")
    with open(script, "w") as fh:
        fh.write(ACCUMULATING_SCRIPT)
    ok = os.path.join(tmp, "nosync.h5")
    run([TORCHRUN, "--nproc-per-node", "2", script, "nosync", "2", ok, "none"], tmp)
    if check(os.path.exists(ok), "the no_sync() loop wrote no file"):
        a, _ = check_train_file(ok)
        check(int(a["accumulate"]) == 2 and a["optimizer"] == "adam", f"user loop: {a['accumulate']}, {a['optimizer']}")
    probe = os.path.join(tmp, "probe.h5")
    run([TORCHRUN, "--nproc-per-node", "2", script, "probe", "1", probe, "none"], tmp)
    if check(os.path.exists(probe), "the loop with a forward-only probe wrote no file"):
        a, _ = check_train_file(probe)
        check(int(a["accumulate"]) == 1, f"a forward without backward is no micro-step: accumulate {a['accumulate']}")
    # A synchronized backward that no optimizer step follows ends a skipped step at the next
    # forward: GradScaler's skipped steps; accumulation without no_sync(), each micro-step a step.
    for mode, hook, want in (("skip", "none", [0, 1, 0, 0, 1, 0]), ("skip", "fp16", [0, 1, 0, 0, 1, 0]),
                             ("every", "none", [1, 0] * 6)):
        path = os.path.join(tmp, f"{mode}-{hook}.h5")
        run([TORCHRUN, "--nproc-per-node", "2", script, mode, "2" if mode == "every" else "1", path, hook], tmp)
        if not check(os.path.exists(path), f"{mode} ({hook}) wrote no file"):
            continue
        a, _ = check_train_file(path)
        with h5py.File(path, "r") as f:
            skipped, opt_s = f["steps/skipped"][:].tolist(), f["ranks/optimizer_s"][:]
        check(skipped == want and int(a["skipped_steps"]) == sum(want) and int(a["accumulate"]) == 1,
              f"{mode} ({hook}): skipped {skipped}, want {want}; skipped_steps {a['skipped_steps']}, "
              f"accumulate {a['accumulate']}")
        check(np.all(opt_s[np.array(want) == 1] == 0) and np.all(opt_s[np.array(want) == 0] > 0),
              f"{mode} ({hook}): no optimizer time in the skipped steps only ({opt_s[:, 0]})")


def case_testbed(tmp):
    """PyTorch on the emulated testbed (scripts/testbed.sh: 2 hosts, 2 slots each, 1gbit): the
    example with both ranks on host 0 and with one rank per host (mpirun starts one python per
    rank; torch.distributed meets at host 0's address, gloo on eth0), as the torch-whatif
    study runs them. Returns 77 (skipped) without root or the kernel's namespaces."""
    tb = os.path.join(REPO, "scripts", "testbed.sh")
    if os.geteuid() != 0:
        print("SKIP: the testbed needs root (network namespaces)")
        return 77
    probe = subprocess.run(["bash", tb, "probe"], capture_output=True, text=True, timeout=60)
    if probe.returncode == 3:
        print(f"SKIP: {probe.stderr.strip()}")
        return 77
    name, subnet = "gstrch", "10.77.201"
    base = ["bash", tb, "--name", name]
    subprocess.run(base + ["down"], capture_output=True, timeout=60)  # an earlier killed run's leftovers
    try:
        if not check(run(base + ["up", "--hosts", "2", "--rate", "1gbit", "--ranks-per-host", "2", "--subnet", subnet],
                         tmp, timeout=120).returncode == 0, "testbed up"):
            return 1
        env = ["-x", f"MASTER_ADDR={subnet}.1", "-x", "GLOO_SOCKET_IFNAME=eth0"]
        if os.environ.get("GRADSYNC_TORCH_VENV"):
            env += ["-x", "GRADSYNC_TORCH_VENV=" + os.path.abspath(os.environ["GRADSYNC_TORCH_VENV"])]
        files = {}
        for label, port, mca in (("one", 29551, []), ("two", 29552, ["--mca", "rmaps_base_mapping_policy", "node"])):
            files[label] = os.path.join(tmp, f"{label}-host.h5")
            run(base + ["run", "--np", "2", "--timeout", "150", *mca, *env, "-x", f"MASTER_PORT={port}", "--",
                        TPY, "-m", "gradsync_torch.example", "--steps", "8", "--warmup", "2", "--batch", "16",
                        "--bucket-mb", "1", "--out", files[label]], tmp, timeout=180)
            if not check(os.path.exists(files[label]), f"{label}-host run wrote no file"):
                return 1
            check_train_file(files[label])
        with h5py.File(files["one"], "r") as f1, h5py.File(files["two"], "r") as f2:
            one, two = dict(f1.attrs), dict(f2.attrs)
        hosts = lambda a: sorted(set(str(h) for h in a["hostnames"]))  # noqa: E731
        check(int(one["nnodes"]) == 1 and hosts(one) == [f"{name}-h0"], f"one host: {one['nnodes']} {hosts(one)}")
        check(int(two["nnodes"]) == 2 and int(two["ranks_per_node"]) == 1 and hosts(two) == [f"{name}-h0", f"{name}-h1"],
              f"two hosts: {two['nnodes']} x {two['ranks_per_node']} {hosts(two)}")
        # gloo's ring between hosts pipelines in segments of at most 1 MiB (h5out.backend_chunk);
        # on one host the all-reduce is priced whole.
        check(int(one["chunk_bytes_used"]) == 0 and int(two["chunk_bytes_used"]) == 1 << 20
              and "gloo" in str(two["chunk_reason"]), f"chunk: {one['chunk_bytes_used']} / {two['chunk_bytes_used']}")
        # The what-if of the one-host run on two hosts: predict --from-run and compare
        # --compute-from price the same replay on the same fabric and shape.
        p = run([model_bin(), "predict", "--from-run", files["one"], "--fabric", "tcp-10g", "--nodes", "2",
                 "--ranks-per-node", "1", "--json"], tmp)
        q = run([model_bin(), "compare", files["two"], "--fabric", "tcp-10g", "--compute-from", files["one"], "--json"],
                tmp)
        if p.returncode == 0 and q.returncode == 0:
            wi, cf = json.loads(p.stdout), json.loads(q.stdout)["runs"][0]
            check(wi["from_run"] == files["one"] and wi["nodes"] == 2 and wi["ranks_per_node"] == 1, f"predict: {wi}")
            check(cf["nodes"] == 2 and cf["chunk_bytes"] == 1 << 20, f"compare prices the recorded chunk: {cf}")
            check(wi["step_time_s"] > 0 and cf["predicted_step_time_s"] > 0, "what-if steps")
    finally:
        subprocess.run(base + ["down"], capture_output=True, timeout=60)
    return 0


def case_slurm(tmp):
    """PyTorch under Slurm (a private local cluster, scripts/slurm/local-cluster.sh): `srun -n 2
    scripts/torch-python -m gradsync_torch.example` (ranks and the rendezvous from SLURM_*), and
    a torch study with `launcher = "slurm"` (one sbatch job array per rank count, each point's
    ranks one srun step): every point's file written and read back. Returns 77 (skipped)
    without root or slurm-wlm/munge."""
    if os.geteuid() != 0:
        print("SKIP: the local Slurm needs root (SlurmUser=root)")
        return 77
    for t in ("munged", "slurmctld", "slurmd", "sbatch", "srun"):
        if not (shutil.which(t) or os.path.exists(f"/usr/sbin/{t}")):
            print(f"SKIP: {t} not found (Debian packages slurm-wlm munge)")
            return 77
    os.chmod(tmp, 0o755)  # munged wants its socket's folders searchable by all
    cl = ["bash", os.path.join(REPO, "scripts", "slurm", "local-cluster.sh"), "--dir", os.path.join(tmp, "cluster"),
          "--ctld-port", "16857", "--slurmd-port", "16858"]
    try:
        p = run(cl + ["start"], tmp, timeout=120)
        conf = [ln.split("=", 1)[1] for ln in p.stdout.splitlines() if ln.startswith("export SLURM_CONF=")]
        if not check(p.returncode == 0 and len(conf) == 1, f"local cluster: {p.stdout[-500:]} {p.stderr[-500:]}"):
            return 1
        env = {"SLURM_CONF": conf[0]}
        # One srun step, one task per rank.
        one = os.path.join(tmp, "srun.h5")
        run(["srun", "-n", "2", "--time=3", "--kill-on-bad-exit=1", TPY, "-m", "gradsync_torch.example", "--steps",
             "6", "--warmup", "2", "--batch", "16", "--bucket-mb", "1", "--hook", "fp16", "--out", one], tmp,
            timeout=200, env=env)
        if check(os.path.exists(one), "srun: no train file"):
            check_train_file(one)
            with h5py.File(one, "r") as f:
                check(str(f.attrs["hook"]) == "fp16" and int(f.attrs["nnodes"]) == 1, f"srun file: {dict(f.attrs)}")
        # A torch study on Slurm: a bench grid and a train grid, each point one array task.
        study = os.path.join(tmp, "slurm.toml")
        with open(study, "w") as f:
            f.write('name = "torch-slurm"\nruntime = "torch"\nlauncher = "slurm"\nranks = 2\ntimeout_s = 150\n'
                    '[[grid]]\nname = "allreduce"\nprogram = "bench"\n'
                    'fixed = { op = "allreduce", b = "1K", e = "64K", f = 8, n = 4, w = 1 }\n'
                    '[[grid]]\nname = "train"\nprogram = "train"\n'
                    'fixed = { steps = 5, warmup = 2, batch = 16 }\nsweep = { hook = ["none", "bf16"] }\n')
        sdir = os.path.join(tmp, "study")
        run([os.path.join(REPO, "scripts", "study"), "run", study, "--out", sdir, "--bin", os.path.dirname(model_bin())],
            tmp, timeout=400, env=env)
        with h5py.File(os.path.join(sdir, "study.h5"), "r") as f:
            status = [s.decode() if isinstance(s, bytes) else str(s) for s in f["points/status"][:]]
        check(status == ["ok"] * 3, f"slurm study: point status {status}")
        trains = sorted(os.listdir(os.path.join(sdir, "train")))
        check(len(trains) == 2, f"slurm study: train files {trains}")
        for name in trains:
            check_train_file(os.path.join(sdir, "train", name))
        benches = os.listdir(os.path.join(sdir, "allreduce"))
        if check(len(benches) == 1, f"slurm study: bench files {benches}"):
            with h5py.File(os.path.join(sdir, "allreduce", benches[0]), "r") as f:
                check(str(f.attrs["program"]) == "gradsync-bench" and int(f.attrs["nranks"]) == 2,
                      f"slurm study: bench file {dict(f.attrs)}")
    finally:
        subprocess.run(cl + ["stop"], capture_output=True, timeout=120)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True,
                    choices=["recorder", "membership", "calibrate", "codecs", "killed", "sched", "testbed", "slurm",
                             "accumulate"])
    ap.add_argument("--keep", default=None)
    o = ap.parse_args()
    venv = os.environ.get("GRADSYNC_TORCH_VENV", os.path.join(REPO, ".venv-torch"))
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        print(f"SKIP: no PyTorch venv at {venv} (GRADSYNC_DEPS=torch scripts/install-deps.sh makes it)")
        return 77
    if o.case != "killed" and o.case != "membership" and not os.path.exists(model_bin()):
        print(f"SKIP: {model_bin()} not built")
        return 77
    # A test stopped by SIGTERM (ctest's time-out, a user) still runs its `finally` blocks:
    # the testbed and the local Slurm are taken down, the folder removed.
    def stop(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, stop)
    tmp = o.keep or tempfile.mkdtemp(prefix=f"gs-torch-{o.case}-")
    os.makedirs(tmp, exist_ok=True)
    try:
        rc = {"recorder": case_recorder, "membership": case_membership, "calibrate": case_calibrate,
              "codecs": case_codecs, "killed": case_killed, "sched": case_sched, "testbed": case_testbed,
              "slurm": case_slurm, "accumulate": case_accumulate}[o.case](tmp)
        if rc == 77:
            return 77
    finally:
        if not o.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{o.case}: {'FAILED ' + str(len(FAILS)) + ' checks' if FAILS else 'ok'}")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
