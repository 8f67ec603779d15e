// gradsync/netmodel/train_file.cpp — reading gradsync-train result files.
#include "netmodel/train_file.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/error.hpp"
#include "core/h5io.hpp"

namespace gradsync::netmodel {

double median(std::vector<double> v) { return percentile(std::move(v), 0.5); }

double TrainRun::machine_cpu_busy() const {
  if (machine_ranks <= 0 || machine_cores <= 0 || !std::isfinite(cpu_s) || !(step_time_s > 0))
    return std::numeric_limits<double>::quiet_NaN();
  return machine_ranks * cpu_s / (machine_cores * step_time_s);
}

bool TrainRun::machine_saturated() const {
  return machine_ranks > machine_cores && machine_cpu_busy() >= kSaturatedCpu;  // false for NaN
}

std::pair<double, double> split_backward(double all, double sync, int acc) {
  acc = std::max(1, acc);
  if (acc > 1 && std::isfinite(sync) && sync >= 0 && sync <= all) return {sync, (all - sync) / (acc - 1)};
  return {all / acc, all / acc};
}

double percentile(std::vector<double> v, double q) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

namespace {

// /ranks/<column> [steps, nranks] into the rows (which start at step `skip`); a file without
// the group's timing columns leaves the rank vectors empty (the replay then uses the /steps
// means), one without step_time_s the spread NaN; one of another shape is refused, naming it.
void read_rank_columns(const h5::Reader& r, const std::string& path, int nranks, std::size_t skip,
                       std::vector<TrainStepRow>& rows) {
  bool timing = true;
  for (const char* n : {"data_s", "forward_s", "backward_s", "optimizer_s"})
    timing = timing && r.exists(std::string("/ranks/") + n);
  if (!timing && !r.exists("/ranks/step_time_s")) return;
  const auto p = static_cast<std::size_t>(nranks);
  // Raw values, NaN kept (encode_s/decode_s: "not measured"); the timing columns count a NaN
  // as 0 below (e.g. data_s of a run that times none).
  auto read = [&](const char* n) {
    const std::string ds = std::string("/ranks/") + n;
    if (!r.exists(ds)) return std::vector<double>();
    const auto dims = r.dims(ds);
    GS_USAGE_CHECK(dims.size() == 2 && dims[1] == p && dims[0] >= skip + rows.size(), path, ": ", ds,
                   " is not [steps, nranks] = [", skip + rows.size(), ", ", nranks, "]");
    return r.read_double(ds);
  };
  const auto step = read("step_time_s");
  // The timing columns only as a group (one missing: none of them is used).
  auto timed = [&](const char* n) { return timing ? read(n) : std::vector<double>(); };
  const auto data = timed("data_s"), fwd = timed("forward_s"), bwd = timed("backward_s"), opt = timed("optimizer_s"),
             red = timed("reducer_s"), enc = timed("encode_s"), dec = timed("decode_s"),
             bsync = timed("backward_sync_s");
  auto at = [&](const std::vector<double>& v, std::size_t step, std::size_t rank) {
    const double x = v.empty() ? 0.0 : v[step * p + rank];
    return std::isnan(x) ? 0.0 : x;
  };
  auto slowest = [&](const std::vector<double>& v, std::size_t step) {
    double m = std::numeric_limits<double>::quiet_NaN();
    if (v.empty()) return m;
    for (std::size_t k = 0; k < p; ++k) {
      if (std::isnan(v[step * p + k])) return std::numeric_limits<double>::quiet_NaN();
      m = k == 0 ? v[step * p] : std::max(m, v[step * p + k]);
    }
    return m;
  };
  auto post = [&](std::size_t step, std::size_t rank) { return at(opt, step, rank) + at(red, step, rank); };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::size_t s = skip + i;
    auto& row = rows[i];
    if (timing) {
      for (std::size_t k = 0; k < p; ++k) {
        row.rank_pre_s.push_back(at(data, s, k) + at(fwd, s, k) + at(bwd, s, k));
        row.rank_backward_s.push_back(at(bwd, s, k));
        if (!bsync.empty()) row.rank_backward_sync_s.push_back(bsync[s * p + k]);
        row.rank_post_s.push_back(post(s, k));
        row.rank_prev_post_s.push_back(s > 0 ? post(s - 1, k) : 0.0);
      }
      row.rank_max_encode_s = slowest(enc, s);
      row.rank_max_decode_s = slowest(dec, s);
    }
    if (p >= 2 && !step.empty()) {
      double sum = 0;
      for (std::size_t k = 0; k < p; ++k) sum += step[s * p + k];
      row.rank_spread_s = slowest(step, s) - sum / static_cast<double>(p);
    }
  }
}

}  // namespace

double recorded_chunk_bytes(const h5::Reader& r) {
  for (const char* name : {"chunk_bytes_used", "chunk_bytes"}) {
    const double v = r.has_attr("/", name) ? r.attr_double("/", name) : 0.0;
    if (v > 0) return v;
  }
  return 0.0;
}

bool recorded_shared_buffers(const h5::Reader& r) {
  return r.has_attr("/", "buffers") && r.attr_string("/", "buffers") == "shared";
}

TrainRun read_train_file(const std::string& path) {
  h5::Reader r(path);
  TrainRun run;
  run.path = path;
  const std::string program = r.has_attr("/", "program") ? r.attr_string("/", "program") : "";
  GS_USAGE_CHECK(program == "gradsync-train", path, ": not a gradsync-train file (program = '", program, "')");
  GS_USAGE_CHECK(r.exists("/steps/step_time_s"), path, ": has no /steps/step_time_s");
  auto str = [&](const char* name, std::string& out) {
    if (r.has_attr("/", name)) out = r.attr_string("/", name);
    else run.missing.push_back(name);
  };
  auto num = [&](const char* name, auto& out) {
    if (r.has_attr("/", name)) out = static_cast<std::remove_reference_t<decltype(out)>>(r.attr_double("/", name));
    else run.missing.push_back(name);
  };
  PredictConfig& c = run.config;
  str("model", c.model);
  str("compute", run.compute);
  str("compute_profile", c.compute_profile);
  str("device", run.device);
  num("nnodes", c.nodes);
  num("ranks_per_node", c.ranks_per_node);
  int nranks = c.nodes * c.ranks_per_node;
  num("nranks", nranks);
  GS_USAGE_CHECK(nranks == c.nodes * c.ranks_per_node, path, ": nranks (", nranks, ") != nnodes x ranks_per_node (",
                 c.nodes, " x ", c.ranks_per_node, ")");
  num("batch_per_rank", c.batch_per_rank);
  num("bucket_mb", c.bucket_mb);
  num("first_bucket_mb", c.first_bucket_mb);
  int overlap = 1;
  num("overlap", overlap);
  c.overlap = overlap != 0;
  num("accumulate", c.accumulate);
  str("algo", c.algo);
  num("chunk_bytes", c.chunk_bytes);
  // Priced in the chunk the all-reduce ran with, as a bench file's points are: chunk_bytes
  // alone is 0 for the transport-aware default (one unpipelined message per step).
  c.chunk_bytes = recorded_chunk_bytes(r);
  num("channels", c.channels);
  c.registered_buckets = recorded_shared_buffers(r);
  str("compress", c.compress);
  str("precision", c.precision);
  num("loader_workers", c.loader_workers);
  num("data_time_s", c.data_time_s);
  str("optimizer", c.optimizer);
  num("samples_per_epoch", c.samples_per_epoch);
  num("warmup_steps", run.warmup_steps);
  if (r.has_attr("/", "compute_threads")) c.compute_threads = r.attr_double("/", "compute_threads");
  // The PyTorch recorder's files: DDP runs a hook's codec on the autograd thread.
  c.codec_beside_compute = !(r.has_attr("/", "source") && r.attr_string("/", "source") == "pytorch");
  // The PyTorch bridge's --comm-sched: gloo's threads under a real-time policy ("rr:1 (...)").
  if (r.has_attr("/", "comm_sched")) {
    const std::string s = r.attr_string("/", "comm_sched");
    c.comm_preempts = s.rfind("rr", 0) == 0 || s.rfind("fifo", 0) == 0;
  }
  if (r.has_attr("/", "cores_per_node")) run.cores_per_node = static_cast<int>(r.attr_double("/", "cores_per_node"));
  if (r.has_attr("/", "machine_ranks") && r.has_attr("/", "machine_cores")) {
    run.machine_ranks = std::max(0, static_cast<int>(r.attr_double("/", "machine_ranks")));
    run.machine_cores = std::max(0, static_cast<int>(r.attr_double("/", "machine_cores")));
    // What the model prices the codecs' CPU share by (timeline.hpp codec_cpu_share).
    c.machine_ranks = run.machine_ranks;
    c.machine_cores = run.machine_cores;
  }
  if (c.accumulate < 1) c.accumulate = 1;
  // PowerSGD runs plain all-reduces before step `start` (the hook's start_powerSGD_iter);
  // the model predicts the compressed steady state, so those steps are left out too when
  // the run has steps after them.
  if (c.compress.rfind("powersgd", 0) == 0) {
    const auto pos = c.compress.find("start=");
    if (pos != std::string::npos) run.compress_start = std::stoll(c.compress.substr(pos + 6));
  }
  if (c.channels < 1) c.channels = 1;

  const auto step_time = r.read_double("/steps/step_time_s");
  run.steps_total = static_cast<int64_t>(step_time.size());
  int64_t first = run.warmup_steps;
  if (run.compress_start > first && run.compress_start < run.steps_total) first = run.compress_start;
  const auto skip = static_cast<std::size_t>(std::clamp<int64_t>(first, 0, static_cast<int64_t>(step_time.size())));
  GS_USAGE_CHECK(skip < step_time.size(), path, ": all ", step_time.size(), " steps are warmup (warmup_steps = ",
                 run.warmup_steps, ")");
  run.steps_used = static_cast<int64_t>(step_time.size() - skip);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  run.rows.resize(step_time.size() - skip);
  auto col = [&](const char* name, double TrainStepRow::*field = nullptr) {
    const std::string ds = std::string("/steps/") + name;
    if (!r.exists(ds)) {
      if (field)
        for (auto& row : run.rows) row.*field = nan;
      return nan;
    }
    const auto v = r.read_double(ds);
    if (field)
      for (std::size_t i = 0; i < run.rows.size(); ++i) run.rows[i].*field = skip + i < v.size() ? v[skip + i] : nan;
    return median(std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(std::min(skip, v.size())), v.end()));
  };
  run.step_time_s = col("step_time_s", &TrainStepRow::step_time_s);
  run.data_s = col("data_s", &TrainStepRow::data_s);
  run.forward_s = col("forward_s", &TrainStepRow::forward_s);
  run.backward_s = col("backward_s", &TrainStepRow::backward_s);
  run.backward_sync_s = col("backward_sync_s", &TrainStepRow::backward_sync_s);
  run.comm_exposed_s = col("comm_exposed_s");
  run.optimizer_s = col("optimizer_s", &TrainStepRow::optimizer_s);
  run.reducer_s = col("reducer_s", &TrainStepRow::reducer_s);
  run.comm_total_s = col("comm_total_s");
  run.encode_s = col("encode_s", &TrainStepRow::encode_s);
  run.decode_s = col("decode_s", &TrainStepRow::decode_s);
  run.cpu_s = col("cpu_s");
  read_rank_columns(r, path, nranks, skip, run.rows);
  {
    std::vector<double> spread;  // steps where every rank's time was recorded
    for (const auto& row : run.rows)
      if (!std::isnan(row.rank_spread_s)) spread.push_back(row.rank_spread_s);
    run.rank_spread_s = median(spread);
  }
  run.bytes_sent = col("bytes_sent");
  run.epoch_time_s = r.exists("/epochs/epoch_time_s") ? median(r.read_double("/epochs/epoch_time_s"))
                                                      : std::numeric_limits<double>::quiet_NaN();

  if (r.exists("/buckets/bucket") && r.exists("/buckets/step")) {
    const auto step = r.read_int("/buckets/step");
    const auto bucket = r.read_int("/buckets/bucket");
    const auto steps = r.read_int("/steps/step");
    const int64_t first_step = skip < steps.size() ? steps[skip] : 0;
    std::map<int64_t, std::vector<double>> bytes, ready, start, end, codec;
    const auto b = r.read_double("/buckets/bytes");
    const auto rd = r.read_double("/buckets/ready_s");
    const auto st = r.read_double("/buckets/start_s");
    const auto en = r.read_double("/buckets/end_s");
    const bool has_codec = r.exists("/buckets/codec_s");
    const auto cd = has_codec ? r.read_double("/buckets/codec_s") : std::vector<double>(bucket.size(), nan);
    GS_USAGE_CHECK(cd.size() == bucket.size(), path, ": /buckets/codec_s has ", cd.size(), " rows, /buckets/bucket ",
                   bucket.size());
    for (std::size_t i = 0; i < bucket.size(); ++i) {
      if (step[i] < first_step) continue;
      bytes[bucket[i]].push_back(b[i]);
      codec[bucket[i]].push_back(cd[i]);
      ready[bucket[i]].push_back(rd[i]);
      start[bucket[i]].push_back(st[i]);
      end[bucket[i]].push_back(en[i]);
    }
    // Row by row: rank 0's ready time of each bucket index, per step after warmup.
    std::map<int64_t, std::size_t> index;
    for (const auto& [k, v] : bytes) index.emplace(k, index.size());
    for (auto& row : run.rows) {
      row.bucket_ready_s.assign(index.size(), nan);
      row.codec_s = has_codec ? 0.0 : nan;
    }
    for (std::size_t i = 0; i < bucket.size(); ++i) {
      const int64_t row = step[i] - first_step;
      if (step[i] < first_step || row >= static_cast<int64_t>(run.rows.size())) continue;
      auto& to = run.rows[static_cast<std::size_t>(row)];
      to.bucket_ready_s[index[bucket[i]]] = rd[i];
      to.codec_s += cd[i];  // a NaN bucket makes the step's NaN
    }
    // Every rank's codec per bucket row: the ranks' median, and the slowest's excess over it.
    std::map<int64_t, std::vector<double>> mid, wait;
    if (r.exists("/buckets/by_rank/codec_s")) {
      const auto dims = r.dims("/buckets/by_rank/codec_s");
      GS_USAGE_CHECK(dims.size() == 2 && dims[0] == bucket.size(), path, ": /buckets/by_rank/codec_s is not [",
                     bucket.size(), " rows, ranks]");
      const std::size_t p = static_cast<std::size_t>(dims[1]);
      const auto all = r.read_double("/buckets/by_rank/codec_s");
      for (std::size_t i = 0; p >= 2 && i < bucket.size(); ++i) {
        if (step[i] < first_step) continue;
        std::vector<double> c(all.begin() + static_cast<std::ptrdiff_t>(i * p),
                              all.begin() + static_cast<std::ptrdiff_t>((i + 1) * p));
        const double m = median(c);
        mid[bucket[i]].push_back(m);
        wait[bucket[i]].push_back(*std::max_element(c.begin(), c.end()) - m);
      }
    }
    for (auto& [k, v] : bytes) {
      if (!mid.empty()) {
        run.bucket_codec_mid_s.push_back(median(mid[k]));
        run.bucket_codec_wait_s.push_back(median(wait[k]));
      }
      run.bucket_bytes.push_back(median(v));
      run.bucket_ready_s.push_back(median(ready[k]));
      run.bucket_start_s.push_back(median(start[k]));
      run.bucket_end_s.push_back(median(end[k]));
      std::vector<double> d(end[k].size());
      for (std::size_t i = 0; i < d.size(); ++i) d[i] = end[k][i] - start[k][i];
      run.bucket_comm_s.push_back(median(d));
      // NaN rows (a step the recorder could not attribute) make the bucket's median NaN.
      const auto& c = codec[k];
      run.bucket_codec_s.push_back(std::any_of(c.begin(), c.end(), [](double x) { return std::isnan(x); }) ? nan : median(c));
    }
  }
  if (r.exists("/model/tensor_numel") && r.exists("/model/tensor_ndim") && r.exists("/model/tensor_shape")) {
    const auto numel = r.read_int("/model/tensor_numel");
    const auto ndim = r.read_int("/model/tensor_ndim");
    const auto shape = r.read_int("/model/tensor_shape");
    const auto names = r.exists("/model/tensor_names") ? r.read_strings("/model/tensor_names") : std::vector<std::string>{};
    const auto bucket = r.exists("/model/tensor_bucket") ? r.read_int("/model/tensor_bucket") : std::vector<int64_t>{};
    const auto ready = r.exists("/model/tensor_ready_s") ? r.read_double("/model/tensor_ready_s") : std::vector<double>{};
    GS_USAGE_CHECK(ready.empty() || ready.size() == numel.size(), path, ": /model/tensor_ready_s has ", ready.size(),
                   " entries, /model/tensor_numel ", numel.size());
    GS_USAGE_CHECK(ndim.size() == numel.size(), path, ": /model/tensor_ndim has ", ndim.size(),
                   " entries, /model/tensor_numel ", numel.size());
    std::size_t pos = 0;
    for (std::size_t i = 0; i < numel.size(); ++i) {
      TrainTensor t;
      t.name = i < names.size() ? names[i] : "";
      t.numel = numel[i];
      t.bucket = i < bucket.size() ? bucket[i] : -1;
      if (i < ready.size()) t.ready_s = ready[i];
      GS_USAGE_CHECK(ndim[i] >= 0 && pos + static_cast<std::size_t>(ndim[i]) <= shape.size(), path,
                     ": /model/tensor_shape is too short for /model/tensor_ndim");
      int64_t prod = 1;
      for (int64_t d = 0; d < ndim[i]; ++d) {
        t.shape.push_back(shape[pos]);
        prod *= shape[pos++];
      }
      GS_USAGE_CHECK(prod == t.numel, path, ": /model tensor ", i, " (", t.name, ") has numel ", t.numel,
                     " but its shape holds ", prod);
      run.tensors.push_back(std::move(t));
    }
    GS_USAGE_CHECK(pos == shape.size(), path, ": /model/tensor_shape has ", shape.size(), " entries, tensor_ndim sums to ",
                   pos);
  }
  return run;
}

}  // namespace gradsync::netmodel
