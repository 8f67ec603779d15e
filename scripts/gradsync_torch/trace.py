"""gradsync_torch.trace — a recorded run as Chrome trace-event JSON (Perfetto, chrome://tracing).

Format: the JSON object form {"traceEvents": [...], "displayTimeUnit": "ms"} of the Trace
Event Format: complete events ("ph": "X", "ts"/"dur" in microseconds, "pid", "tid", "name",
"cat", "args") plus metadata events ("ph": "M") naming processes and threads.
Layout, the same as `gradsync-model compare --trace` (netmodel/trace.cpp): process 0
"measured" (process 1 is "predicted" there); per rank r two threads: tid 2r "rank r
compute" (data, forward, backward, optimizer) and tid 2r+1 "rank r comm": per bucket, its
hook's collectives as "all-reduce bucket k" and the rest of its time (hook call -> future
completion) as "codec bucket k" where the recorder attributed them (recorder.py, codec_s),
else one "all-reduce bucket k" event for the whole bucket. Time 0 is rank 0's first recorded
step. The ranks' clocks are lined up by their all-reduces: a bucket's all-reduce completes
at (nearly) the same moment on every rank, so each rank is shifted by the median, over the
buckets both recorded, of rank 0's end minus its own (ranks on different hosts have
unsynchronised clocks; on one host this also takes out when each rank called record()).
A rank that shares no completed bucket with rank 0 starts at its own first step.
"""
import math
import statistics


def _x(name, cat, pid, tid, t0, t1, args=None):
    return {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": round(t0 * 1e6, 3),
            "dur": round(max(0.0, t1 - t0) * 1e6, 3), "args": args or {}}


def _meta(pid, tid, what, name):
    return {"name": what, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def _bucket_ends(rows):
    """{(step, bucket): absolute end time} of the completed buckets of one rank's rows."""
    return {(step, b[0]): r["abs"][0] + b[4] for step, r in enumerate(rows) for b in r["buckets"]
            if math.isfinite(b[4])}


def rank_bases(gathered):
    """Per rank, the time on its own clock that is time 0 of the trace (see the docstring)."""
    if not gathered:
        return []
    first = [g["rows"][0]["abs"][0] if g["rows"] else 0.0 for g in gathered]
    ref = _bucket_ends(gathered[0]["rows"])
    bases = [first[0]]
    for g, own_first in zip(gathered[1:], first[1:]):
        ends = _bucket_ends(g["rows"])
        diffs = [ref[k] - t for k, t in ends.items() if k in ref]
        bases.append(first[0] - statistics.median(diffs) if diffs else own_first)
    return bases


def measured_trace(gathered, pid=0):
    """gathered: the per-rank {"rows": [...]} dicts Recorder.close() collects."""
    ev = [_meta(pid, 0, "process_name", "measured")]
    for rank, (g, base) in enumerate(zip(gathered, rank_bases(gathered))):
        rows = g["rows"]
        if not rows:
            continue
        ev.append(_meta(pid, 2 * rank, "thread_name", f"rank {rank} compute"))
        ev.append(_meta(pid, 2 * rank + 1, "thread_name", f"rank {rank} comm"))
        for step, r in enumerate(rows):
            start, fwd, bwd, bwd_end, opt, end = [t - base for t in r["abs"]]
            a = {"step": step}
            # Gradient accumulation: the micro-steps under no_sync() before the synchronized one.
            for i, (mf, mb, me) in enumerate(r.get("micro_spans", [])):
                m = {"step": step, "micro_step": i}
                ev.append(_x("data wait", "data", pid, 2 * rank, start, mf - base, m))
                ev.append(_x("forward", "compute", pid, 2 * rank, mf - base, mb - base, m))
                if me > mb:  # (a forward without a backward has none)
                    ev.append(_x("backward", "compute", pid, 2 * rank, mb - base, me - base, m))
                start = me - base
            ev.append(_x("data wait", "data", pid, 2 * rank, start, fwd, a))
            ev.append(_x("forward", "compute", pid, 2 * rank, fwd, bwd, a))
            ev.append(_x("backward", "compute", pid, 2 * rank, bwd, bwd_end, a))
            ev.append(_x("optimizer", "compute", pid, 2 * rank, opt, end, a))
            for b in r["buckets"]:
                idx, nbytes, ready, s, e = b[:5]
                a = {"step": step, "bucket": idx, "bytes": nbytes, "ready_ms": round(ready * 1e3, 4)}
                spans = b[6]  # empty where the recorder has no codec_s (recorder._bucket_codec)
                if not spans:
                    ev.append(_x(f"all-reduce bucket {idx}", "comm", pid, 2 * rank + 1, start + s, start + e, a))
                    continue
                a["codec_ms"] = round(b[5] * 1e3, 4)
                reach = b[7]  # the hook call
                for i, (t, te) in enumerate(spans):
                    if t > reach:
                        ev.append(_x(f"codec bucket {idx}", "codec", pid, 2 * rank + 1, start + reach, start + t, a))
                    ev.append(_x(f"all-reduce bucket {idx}", "comm", pid, 2 * rank + 1, start + max(t, reach),
                                 start + te, dict(a, collective=i)))
                    reach = max(reach, te)
                if e > reach:
                    ev.append(_x(f"codec bucket {idx}", "codec", pid, 2 * rank + 1, start + reach, start + e, a))
    return {"traceEvents": ev, "displayTimeUnit": "ms"}
