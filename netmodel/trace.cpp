// gradsync/netmodel/trace.cpp — Chrome trace-event JSON of compared runs (trace.hpp).
#include "netmodel/trace.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <tuple>

#include <unistd.h>

#include "core/error.hpp"

namespace gradsync::netmodel {

namespace {

double finite(double v) { return std::isfinite(v) ? v : 0.0; }

// Seconds -> trace microseconds, rounded to nanoseconds (keeps the file short).
double us(double s) { return std::round(s * 1e9) / 1e3; }

Json complete(const std::string& name, const char* cat, int pid, int tid, double t0, double t1, Json args) {
  Json e = Json::object();
  e.set("name", name).set("cat", cat).set("ph", "X").set("pid", pid).set("tid", tid);
  e.set("ts", us(t0)).set("dur", us(std::max(0.0, t1 - t0))).set("args", std::move(args));
  return e;
}

Json meta(int pid, int tid, const char* what, const std::string& name) {
  Json a = Json::object();
  a.set("name", name);
  Json e = Json::object();
  e.set("name", what).set("ph", "M").set("pid", pid).set("tid", tid).set("args", std::move(a));
  return e;
}

// The compute thread of one step: data wait, forward, backward from the step start, the
// optimizer ending the step, and (predicted, with a fitted rank jitter) the wait for the
// slowest rank before it. With k micro-steps (gradient accumulation) each has its share of
// the data wait and forward; the k - 1 earlier ones (args micro_step 0..k-2, as the
// recorder's trace) split backward less the synchronized last one's `sync` (split_backward,
// as the replay does).
void compute_events(Json& ev, int pid, double base, double data, double fwd, double bwd, double opt, double step,
                    double straggler, int k, double sync) {
  k = std::max(1, k);
  double nosync = 0;
  std::tie(sync, nosync) = split_backward(bwd, sync, k);
  double t = base;
  for (int i = 0; i < k; ++i) {
    Json a = Json::object();
    if (i < k - 1) a.set("micro_step", i);
    const double b = i < k - 1 ? nosync : sync;
    ev.push(complete("data wait", "data", pid, 0, t, t + data / k, a));
    ev.push(complete("forward", "compute", pid, 0, t + data / k, t + data / k + fwd / k, a));
    ev.push(complete("backward", "compute", pid, 0, t + data / k + fwd / k, t + data / k + fwd / k + b, a));
    t += data / k + fwd / k + b;
  }
  Json none = Json::object();
  if (straggler > 0)
    ev.push(complete("wait for the slowest rank", "sync", pid, 0, base + step - opt - straggler, base + step - opt, none));
  ev.push(complete("optimizer", "compute", pid, 0, base + step - opt, base + step, none));
}

}  // namespace

Json compare_trace(const CompareReport& r) {
  Json ev = Json::array();
  double longest = 0;
  for (const auto& row : r.rows) longest = std::max({longest, finite(row.run.step_time_s), row.predicted.step_time_s});
  const double gap = 0.1 * longest;
  double base = 0;
  int pid = 0;
  for (const auto& row : r.rows) {
    const TrainRun& m = row.run;
    const StepResult& p = row.predicted;
    const int mp = pid++, pp = pid++;
    ev.push(meta(mp, 0, "process_name", "measured: " + m.path));
    ev.push(meta(pp, 0, "process_name", "predicted: " + m.path + " (fabric " + r.fabric + ")"));
    for (int q : {mp, pp}) {
      ev.push(meta(q, 0, "thread_name", "rank 0 compute"));
      ev.push(meta(q, 1, "thread_name", "rank 0 comm"));
    }
    compute_events(ev, mp, base, finite(m.data_s), finite(m.forward_s), finite(m.backward_s), finite(m.optimizer_s),
                   finite(m.step_time_s), 0.0, m.config.accumulate, m.backward_sync_s);
    for (std::size_t b = 0; b < m.bucket_start_s.size(); ++b) {
      Json a = Json::object();
      a.set("bucket", static_cast<long long>(b)).set("bytes", finite(m.bucket_bytes[b]));
      a.set("ready_ms", finite(m.bucket_ready_s[b]) * 1e3);
      // As the predicted side draws it: the bucket's measured codec time first, then the rest.
      const double start = finite(m.bucket_start_s[b]), end = finite(m.bucket_end_s[b]);
      const double codec = b < m.bucket_codec_s.size() ? finite(m.bucket_codec_s[b]) : 0.0;
      const double codec_end = std::min(end, start + codec);
      if (codec > 0) {
        a.set("codec_ms", codec * 1e3);
        ev.push(complete("codec bucket " + std::to_string(b), "codec", mp, 1, base + start, base + codec_end, a));
      }
      ev.push(complete("all-reduce bucket " + std::to_string(b), "comm", mp, 1, base + codec_end, base + end, std::move(a)));
    }
    compute_events(ev, pp, base, p.data_s, p.forward_s, p.backward_s, p.optimizer_s, p.step_time_s, p.straggler_s,
                   m.config.accumulate, p.backward_sync_s);  // compare predicts each run at its own accumulate
    for (std::size_t b = 0; b < p.buckets.size(); ++b) {
      const BucketTiming& t = p.buckets[b];
      Json a = Json::object();
      a.set("bucket", static_cast<long long>(b)).set("bytes", static_cast<long long>(t.grad_bytes));
      a.set("wire_bytes", t.wire_bytes).set("ready_ms", t.ready_s * 1e3);
      a.set("comm_ms", t.comm_s * 1e3).set("codec_ms", t.codec_s * 1e3);
      const double codec_end = std::min(t.end_s, t.start_s + t.codec_s);
      if (t.codec_s > 0)
        ev.push(complete("codec bucket " + std::to_string(b), "codec", pp, 1, base + t.start_s, base + codec_end, a));
      ev.push(complete("all-reduce bucket " + std::to_string(b), "comm", pp, 1, base + codec_end, base + t.end_s,
                       std::move(a)));
    }
    base += std::max(finite(m.step_time_s), p.step_time_s) + gap;
  }
  Json out = Json::object();
  out.set("traceEvents", std::move(ev)).set("displayTimeUnit", "ms");
  return out;
}

void write_compare_trace(const CompareReport& r, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp);
    GS_USAGE_CHECK(f.good(), "option --trace: cannot write ", path);
    f << compare_trace(r).dump() << "\n";
    GS_CHECK(f.good(), "option --trace: writing ", tmp, " failed");
  }
  fs::rename(tmp, path);
}

}  // namespace gradsync::netmodel
