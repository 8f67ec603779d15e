#!/usr/bin/python3
"""End-to-end checks of gradsync-train: run it through mpiexec as a user would and check
its HDF5 result (h5py), exit status and messages.

    check_train.py --train BIN --case NAME -- MPIEXEC [FLAGS...]

The launcher prefix after "--" is completed with "-np N BIN ARGS". Each case runs in a
fresh temporary directory. Exit status 0 = pass, 1 = fail, 77 = skipped (no h5py).

Cases:
  equivalence  N ranks x batch B == 1 rank x batch N*B (mlp: N = 2, 3; cnn: N = 2), SGD,
               same seed, 20 steps: final_param_norm within 1e-5 relative, losses close
  accumulate   2 ranks x batch 8 x --accumulate 2 == 1 rank x batch 32 (same criterion)
  learns       training lowers the loss and reaches >= 85% accuracy on the held-out set
               (mlp: 2 epochs of 4096 samples on 2 ranks; cnn: 300 steps on 2 ranks)
  overlap      emulated resnet18-cifar (cpu profile, 2 ranks): with overlap, buckets start
               before backward ends and exposed < total communication; --no-overlap
               starts every bucket after the last one is ready
  mismatch     MPMD run with --bucket-mb 1 on rank 0 and 2 on rank 1 fails, non-zero, fast,
               with a message naming the option and rank 1
  usage        bad options exit 2 with "gradsync-train: error: ..." naming the option and
               leave no result file; --help and --list-models need no mpirun
  schema       root attributes, /steps, /buckets, /epochs, /model as documented (real and emulated)
  precision    --precision fp16 / bf16 (mlp, 2 ranks, 3 epochs at default settings): eval
               accuracy within 1 percentage point of fp32; bytes_sent exactly half of fp32's;
               compression_ratio 2.0; precision / loss-scale attributes; emulated resnet18-cifar
               sends half the bytes too
  loss_scale   GRADSYNC_TEST_INJECT_INF puts an inf into rank 0's gradients at given steps:
               /steps/loss_scale follows GradScaler (x0.5 and skip on inf, x2 after `interval`
               good steps), skipped_steps counts them, static scales stay put, and a skipped
               step leaves the weights as they were (with the fp16 cast and with top-k)
  device       --device/--backend: bad combinations exit 2 (nccl on cpu, an unknown device,
               real compute of cnn on cuda); --device cuda in a build without
               CUDA exits 2 ("built without CUDA support"); without a GPU it exits 1 with one line
               "gradsync-train: error: no CUDA device found (...)" (rank 0 only) and no result
               file; with a GPU, emulated resnet18-cifar on cuda (nccl on 1 rank, host-staged mpi
               on 2 ranks, fp16) records device/backend/gpu_name/gpu_memory_used_bytes and a
               well-ordered bucket timeline; real mlp on cuda matches the CPU run (1 rank, 20
               steps) and learns (>= 85%, fp16/bf16 within 2 points of fp32)
  convergence  every compressor (fp16, bf16, powersgd:rank=2, qsgd:levels=16, onebit,
               topk:ratio=0.1) trains mlp (2 ranks, 3 epochs at default settings) to within
               1 percentage point of the uncompressed eval accuracy
"""

import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

try:
    import h5py
    import numpy as np
except ImportError as e:  # run with /usr/bin/python3 (Debian's python3-h5py)
    print(f"SKIP: {e} (needs h5py and numpy)")
    sys.exit(77)

RUN_TIMEOUT_S = 90


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


class Runner:
    def __init__(self, train, launcher, workdir, with_cuda=""):
        self.train, self.launcher, self.workdir = train, launcher, workdir
        self.with_cuda = with_cuda  # "ON" | "OFF" (GRADSYNC_WITH_CUDA of the build) | "" unknown

    def run(self, np_, args, expect=0, direct=False, timeout=RUN_TIMEOUT_S):
        cmd = ([self.train] if direct else self.launcher + ["-np", str(np_), self.train]) + args
        t = time.time()
        p = subprocess.run(cmd, cwd=self.workdir, capture_output=True, text=True, timeout=timeout)
        took = time.time() - t
        print(f"$ {' '.join(cmd)}\n  -> exit {p.returncode} in {took:.1f} s")
        if expect is not None and p.returncode != expect:
            raise Failure(f"expected exit {expect}, got {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        return p

    def train_file(self, np_, name, args):
        out = os.path.join(self.workdir, name + ".h5")
        self.run(np_, args + ["--out", out, "--quiet"])
        return h5py.File(out, "r")


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def case_equivalence(r):
    common = ["--steps", "20", "--optimizer", "sgd", "--seed", "7", "--loader-workers", "1"]
    for model, runs in (("mlp", [(1, 24), (2, 12), (3, 8)]), ("cnn", [(1, 16), (2, 8)])):
        files = [r.train_file(n, f"{model}-np{n}", ["--model", model, "--batch-per-rank", str(b)] + common)
                 for n, b in runs]
        ref = files[0]
        for f in files[1:]:
            n = f.attrs["nranks"]
            e = rel(f.attrs["final_param_norm"], ref.attrs["final_param_norm"])
            print(f"  {model}: {n} ranks x {f.attrs['batch_per_rank']} vs 1 x {ref.attrs['batch_per_rank']}: "
                  f"final_param_norm {f.attrs['final_param_norm']:.9g} vs {ref.attrs['final_param_norm']:.9g} "
                  f"(relative difference {e:.2e})")
            check(e < 1e-5, f"{model} on {n} ranks drifted from 1 rank by {e:.2e} (limit 1e-5)")
            dl = np.max(np.abs(f["steps/loss"][:] - ref["steps/loss"][:]))
            check(dl < 1e-4, f"{model} on {n} ranks: per-step loss differs by up to {dl:.2e}")


def case_accumulate(r):
    common = ["--model", "mlp", "--steps", "20", "--seed", "3", "--loader-workers", "0"]
    ref = r.train_file(1, "acc-ref", common + ["--batch-per-rank", "32"])
    acc = r.train_file(2, "acc", common + ["--batch-per-rank", "8", "--accumulate", "2"])
    e = rel(acc.attrs["final_param_norm"], ref.attrs["final_param_norm"])
    print(f"  2 ranks x 8 x accumulate 2 vs 1 x 32: relative difference {e:.2e}")
    check(e < 1e-5, f"accumulation drifted by {e:.2e}")
    check(acc.attrs["accumulate"] == 2, "accumulate attribute")
    # backward_sync_s: the synchronized micro-step's backward, one of the two in backward_s
    # (every rank's in /ranks); with one micro-step, all of it.
    for f, k in ((acc, 2), (ref, 1)):
        sync, whole = f["steps/backward_sync_s"][:], f["steps/backward_s"][:]
        check(np.all(sync > 0) and np.all(sync <= whole * (1 + 1e-12)), "backward_sync_s not inside backward_s")
        if k == 1:
            check(np.allclose(sync, whole, rtol=1e-12), "accumulate 1: backward_sync_s != backward_s")
        else:
            check(np.all(sync < whole), "accumulate 2: backward_sync_s is not a part of backward_s")
        check(f["ranks/backward_sync_s"].shape == (f.attrs["steps"], f.attrs["nranks"]), "/ranks/backward_sync_s shape")
    print(f"  backward_sync_s / backward_s median, accumulate 2: "
          f"{np.median(acc['steps/backward_sync_s'][:] / acc['steps/backward_s'][:]):.2f}")


def case_learns(r):
    f = r.train_file(2, "mlp-learn", ["--model", "mlp", "--epochs", "2", "--samples-per-epoch", "4096",
                                      "--batch-per-rank", "16"])
    ep = f["epochs"]
    check(len(ep["epoch"]) == 2, f"expected 2 epoch rows, got {len(ep['epoch'])}")
    loss, acc = ep["loss"][:], ep["eval_accuracy"][:]
    print(f"  mlp: epoch losses {loss}, eval accuracy {acc}, final {f.attrs['final_eval_accuracy']:.4f}")
    check(loss[1] < loss[0], "mlp: loss did not go down from epoch 0 to 1")
    first = float(np.mean(f["steps/loss"][:10]))
    check(first > 2.0 and loss[1] < 0.6, f"mlp: loss {first:.3f} -> {loss[1]:.3f} is not learning")
    check(f.attrs["final_eval_accuracy"] >= 0.85, f"mlp: eval accuracy {f.attrs['final_eval_accuracy']:.3f} < 0.85")
    c = r.train_file(2, "cnn-learn", ["--model", "cnn", "--steps", "300", "--batch-per-rank", "16"])
    s = c["steps/loss"][:]
    print(f"  cnn: loss {np.mean(s[:10]):.3f} -> {np.mean(s[-20:]):.3f}, "
          f"eval accuracy {c.attrs['final_eval_accuracy']:.4f}")
    check(np.mean(s[-20:]) < 0.5 * np.mean(s[:10]), "cnn: loss did not halve")
    check(c.attrs["final_eval_accuracy"] >= 0.85, f"cnn: eval accuracy {c.attrs['final_eval_accuracy']:.3f} < 0.85")


def case_overlap(r):
    common = ["--model", "resnet18-cifar", "--compute", "emulated", "--compute-profile", "cpu",
              "--batch-per-rank", "4", "--steps", "6", "--warmup-steps", "1", "--loader-workers", "0"]
    on = r.train_file(2, "overlap-on", common)
    off = r.train_file(2, "overlap-off", common + ["--no-overlap"])
    nb = int(on.attrs["num_buckets"])
    check(nb >= 2, f"resnet18-cifar should have several buckets at 25/1 MiB, got {nb}")
    for f, name in ((on, "overlap"), (off, "no-overlap")):
        st = f["steps"]
        exp = float(np.median(st["comm_exposed_s"][1:]))
        tot = float(np.median(st["comm_total_s"][1:]))
        bwd = float(np.median(st["backward_s"][1:]))
        print(f"  {name}: backward {bwd*1e3:.1f} ms, comm total {tot*1e3:.1f} ms, exposed {exp*1e3:.1f} ms")
        b = f["buckets"]
        for s in range(1, int(f.attrs["steps"])):
            m = b["step"][:] == s
            ready, start = b["ready_s"][m], b["start_s"][m]
            if name == "overlap":
                check(start[0] < ready[-1], f"step {s}: first bucket started at {start[0]:.4f} s, "
                                            f"after the last was ready ({ready[-1]:.4f} s): no overlap")
            else:
                check(start[0] >= ready[-1], f"step {s}: --no-overlap started a bucket before backward ended")
        if name == "overlap":
            check(exp < tot, f"overlap did not hide communication: exposed {exp:.4f} s >= total {tot:.4f} s")
        else:
            check(exp >= 0.9 * tot, f"--no-overlap should expose all communication ({exp:.4f} of {tot:.4f} s)")


def case_mismatch(r):
    cmd = r.launcher + ["-np", "1", r.train, "--model", "mlp", "--steps", "3", "--bucket-mb", "1", ":",
                        "-np", "1", r.train, "--model", "mlp", "--steps", "3", "--bucket-mb", "2"]
    t = time.time()
    p = subprocess.run(cmd, cwd=r.workdir, capture_output=True, text=True, timeout=60)
    took = time.time() - t
    print(f"$ {' '.join(cmd)}\n  -> exit {p.returncode} in {took:.1f} s")
    print("  stderr: " + "\n  stderr: ".join(l for l in p.stderr.splitlines() if "gradsync-train" in l))
    check(p.returncode != 0, "a run with different --bucket-mb on two ranks succeeded")
    check(re.search(r"option --bucket-mb differs across ranks: rank 0 has '1' but rank\(s\) 1 have '2'",
                    p.stderr), "the message does not name the option and the ranks")
    check(took < 30, f"took {took:.1f} s to fail")
    check(not glob.glob(os.path.join(r.workdir, "results", "*.h5")), "a result file was written")


def attrs_of(f):
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}


def case_tune(r):
    # --tune applies the model's choice of the knobs not given, and records it. Written
    # --tune=FABRIC: Open MPI 4's mpirun takes a separate "--tune X" as its own option.
    out = os.path.join(r.workdir, "tuned.h5")
    p = r.run(2, ["--model", "resnet18-cifar", "--compute", "emulated", "--steps", "3", "--tune=seed-tcp",
                  "--bucket-mb", "5", "--out", out, "--quiet"])
    check("variable file" not in p.stderr and "note:" not in p.stderr, f"--tune=seed-tcp: stderr {p.stderr!r}")
    f = h5py.File(out, "r")
    a = attrs_of(f)
    check(a["tune_fabric"] == "seed-tcp", f"tune_fabric {a['tune_fabric']!r}")
    choice = a["tune_choice"]
    check(choice.startswith("--bucket-mb 5 "), f"the fixed --bucket-mb 5 was not kept: {choice!r}")
    check(a["bucket_mb"] == 5, f"bucket_mb {a['bucket_mb']}")
    check(f"--algo {a['algo']} " in choice, f"algo {a['algo']!r} is not the tuned one: {choice!r}")
    check(f"--compress {a['compress']} " in choice, f"compress {a['compress']!r} is not the tuned one: {choice!r}")
    check(f"--precision {a['precision']}" in choice, f"precision {a['precision']!r} is not the tuned one")
    check(0 < a["tune_predicted_step_s"] <= a["tune_default_predicted_step_s"],
          f"predicted {a['tune_predicted_step_s']} vs default {a['tune_default_predicted_step_s']}")
    check(a["tune_bound"] in ("compute", "data", "latency", "bandwidth", "codec"), f"bound {a['tune_bound']!r}")
    # The tuner priced the run where it ran: its ranks against the cores they shared
    # (machine_ranks / machine_cores, core/cpus.hpp). Re-predicted with gradsync-model
    # predict, the recorded choice on the same cluster gives the recorded step; with a codec
    # and more ranks than cores (3 on this 2-core host) the share changes the price. Written
    # as two words, --tune works and one line names mpirun's messages.
    model_bin = os.path.join(os.path.dirname(r.train), "gradsync-model")
    out3 = os.path.join(r.workdir, "tuned3.h5")
    p = r.run(3, ["--model", "resnet18-cifar", "--compute", "emulated", "--steps", "2", "--tune", "seed-tcp",
                  "--compress", "powersgd:rank=4", "--out", out3, "--quiet"])
    if "Unable to locate the variable file" in p.stderr:  # Open MPI 4's mpirun
        check("Write --tune=seed-tcp" in p.stderr, f"no note on mpirun's messages: {p.stderr!r}")
    t = attrs_of(h5py.File(out3, "r"))
    check(t["tune_fabric"] == "seed-tcp" and "--compress powersgd:rank=4 " in t["tune_choice"],
          f"3 ranks: tune_fabric {t['tune_fabric']!r}, choice {t['tune_choice']!r}")
    if os.path.exists(model_bin):
        base = [model_bin, "predict", "--json", "--model", "resnet18-cifar", "--fabric", "seed-tcp",
                "--compute-profile", t["compute_profile"], "--nodes", str(t["nnodes"]),
                "--ranks-per-node", str(t["ranks_per_node"]), "--batch-per-rank", str(t["batch_per_rank"]),
                "--loader-workers", str(t["loader_workers"]), "--optimizer", t["optimizer"],
                "--samples-per-epoch", str(t["samples_per_epoch"])] + t["tune_choice"].split()
        def predicted(extra):
            q = subprocess.run(base + extra, capture_output=True, text=True, timeout=60)
            check(q.returncode == 0, f"{' '.join(base + extra)}: exit {q.returncode}: {q.stderr}")
            return json.loads(q.stdout)["step_time_s"]
        shared = predicted(["--machine-ranks", str(t["machine_ranks"]), "--machine-cores", str(t["machine_cores"])])
        print(f"  3 ranks on {t['machine_cores']} cores: recorded {t['tune_predicted_step_s'] * 1e3:.4f} ms, "
              f"predict with the machine share {shared * 1e3:.4f} ms")
        check(rel(shared, t["tune_predicted_step_s"]) < 1e-9, "the recorded tune step is not predict's for its machine share")
        if t["machine_ranks"] > t["machine_cores"]:
            alone = predicted([])
            print(f"  predict as if each rank had a core: {alone * 1e3:.4f} ms")
            check(alone < shared, f"the machine share did not slow the codecs: {alone} vs {shared}")
    # Without --tune the attributes are empty.
    g = r.train_file(1, "untuned", ["--model", "resnet18-cifar", "--compute", "emulated", "--steps", "2"])
    check(g.attrs["tune_predicted_step_s"] == 0, "tune_predicted_step_s set without --tune")
    # Runs the model cannot predict, or an unknown fabric: exit 2, one line naming --tune.
    for args, pat in ((["--model", "mlp", "--steps", "2", "--tune", "seed-tcp"], r"--tune"),
                      (["--model", "resnet18-cifar", "--compute", "emulated", "--steps", "2", "--tune", "no-such-fabric"],
                       r"--tune.*no-such-fabric")):
        p = r.run(2, args, expect=2)
        check(re.search(pat, p.stderr), f"stderr does not match {pat!r}: {p.stderr}")


def case_usage(r):
    bad = [
        (["--model", "nope"], "--model", "known: mlp, cnn, resnet18-cifar"),
        (["--model", "mlp", "--batch-per-rank", "0"], "--batch-per-rank", None),
        (["--model", "mlp", "--batch-per-rank=-4"], "--batch-per-rank", None),
        (["--model", "mlp", "--steps", "5", "--epochs", "1"], "--steps and --epochs", None),
        (["--model", "mlp", "--algo", "nope"], "--algo", "known: ring"),
        (["--model", "mlp", "--optimizer", "lamb"], "--optimizer", "known: sgd, adam"),
        (["--model", "mlp", "--compress", "nope"], "--compress", "known: none"),
        (["--model", "mlp", "--compress", "none:rank=4"], "--compress", None),
        (["--model", "resnet50", "--compute", "real"], "--compute", None),
        (["--model", "mlp", "--compute-profile", "nosuch"], "--compute-profile", None),
        (["--model", "mlp", "--bucket-mb", "-1"], "--bucket-mb", None),
        (["--model", "mlp", "--lr", "0"], "--lr", None),
        (["--model", "mlp", "--prefetch", "0"], "--prefetch", None),
        (["--model", "mlp", "--no-such-option"], "no-such-option", None),
        (["--model", "mlp", "--precision", "fp8"], "--precision", "known: fp32, fp16, bf16"),
        (["--model", "mlp", "--precision", "fp16", "--loss-scale", "static:0"], "--loss-scale", None),
        (["--model", "mlp", "--precision", "fp16", "--loss-scale", "static:-1"], "--loss-scale", None),
        (["--model", "mlp", "--precision", "fp16", "--loss-scale", "static:abc"], "--loss-scale", None),
        (["--model", "mlp", "--precision", "fp16", "--loss-scale", "sometimes"], "--loss-scale", None),
        (["--model", "mlp", "--loss-scale", "dynamic"], "--loss-scale", "--precision fp16 or bf16"),
        (["--model", "mlp", "--buffers", "pinned"], "--buffers", "known: shared, private"),
    ]
    for args, opt, extra in bad:
        p = r.run(1, args, expect=2, direct=True)
        line = p.stderr.strip()
        check(line.startswith("gradsync-train: error:") and opt in line, f"{args}: message {line!r}")
        check(extra is None or extra in line, f"{args}: message {line!r} lacks {extra!r}")
    # Under mpiexec: refused before any communication, status 2 from the launcher.
    p = r.run(2, ["--model", "mlp", "--optimizer", "lamb"], expect=2)
    # Needs the rank count: 10 samples cannot make a step of 2 x 8; refused identically on all ranks.
    p = r.run(2, ["--model", "mlp", "--samples-per-epoch", "10", "--batch-per-rank", "8"], expect=2)
    check(p.stderr.count("gradsync-train: error: option --samples-per-epoch") == 1, f"stderr: {p.stderr!r}")
    check(not glob.glob(os.path.join(r.workdir, "results", "*.h5")), "a refused run left a result file")
    # No mpirun needed for these.
    p = r.run(1, ["--help"], direct=True)
    check("--bucket-mb" in p.stdout and "--first-bucket-mb" in p.stdout, "--help lacks options")
    p = r.run(1, ["--list-models"], direct=True)
    check(all(m in p.stdout for m in ("resnet50", "gpt2", "mlp", "cnn")), "--list-models lacks models")
    p = r.run(1, ["--list-models", "--json"], direct=True)
    models = {m["name"]: m for m in json.loads(p.stdout)}
    check(models["resnet50"]["parameters"] == 25557032 and models["resnet50"]["tensors"] == 161, "resnet50 entry")
    check(models["mlp"]["grad_bytes"] == 4 * models["mlp"]["parameters"], "mlp entry")


ROOT_ATTRS = {
    "model": str, "compute": str, "compute_profile": str, "device": str, "nranks": int, "nnodes": int,
    "ranks_per_node": int, "batch_per_rank": int, "bucket_mb": float, "first_bucket_mb": float, "overlap": int,
    "accumulate": int, "algo": str, "chunk_bytes": int, "chunk_bytes_used": int, "chunk_reason": str, "buffers": str,
    "channels": int, "compress": str, "precision": str,
    "loader_workers": int, "prefetch": int, "data_time_s": float, "optimizer": str, "lr": float, "seed": int,
    "steps": int, "epochs": int, "samples_per_epoch": int, "warmup_steps": int, "num_buckets": int,
    "bucket_bytes": list, "final_param_norm": float, "final_eval_accuracy": float, "compression_ratio": float,
    "compress_effective": str, "loss_scale_mode": str, "loss_scale_spec": str, "skipped_steps": int,
    # provenance
    "program": str, "argv": list, "git_revision": str, "hostnames": list, "schema_version": int,
    "machine_ids": list, "machine_ranks": int, "machine_cores": int,
}
STEP_COLS = ["step", "loss", "step_time_s", "data_s", "forward_s", "backward_s", "backward_sync_s", "comm_exposed_s",
             "optimizer_s", "bytes_sent", "comm_total_s", "encode_s", "decode_s", "unscale_s", "cpu_s", "loss_scale",
             "skipped"]
BUCKET_COLS = ["step", "bucket", "bytes", "ready_s", "start_s", "end_s", "codec_s"]
EPOCH_COLS = ["epoch", "epoch_time_s", "loss", "eval_accuracy"]


def attr_type_ok(v, t):
    if t is str:
        return isinstance(v, (str, bytes))
    if t is int:
        return isinstance(v, (int, np.integer))
    if t is float:
        return isinstance(v, (float, np.floating))
    return isinstance(v, (np.ndarray, list))


MODEL_COLS = ("tensor_names", "tensor_numel", "tensor_ndim", "tensor_shape", "tensor_bucket")


def check_schema(f, real):
    for k, t in ROOT_ATTRS.items():
        check(k in f.attrs, f"root attribute {k} missing")
        check(attr_type_ok(f.attrs[k], t), f"root attribute {k} has type {type(f.attrs[k])}, want {t}")
    steps = int(f.attrs["steps"])
    for c in STEP_COLS:
        check(f"steps/{c}" in f and f[f"steps/{c}"].shape == (steps,), f"/steps/{c} missing or not {steps} rows")
    nb = int(f.attrs["num_buckets"])
    for c in BUCKET_COLS:
        check(f[f"buckets/{c}"].shape == (steps * nb,), f"/buckets/{c} should have steps x buckets rows")
    # Every rank's timeline of the same rows; its column 0 is /buckets' own (rank 0).
    nranks = int(f.attrs["nranks"])
    for c in ("ready_s", "start_s", "end_s", "codec_s"):
        check(f[f"buckets/by_rank/{c}"].shape == (steps * nb, nranks), f"/buckets/by_rank/{c} should be [rows, ranks]")
        check(np.array_equal(f[f"buckets/by_rank/{c}"][:, 0], f[f"buckets/{c}"][:]),
              f"/buckets/by_rank/{c}[:, 0] should be rank 0's /buckets/{c}")
    for c in EPOCH_COLS:
        check(f"epochs/{c}" in f and f[f"epochs/{c}"].shape == (int(f.attrs["epochs"]),), f"/epochs/{c}")
    check(len(f.attrs["bucket_bytes"]) == nb, "bucket_bytes length")
    # /model: the parameter tensors in forward order and the bucket each went to.
    for c in MODEL_COLS:
        check(f"model/{c}" in f, f"/model/{c} missing")
    m = f["model"]
    nt = len(m["tensor_numel"])
    check(nt > 0 and all(len(m[c]) == nt for c in ("tensor_names", "tensor_ndim", "tensor_bucket")),
          "/model columns should have one row per tensor")
    ndim, numel, shape = m["tensor_ndim"][:], m["tensor_numel"][:], m["tensor_shape"][:]
    check(len(shape) == int(np.sum(ndim)), "/model/tensor_shape should hold sum(tensor_ndim) entries")
    pos = 0
    for i in range(nt):
        check(int(np.prod(shape[pos:pos + ndim[i]])) == numel[i], f"/model tensor {i}: shape vs numel")
        pos += ndim[i]
    tb = m["tensor_bucket"][:]
    check(np.all((tb >= 0) & (tb < nb)), "/model/tensor_bucket out of range")
    per_bucket = [4 * int(np.sum(numel[tb == k])) for k in range(nb)]
    check(per_bucket == [int(x) for x in f.attrs["bucket_bytes"]], f"/model tensors per bucket {per_bucket} "
          f"vs bucket_bytes {list(f.attrs['bucket_bytes'])}")
    b = f["buckets"]
    check(np.array_equal(b["bytes"][:nb], f.attrs["bucket_bytes"]), "bucket bytes disagree with bucket_bytes")
    check(np.all(b["ready_s"][:] <= b["start_s"][:] + 1e-9) and np.all(b["start_s"][:] <= b["end_s"][:]),
          "bucket timeline out of order")
    check(f.attrs["compress"] == "none" and f.attrs["compression_ratio"] == 1.0, "compress attributes")
    check(np.all(b["codec_s"][:] == 0), "no compressor: /buckets/codec_s all 0")
    check(f.attrs["precision"] == "fp32" and f.attrs["device"] == "cpu", "precision/device")
    check(f.attrs["loss_scale_mode"] == "none" and f.attrs["skipped_steps"] == 0 and f.attrs["compress_effective"] == "none",
          "fp32: no loss scaling, nothing skipped")
    check(np.all(f["steps/loss_scale"][:] == 1.0) and np.all(f["steps/skipped"][:] == 0), "fp32 loss_scale/skipped")
    check(len(f.attrs["hostnames"]) == f.attrs["nranks"], "hostnames per rank")
    # /net: bytes per rank and interface during the run (values depend on the transport).
    check("net/interface" in f, "/net/interface missing")
    nif = len(f["net/interface"])
    for c in ("tx_bytes", "rx_bytes"):
        check(f[f"net/{c}"].shape == (int(f.attrs["nranks"]), nif) and f[f"net/{c}"].dtype.kind == "i",
              f"/net/{c} should be int64 [ranks, interfaces]")
    st = f["steps"]
    check(np.all(st["step_time_s"][:] > 0), "step times")
    check(np.all(st["step_time_s"][:] + 1e-6 >= st["forward_s"][:] + st["backward_s"][:]), "step < fwd + bwd")
    p = int(f.attrs["nranks"])
    # /ranks: every rank's own columns, of which /steps holds the max (step time) and means.
    for c in ["step_time_s", "data_s", "forward_s", "backward_s", "comm_exposed_s", "optimizer_s", "reducer_s",
              "encode_s", "decode_s", "cpu_s"]:
        check(f"ranks/{c}" in f and f[f"ranks/{c}"].shape == (st["step"].shape[0], p), f"/ranks/{c} [steps, ranks]")
        per = f[f"ranks/{c}"][:]
        agg = per.max(axis=1) if c == "step_time_s" else per.mean(axis=1)
        check(np.allclose(agg, st[c][:], rtol=1e-9, atol=1e-12), f"/steps/{c} is the {'max' if c == 'step_time_s' else 'mean'} of /ranks/{c}")
    # The process's CPU per step: positive, and at most its threads' share of the wall time.
    cpu = f["ranks/cpu_s"][:]
    check(np.all(cpu > 0) and np.all(cpu <= f["ranks/step_time_s"][:] * (os.cpu_count() or 1) + 0.05),
          f"/ranks/cpu_s {cpu.tolist()} against step times {f['ranks/step_time_s'][:].tolist()}")
    # One machine: every rank's machine id (the kernel's boot id) is the same, all ranks share
    # it, and its CPUs are the union of the ranks' CPU lists.
    ids = [x.decode() if isinstance(x, bytes) else str(x) for x in f.attrs["machine_ids"]]
    check(len(ids) == p and len(set(ids)) == 1 and int(f.attrs["machine_ranks"]) == p,
          f"machine_ids {ids}, machine_ranks {f.attrs['machine_ranks']} for {p} ranks on one machine")
    union = set()
    for lst in f.attrs["cpu_affinity"]:
        for part in (lst.decode() if isinstance(lst, bytes) else str(lst)).split(","):
            a, _, b = part.partition("-")
            union.update(range(int(a), int(b or a) + 1))
    check(int(f.attrs["machine_cores"]) == len(union), f"machine_cores {f.attrs['machine_cores']} vs CPUs {sorted(union)}")
    grad_bytes = int(np.sum(f.attrs["bucket_bytes"]))
    want = 2 * (p - 1) / p * grad_bytes
    check(np.allclose(st["bytes_sent"][:], want, rtol=1e-6), f"bytes_sent {st['bytes_sent'][0]} vs {want}")
    if real:
        check(f.attrs["compute"] == "real" and 0 <= f.attrs["final_eval_accuracy"] <= 1, "real accuracy")
        check(np.all(np.isfinite(st["loss"][:])), "real loss finite")
    else:
        check(f.attrs["compute"] == "emulated" and math.isnan(f.attrs["final_eval_accuracy"]), "emulated: NaN accuracy")


def case_schema(r):
    # Default output path, printed at the end.
    p = r.run(2, ["--model", "mlp", "--steps", "6", "--bucket-mb", "0.01", "--first-bucket-mb", "0.005",
                  "--samples-per-epoch", "256", "--batch-per-rank", "16"])
    m = re.search(r"^wrote (results/train-mlp-\d{8}T\d{6}Z\.h5)$", p.stdout, re.M)
    check(m, f"no 'wrote results/train-mlp-<UTC>.h5' line in {p.stdout!r}")
    check("step time" in p.stdout and "eval accuracy" in p.stdout, "summary missing")
    f = h5py.File(os.path.join(r.workdir, m.group(1)), "r")
    check_schema(f, real=True)
    check(int(f.attrs["num_buckets"]) == 3, "0.01 MiB buckets should split the mlp in 3")
    check(int(f.attrs["epochs"]) == 0 or len(f["epochs/epoch"]) == int(f.attrs["epochs"]), "epochs")
    # The chunk the all-reduce ran with: auto's transport choice (one node: the ring's round
    # on shared memory), and --chunk-bytes as given.
    check(int(f.attrs["chunk_bytes"]) == 0 and int(f.attrs["chunk_bytes_used"]) > 0 and f.attrs["chunk_reason"],
          f"auto chunk: used {f.attrs['chunk_bytes_used']} ({f.attrs['chunk_reason']!r})")
    e = r.train_file(3, "emu", ["--model", "mlp", "--compute", "emulated", "--steps", "4", "--bucket-mb", "0.1",
                                "--algo", "ring", "--chunk-bytes", "64K"])
    check_schema(e, real=False)
    check(int(e.attrs["chunk_bytes"]) == 65536 and int(e.attrs["chunk_bytes_used"]) == 65536,
          f"--chunk-bytes 64K: chunk_bytes {e.attrs['chunk_bytes']}, used {e.attrs['chunk_bytes_used']}")
    check(e.attrs["compute_profile"] == "h200", "emulated default profile")
    # bucket_algo_used: what each bucket's all-reduce ran. The default (--algo auto) on one
    # node: mpi up to 64 KiB, shm above (the mlp's buckets are 10,280, 263,168 and 66,560
    # bytes), as the model resolves auto for the same sizes (gradsync-model collective,
    # whose "mpi" is Open MPI's own choice: rd or ring); a given algorithm names itself.
    want = ["mpi" if int(b) <= 65536 else "shm" for b in f.attrs["bucket_bytes"]]
    check(f.attrs["algo"] == "auto" and list(f.attrs["bucket_algo_used"]) == want and "mpi" in want and "shm" in want,
          f"default algo {f.attrs['algo']!r}, used {list(f.attrs['bucket_algo_used'])} for {list(f.attrs['bucket_bytes'])}")
    check(list(e.attrs["bucket_algo_used"]) == ["ring"] * int(e.attrs["num_buckets"]),
          f"--algo ring: used {list(e.attrs['bucket_algo_used'])}")
    a = r.train_file(2, "auto", ["--model", "resnet18-cifar", "--compute", "emulated", "--steps", "2",
                                 "--first-bucket-mb", "0.03"])
    used, sizes = list(a.attrs["bucket_algo_used"]), [int(x) for x in a.attrs["bucket_bytes"]]
    check(len(used) == len(sizes) and "shm" in used, f"auto on resnet18-cifar: {used} for {sizes}")
    model_bin = os.path.join(os.path.dirname(r.train), "gradsync-model")
    if os.path.exists(model_bin):
        for u, b in zip(used, sizes):
            q = subprocess.run([model_bin, "collective", "--op", "allreduce", "--algo", "auto", "--ranks", "2",
                                "--bytes", str(b), "--fabric", "shm-local", "--json"], capture_output=True, text=True)
            m = json.loads(q.stdout)["algo_used"]
            check(u == m or (u == "mpi" and m in ("rd", "ring")), f"bucket of {b} bytes: ran {u}, the model prices {m}")
    p = r.run(2, ["--model", "resnet18-cifar", "--compute", "emulated", "--steps", "2", "--bucket-mb", "2",
                  "--out", os.path.join(r.workdir, "line.h5")])
    check(re.search(r"^  algorithm      auto: shm \(\d+ buckets\)", p.stdout, re.M), f"summary: {p.stdout!r}")
    # --buffers: the buckets registered in the node's shared memory by default (one node),
    # each process's own with --buffers private; shm averages both right.
    check(f.attrs["buffers"] == "shared" and e.attrs["buffers"] == "shared",
          f"default buffers {f.attrs['buffers']}, {e.attrs['buffers']}")
    for mode in ("shared", "private"):
        b = r.train_file(2, f"buffers-{mode}", ["--model", "resnet18-cifar", "--compute", "emulated", "--steps", "3",
                                                "--algo", "shm", "--bucket-mb", "2", "--buffers", mode])
        check(b.attrs["buffers"] == mode, f"--buffers {mode}: recorded {b.attrs['buffers']}")
        check(np.all(np.isfinite(b["steps/comm_total_s"][:])), f"--buffers {mode}: comm times")
    # compression_ratio counts compressed steps only (results/README.md): PowerSGD rank 1
    # from step 2 on resnet18-cifar sends 183,740 of 44,695,848 bytes per compressed step;
    # steps 0 and 1 (plain all-reduce) must not pull the ratio down (they gave 2.48).
    c = r.train_file(2, "psgd_ratio", ["--model", "resnet18-cifar", "--compute", "emulated", "--steps", "5",
                                       "--compress", "powersgd:rank=1,start=2"])
    ratio = float(c.attrs["compression_ratio"])
    check(abs(ratio - 44695848 / 183740) < 0.005, f"powersgd:rank=1,start=2 compression_ratio {ratio:.4f}, "
          f"expected {44695848 / 183740:.2f}")
    # /buckets/codec_s (rank 0's buckets) splits rank 0's encode + decode of each step: PowerSGD
    # encodes from step 2 on, every bucket (its plain steps before that pass through the codec too).
    step, codec = c["buckets/step"][:], c["buckets/codec_s"][:]
    rank0 = c["ranks/encode_s"][:, 0] + c["ranks/decode_s"][:, 0]
    per_step = np.array([codec[step == s].sum() for s in range(int(c.attrs["steps"]))])
    check(np.allclose(per_step, rank0, rtol=1e-9, atol=0), f"codec_s per step {per_step} != rank 0's encode+decode {rank0}")
    check(np.all(codec[step >= 2] > 0), f"powersgd: every compressed bucket has codec time ({codec[step >= 2]})")
    # ... and every rank's rows split that rank's own.
    for k in range(int(c.attrs["nranks"])):
        mine = c["buckets/by_rank/codec_s"][:, k]
        own = c["ranks/encode_s"][:, k] + c["ranks/decode_s"][:, k]
        per_step = np.array([mine[step == s].sum() for s in range(int(c.attrs["steps"]))])
        check(np.allclose(per_step, own, rtol=1e-9, atol=0), f"rank {k}: codec_s per step {per_step} != its encode+decode {own}")
        ends = c["buckets/by_rank/end_s"][:, k]
        check(np.all(ends >= c["buckets/by_rank/start_s"][:, k]), f"rank {k}: a bucket ends before it starts")
    # --json summary.
    p = r.run(1, ["--model", "cnn", "--steps", "3", "--json", "--out", os.path.join(r.workdir, "j.h5")])
    j = json.loads(p.stdout)
    check(j["out"].endswith("j.h5") and j["steps"] == 3, f"--json summary {j}")


def half_of(f):
    return float(np.median(f["steps/bytes_sent"][:]))


def case_precision(r):
    # Default settings (batch 32, SGD, lr 0.05, seed 1), 3 epochs of 8192 samples on 2 ranks.
    common = ["--model", "mlp", "--epochs", "3"]
    runs = {p: r.train_file(2, f"mlp-{p}", common + ["--precision", p]) for p in ("fp32", "fp16", "bf16")}
    ref = runs["fp32"]
    acc32 = float(ref.attrs["final_eval_accuracy"])
    for p in ("fp16", "bf16"):
        f = runs[p]
        acc = float(f.attrs["final_eval_accuracy"])
        print(f"  mlp {p}: eval accuracy {acc:.4f} vs fp32 {acc32:.4f} ({100 * (acc - acc32):+.2f} points), "
              f"{int(f.attrs['skipped_steps'])} skipped step(s), bytes/step {half_of(f):.0f} vs {half_of(ref):.0f}")
        check(acc >= acc32 - 0.01, f"{p}: accuracy {acc:.4f} more than 1 point below fp32's {acc32:.4f}")
        check(f.attrs["precision"] == p, f"{p}: precision attribute {f.attrs['precision']!r}")
        check(f.attrs["compress"] == "none" and f.attrs["compress_effective"] == p,
              f"{p}: compress {f.attrs['compress']!r}, effective {f.attrs['compress_effective']!r}")
        check(np.array_equal(2 * f["steps/bytes_sent"][:], ref["steps/bytes_sent"][:]),
              f"{p}: bytes_sent is not exactly half of fp32's")
        check(f.attrs["compression_ratio"] == 2.0, f"{p}: compression_ratio {f.attrs['compression_ratio']}")
        check(np.all(f["steps/unscale_s"][:] > 0), f"{p}: no unscaling time recorded")
        check_scaler_sequence(f)
    fp16, bf16 = runs["fp16"], runs["bf16"]
    check(fp16.attrs["loss_scale_mode"] == "dynamic" and fp16["steps/loss_scale"][0] == 65536.0,
          "fp16: dynamic loss scaling from 65536 by default")
    check(fp16.attrs["loss_scale_spec"] == "dynamic:backoff=0.5,growth=2,init=65536,interval=2000",
          f"fp16 loss_scale_spec {fp16.attrs['loss_scale_spec']!r}")
    check(bf16.attrs["loss_scale_mode"] == "none" and np.all(bf16["steps/loss_scale"][:] == 1.0),
          "bf16: no loss scaling by default")
    # Emulated compute: the synthetic gradients travel in half too.
    common = ["--model", "resnet18-cifar", "--compute", "emulated", "--compute-profile", "cpu",
              "--batch-per-rank", "4", "--steps", "3", "--loader-workers", "0"]
    e32 = r.train_file(2, "emu-fp32", common)
    e16 = r.train_file(2, "emu-fp16", common + ["--precision", "fp16"])
    print(f"  emulated resnet18-cifar: bytes/step {half_of(e16):.0f} (fp16) vs {half_of(e32):.0f} (fp32)")
    check(np.array_equal(2 * e16["steps/bytes_sent"][:], e32["steps/bytes_sent"][:]), "emulated fp16 bytes_sent")
    check(e16.attrs["precision"] == "fp16" and e16.attrs["skipped_steps"] == 0, "emulated fp16 attributes")


def gradscaler(n, init, interval, infs, dynamic=True):
    """GradScaler's per-step scale and skip flags for n steps with inf/nan at steps `infs`."""
    scale, good, scales, skipped = init, 0, [], []
    for s in range(n):
        scales.append(scale)
        bad = s in infs
        skipped.append(int(bad))
        if dynamic:
            if bad:
                scale, good = scale * 0.5, 0
            elif good + 1 == interval:
                scale, good = scale * 2, 0
            else:
                good += 1
    return scales, skipped


def check_scaler_sequence(f):
    """The recorded scales follow from the recorded skips (dynamic GradScaler rules)."""
    sc, sk = f["steps/loss_scale"][:], f["steps/skipped"][:]
    check(int(np.sum(sk)) == int(f.attrs["skipped_steps"]), "skipped_steps != sum of /steps/skipped")
    if f.attrs["loss_scale_mode"] != "dynamic":
        check(np.all(sc == sc[0]), "a static loss scale changed")
        return
    m = re.search(r"interval=(\d+)", f.attrs["loss_scale_spec"])
    want, _ = gradscaler(len(sc), sc[0], int(m.group(1)), set(np.nonzero(sk)[0].tolist()))
    check(np.array_equal(sc, want), f"loss scales {sc.tolist()} do not follow GradScaler: {want}")


def case_loss_scale(r):
    def injected(name, steps, args, inject):
        env = dict(os.environ, GRADSYNC_TEST_INJECT_INF=",".join(map(str, inject)))
        out = os.path.join(r.workdir, name + ".h5")
        cmd = r.launcher + ["-np", "2", r.train, "--model", "mlp", "--steps", str(steps), "--quiet", "--out", out] + args
        p = subprocess.run(cmd, cwd=r.workdir, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)
        print(f"$ GRADSYNC_TEST_INJECT_INF={env['GRADSYNC_TEST_INJECT_INF']} {' '.join(cmd)}\n  -> exit {p.returncode}")
        check(p.returncode == 0, f"exit {p.returncode}\n{p.stderr}")
        return h5py.File(out, "r")

    def expect(f, scales, skipped):
        sc, sk = f["steps/loss_scale"][:].tolist(), f["steps/skipped"][:].tolist()
        print(f"  loss_scale {sc}\n  skipped    {sk}")
        check(sc == scales, f"loss scales {sc}, want {scales}")
        check(sk == skipped, f"skipped {sk}, want {skipped}")
        check(int(f.attrs["skipped_steps"]) == sum(skipped), f"skipped_steps {f.attrs['skipped_steps']}")
        check(math.isfinite(f.attrs["final_param_norm"]), "an inf reached the weights")

    # Default fp16 scaler: 65536, halved by each inf step, which is skipped.
    f = injected("dyn", 12, ["--precision", "fp16"], [2, 3, 7])
    expect(f, *gradscaler(12, 65536.0, 2000, {2, 3, 7}))
    check(f.attrs["compress_effective"] == "fp16", "fp16 cast expected")
    # Growth: x2 after `interval` consecutive good steps, the count restarting after an inf.
    f = injected("grow", 10, ["--precision", "fp16", "--loss-scale", "dynamic:init=1024,interval=3"], [4])
    expect(f, *gradscaler(10, 1024.0, 3, {4}))
    # Static scale with a compressor that encodes the unscaled view (rank 0's local check,
    # agreed by all ranks): the scale stays, the step is skipped.
    f = injected("static-topk", 6, ["--precision", "fp16", "--loss-scale", "static:1024", "--compress", "topk:ratio=0.1"],
                 [1])
    expect(f, [1024.0] * 6, [0, 1, 0, 0, 0, 0])
    check(f.attrs["loss_scale_mode"] == "static", "static mode")
    # bf16 without loss scaling still skips an inf step.
    f = injected("bf16", 4, ["--precision", "bf16"], [0])
    expect(f, [1.0] * 4, [1, 0, 0, 0])
    # A skipped step leaves the weights (and the optimizer state) as they were: 6 steps
    # with the last one skipped == 5 steps.
    for extra in ([], ["--compress", "topk:ratio=0.1"]):
        a = injected("skip6", 6, ["--precision", "fp16", "--loader-workers", "0"] + extra, [5])
        b = injected("skip5", 5, ["--precision", "fp16", "--loader-workers", "0"] + extra, [])
        na, nb = float(a.attrs["final_param_norm"]), float(b.attrs["final_param_norm"])
        print(f"  {extra or 'fp16 cast'}: final_param_norm with step 5 skipped {na!r}, after 5 steps {nb!r}")
        check(na == nb, f"a skipped step changed the weights: {na!r} != {nb!r}")


# Compressors against no compression: the issue's "within 1 percentage point" at default
# settings. Measured (this suite's machine, seeds 1-4, 3 epochs): every gap <= 0.5 points
# (largest: onebit, seed 2, -0.49); at seed 1 all are at or above "none" but topk (-0.10)
# and fp16 (-0.05). 3 epochs because the default 50 steps stop mid-training.
CONVERGENCE_COMPRESSORS = ["fp16", "bf16", "powersgd:rank=2", "qsgd:levels=16", "onebit", "topk:ratio=0.1"]


def case_device(r):
    refused = [
        (["--model", "mlp", "--backend", "nccl"], "--backend"),
        (["--model", "mlp", "--device", "gpu"], "--device"),
        (["--model", "mlp", "--backend", "gloo"], "--backend"),
        (["--model", "cnn", "--device", "cuda", "--compute", "real"], "--device cuda"),
    ]
    for args, text in refused:
        p = r.run(1, args, expect=2, direct=True)
        line = p.stderr.strip()
        check(line.startswith("gradsync-train: error:") and text in line, f"{args}: message {line!r}")
    cpu = r.train_file(1, "cpu", ["--model", "mlp", "--compute", "emulated", "--steps", "2"])
    check(cpu.attrs["device"] == "cpu" and cpu.attrs["backend"] == "mpi" and cpu.attrs["gpu_name"] == ""
          and int(cpu.attrs["gpu_memory_used_bytes"]) == -1, "cpu device attributes")
    emu = ["--model", "resnet18-cifar", "--device", "cuda", "--steps", "4"]
    # Every compressor is accepted on cuda (the same reducer; device/device.hpp): without a
    # GPU this run fails on the GPU check, not on the option.
    p = r.run(2, emu + ["--backend", "mpi", "--compress", "topk:ratio=0.1"], expect=None)
    if r.with_cuda == "OFF" or "built without CUDA support" in p.stderr:
        check(p.returncode == 2 and "built without CUDA support" in p.stderr, f"no-CUDA build: {p.stderr!r}")
        return
    if p.returncode != 0:
        lines = [ln for ln in p.stderr.splitlines() if ln.startswith("gradsync-train: error:")]
        check(p.returncode == 1, f"no GPU: expected exit 1, got {p.returncode}: {p.stderr!r}")
        check(len(lines) == 1 and lines[0].startswith("gradsync-train: error: no CUDA device found ("),
              f"no GPU: want one 'no CUDA device found' line, got {p.stderr!r}")
        check(not glob.glob(os.path.join(r.workdir, "results", "*.h5")), "a refused run left a result file")
        print("no CUDA device here: the GPU run was checked to refuse cleanly")
        return
    # A GPU is present: check the results of the GPU path.
    for np_, name, extra, backend in [(1, "nccl", [], "nccl"), (2, "staged", ["--backend", "mpi"], "mpi"),
                                      (1, "half", ["--precision", "fp16"], "nccl")]:
        f = r.train_file(np_, name, emu + ["--bucket-mb", "4"] + extra)
        check(f.attrs["device"] == "cuda" and f.attrs["backend"] == backend, f"{name}: device/backend")
        check(len(f.attrs["gpu_name"]) > 0 and int(f.attrs["gpu_memory_used_bytes"]) > 0, f"{name}: gpu attributes")
        b = f["buckets"]
        nb = int(f.attrs["num_buckets"])
        check(b["ready_s"].shape == (4 * nb,), f"{name}: bucket rows")
        check(np.all(b["ready_s"][:] <= b["start_s"][:] + 1e-9) and np.all(b["start_s"][:] <= b["end_s"][:]),
              f"{name}: bucket timeline out of order")
        check(np.isfinite(f.attrs["final_param_norm"]) and f.attrs["final_param_norm"] > 0, f"{name}: param norm")
        if "--precision" in extra:
            check(f.attrs["compress_effective"] == "fp16" and f.attrs["compression_ratio"] == 2.0, "fp16 wire")
    # Real compute (mlp, cuBLAS): the same run as on the CPU to rounding, and it learns.
    same = ["--model", "mlp", "--steps", "20", "--batch-per-rank", "64", "--samples-per-epoch", "4096"]
    c, g = r.train_file(1, "mlp-cpu", same), r.train_file(1, "mlp-gpu", same + ["--device", "cuda"])
    check(rel(c.attrs["final_param_norm"], g.attrs["final_param_norm"]) < 1e-3,
          f"mlp cpu vs cuda: param norm {c.attrs['final_param_norm']} vs {g.attrs['final_param_norm']}")
    check(np.allclose(c["steps/loss"][:], g["steps/loss"][:], rtol=1e-3), "mlp cpu vs cuda: losses")
    learn = ["--model", "mlp", "--device", "cuda", "--epochs", "2", "--samples-per-epoch", "4096", "--batch-per-rank", "64"]
    accs = {}
    for prec in ["fp32", "fp16", "bf16"]:
        f = r.train_file(1, "learn-" + prec, learn + ["--precision", prec])
        accs[prec] = float(f.attrs["final_eval_accuracy"])
        check(np.all(np.isfinite(f["steps/loss"][:])), f"mlp {prec} on cuda: loss not finite")
    check(accs["fp32"] >= 0.85, f"mlp on cuda: eval accuracy {accs['fp32']:.3f} < 0.85")
    check(all(a >= accs["fp32"] - 0.02 for a in accs.values()), f"mlp half precision on cuda: {accs}")
    # Every compressor on device gradients (staged or in place) against the host path, same
    # run (real mlp, 1 and 2 ranks): the gradients agree to rounding, so do the losses.
    for comp in ["none", "fp16", "bf16", "powersgd:rank=2", "qsgd:levels=16", "onebit", "topk:ratio=0.1"]:
        for np_, backend in [(1, "nccl"), (2, "mpi")]:
            args = same + ["--compress", comp]
            tag = re.sub(r"[^a-z0-9]", "_", comp) + f"-{np_}"
            c = r.train_file(np_, "cmp-cpu-" + tag, args)
            g = r.train_file(np_, "cmp-gpu-" + tag, args + ["--device", "cuda", "--backend", backend])
            check(g.attrs["compress_effective"] == c.attrs["compress_effective"], f"{comp}: compressor on cuda")
            check(np.allclose(c["steps/loss"][:], g["steps/loss"][:], rtol=1e-2, atol=1e-4),
                  f"{comp} np {np_}: cpu vs cuda losses {c['steps/loss'][:]} vs {g['steps/loss'][:]}")
            check(np.allclose(c["steps/bytes_sent"][:], g["steps/bytes_sent"][:]), f"{comp}: wire bytes cpu vs cuda")


def case_convergence(r):
    common = ["--model", "mlp", "--epochs", "3"]
    ref = r.train_file(2, "none", common)
    acc0 = float(ref.attrs["final_eval_accuracy"])
    print(f"  none: eval accuracy {acc0:.4f}")
    failed = []
    for c in CONVERGENCE_COMPRESSORS:
        f = r.train_file(2, re.sub(r"[^a-z0-9]", "_", c), common + ["--compress", c])
        acc = float(f.attrs["final_eval_accuracy"])
        print(f"  {c}: eval accuracy {acc:.4f} ({100 * (acc - acc0):+.2f} points), "
              f"compression ratio {f.attrs['compression_ratio']:.2f}")
        if acc < acc0 - 0.01:
            failed.append(f"{c}: {acc:.4f} vs {acc0:.4f}")
    check(not failed, "more than 1 point below uncompressed: " + "; ".join(failed))


CASES = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--with-cuda", default="", help="ON or OFF: whether the build has CUDA (case device)")
    ap.add_argument("launcher", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    launcher = [x for x in a.launcher if x != "--"] or ["mpiexec"]
    with tempfile.TemporaryDirectory(prefix="gs-train-e2e-") as d:
        try:
            CASES[a.case](Runner(os.path.abspath(a.train), launcher, d, a.with_cuda.upper()))
        except Failure as e:
            print(f"FAIL: {e}")
            return 1
        except subprocess.TimeoutExpired as e:
            print(f"FAIL: timed out: {e}")
            return 1
    print(f"PASS: {a.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
