// gradsync/netmodel/replay.cpp — a recorded run's steps replayed through the model (replay.hpp).
#include "netmodel/replay.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "core/error.hpp"
#include "models/compute_profile.hpp"
#include "plan/precision.hpp"

namespace gradsync::netmodel {

namespace {

struct MeasuredStep {
  // data_s: the step's; forward_s: one micro-step's (the file's column is the sum over
  // `accumulate` of them); backward_s: the synchronized micro-step's, backward_nosync_s each
  // earlier one's (split by /steps/backward_sync_s where recorded, else a K-th of the sum
  // each); bwd_start_s: the synchronized backward's start.
  double data_s = 0, forward_s = 0, backward_s = 0, backward_nosync_s = 0, bwd_start_s = 0, optimizer_s = 0,
         reducer_s = 0;
  double data_row_s = 0;  // the row's data_s column alone (data_s may also hold a rank's lead-in)
  double encode_s = 0, decode_s = 0;  // measured codec time (NaN: not measured)
  double codec_s = 0;  // rank 0's buckets' codec time (/buckets/codec_s; NaN: not measured)
  std::vector<double> ready_s;  // per bucket, relative to the step start (NaN: take the end of backward)
};

double or0(double v) { return std::isnan(v) ? 0.0 : v; }

// The workload of one recorded row (see above).
MeasuredStep measured_step(const TrainStepRow& row, const TrainRun& run) {
  const int acc = std::max(1, run.config.accumulate);
  MeasuredStep m;
  double fwd_all = or0(row.forward_s);
  m.optimizer_s = or0(row.optimizer_s);
  m.encode_s = row.encode_s;
  m.decode_s = row.decode_s;
  m.codec_s = row.codec_s;
  m.ready_s = row.bucket_ready_s;
  m.data_row_s = or0(row.data_s);
  const double bwd_all = or0(row.backward_s);
  if (row.rank_pre_s.empty()) {
    m.data_s = or0(row.data_s);
    std::tie(m.backward_s, m.backward_nosync_s) = split_backward(bwd_all, row.backward_sync_s, acc);
    m.reducer_s = or0(row.reducer_s);
    m.bwd_start_s = m.data_s + fwd_all + (acc - 1) * m.backward_nosync_s;
    m.forward_s = fwd_all / acc;
    return m;
  }
  // A bucket's collectives wait for every rank's codec: the slowest rank's, where measured.
  if (!std::isnan(row.rank_max_encode_s)) m.encode_s = row.rank_max_encode_s;
  if (!std::isnan(row.rank_max_decode_s)) m.decode_s = row.rank_max_decode_s;
  const std::size_t p = row.rank_pre_s.size();
  const auto sync_of = [&](std::size_t k) {
    return k < row.rank_backward_sync_s.size() ? row.rank_backward_sync_s[k] : std::numeric_limits<double>::quiet_NaN();
  };
  std::size_t c = 0;
  double post = -std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < p; ++k) {
    if (row.rank_prev_post_s[k] + row.rank_pre_s[k] > row.rank_prev_post_s[c] + row.rank_pre_s[c]) c = k;
    post = std::max(post, row.rank_post_s[k] - row.rank_prev_post_s[k]);
  }
  const double crit = row.rank_prev_post_s[c] + row.rank_pre_s[c];
  const double bwd_c = row.rank_backward_s[c];
  std::tie(m.backward_s, m.backward_nosync_s) = split_backward(bwd_c, sync_of(c), acc);
  m.data_s = crit - fwd_all - bwd_c;
  if (m.data_s < 0) {
    fwd_all = std::max(0.0, fwd_all + m.data_s);
    m.data_s = 0;
  }
  m.reducer_s = post - m.optimizer_s;
  if (m.reducer_s < 0) {
    m.data_s = std::max(0.0, m.data_s + m.reducer_s);
    m.reducer_s = 0;
  }
  m.bwd_start_s = m.data_s + fwd_all + (acc - 1) * m.backward_nosync_s;
  m.forward_s = fwd_all / acc;
  // Rank 0's ready times, moved from its synchronized backward (which ends at its pre_s)
  // onto the critical rank's.
  const double sync0 = split_backward(row.rank_backward_s[0], sync_of(0), acc).first;
  const double start0 = row.rank_pre_s[0] - sync0;
  for (auto& t : m.ready_s) {
    if (std::isnan(t)) continue;
    t = m.bwd_start_s + (sync0 > 0 ? std::clamp(t - start0, 0.0, sync0) / sync0 * m.backward_s : m.backward_s);
  }
  return m;
}

// --compute-from: for each tensor of `run` (by /model name), the bucket it went to in `ref`,
// and how long before that bucket's median ready time its gradient was ready in ref
// (/model/tensor_ready_s; 0 without it: the bucket's ready time stands for its tensors).
// Both runs must be the same model (every tensor of run in ref, same element count).
struct RefTensor {
  int64_t bucket = 0;
  double before_s = 0;
};

std::vector<RefTensor> ref_tensors(const TrainRun& run, const TrainRun& ref) {
  GS_USAGE_CHECK(!ref.tensors.empty(), ref.path, ": --compute-from needs /model (tensor names and buckets) in the file");
  GS_USAGE_CHECK(!run.tensors.empty(), run.path,
                 ": --compute-from needs /model (tensor names and buckets) in every compared file");
  std::vector<RefTensor> out;
  for (const auto& t : run.tensors) {
    const auto it = std::find_if(ref.tensors.begin(), ref.tensors.end(),
                                 [&](const TrainTensor& r) { return r.name == t.name; });
    GS_USAGE_CHECK(it != ref.tensors.end() && it->numel == t.numel && it->bucket >= 0 &&
                       static_cast<std::size_t>(it->bucket) < ref.bucket_bytes.size(),
                   run.path, ": tensor '", t.name, "' (", t.numel, " elements) is not in the --compute-from run ",
                   ref.path, " (another model?)");
    const auto rb = static_cast<std::size_t>(it->bucket);
    const double bucket_ready = rb < ref.bucket_ready_s.size() ? ref.bucket_ready_s[rb] : std::nan("");
    const double before = std::isfinite(it->ready_s) && std::isfinite(bucket_ready) ? bucket_ready - it->ready_s : 0.0;
    out.push_back({it->bucket, std::max(0.0, before)});
  }
  return out;
}

// How much later the critical rank hands its last bucket over than the ranks' mean
// (measured_step: prev_post + pre per rank), the median over the rows with /ranks; NaN
// without them.
double critical_rank_spread(const TrainRun& run) {
  std::vector<double> spread;
  for (const auto& row : run.rows) {
    const std::size_t p = row.rank_pre_s.size();
    if (p < 2) continue;
    double sum = 0, top = -std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < p; ++k) {
      const double x = row.rank_prev_post_s[k] + row.rank_pre_s[k];
      sum += x;
      top = std::max(top, x);
    }
    if (std::isfinite(top)) spread.push_back(top - sum / static_cast<double>(p));
  }
  return median(spread);
}

}  // namespace

int recorded_ranks(const TrainRun& run) {
  for (const auto& row : run.rows)
    if (!row.rank_pre_s.empty()) return static_cast<int>(row.rank_pre_s.size());
  return std::max(1, run.config.nodes * run.config.ranks_per_node);
}

StepResult replay_recorded(const TrainRun& run, const PredictConfig& c, const Fabric& fabric, Predictor& predictor,
                           const TrainRun* ref) {
  const TrainRun& src = ref ? *ref : run;  // whose recorded steps are replayed
  GS_USAGE_CHECK(!std::isnan(src.forward_s) && !std::isnan(src.backward_s), src.path,
                 ": compute=real needs /steps/forward_s and /steps/backward_s");
  GS_USAGE_CHECK(!run.bucket_bytes.empty(), run.path, ": compute=real needs /buckets (sizes and ready times)");
  GS_USAGE_CHECK(!ref || !ref->bucket_bytes.empty(), src.path, ": --compute-from needs /buckets (ready times)");
  const std::vector<RefTensor> from = ref ? ref_tensors(run, *ref) : std::vector<RefTensor>{};
  const Compressor comp(c.compress);
  const DType precision = plan::parse_precision(c.precision);
  const int e = static_cast<int>(dtype_size(precision));
  // The profile's device rates price a modelled codec; a file's own profile that cannot be
  // loaded (a PyTorch run's device name, a moved TOML) falls back to the CPU's. Loaded once
  // per name by the predictor: a predict --from-run grid replays the run per configuration.
  const models::ComputeProfile* profp = nullptr;
  try {
    profp = &predictor.profile(c.compute_profile);
  } catch (const UsageError&) {
    profp = &predictor.profile("cpu");
  }
  const models::ComputeProfile& prof = *profp;
  DeviceRates rates{prof.peak_flops * prof.efficiency, prof.optimizer_bytes_per_s, predictor.kernels(c.kernels)};
  double params = 0;
  for (double b : run.bucket_bytes) params += b / e;
  try {
    rates.working_set_bytes = working_set_bytes(params, c.optimizer, c.ranks_per_node);
  } catch (const UsageError&) {  // a PyTorch optimizer gradsync has no byte count for: SGD's
    rates.working_set_bytes = working_set_bytes(params, "sgd", c.ranks_per_node);
  }
  // With /model (tensor shapes and their buckets) each bucket holds its real tensors, in
  // gradient-ready (descending forward) order as the reducer's assign_buckets; without it
  // (older files) a bucket is one 1-D tensor of its measured bytes at fp32.
  const std::size_t nb = run.bucket_bytes.size();
  bool shapes = !run.tensors.empty();
  for (const auto& t : run.tensors)
    shapes = shapes && t.bucket >= 0 && static_cast<std::size_t>(t.bucket) < nb;
  std::vector<std::vector<GradShape>> per_bucket(nb);
  if (shapes) {
    for (std::size_t i = run.tensors.size(); i-- > 0;) {
      const auto& t = run.tensors[i];
      GradShape g;
      g.numel = t.numel;
      g.ndim = static_cast<int>(t.shape.size());
      g.rows = t.shape.empty() ? 1 : t.shape[0];
      per_bucket[static_cast<std::size_t>(t.bucket)].push_back(g);
    }
    for (const auto& v : per_bucket) shapes = shapes && !v.empty();
  }
  std::vector<Bucket> planned;
  for (std::size_t i = 0; i < nb; ++i) {
    Bucket b;
    if (shapes) {
      b.tensors = per_bucket[i];
    } else {
      GradShape g;
      g.numel = static_cast<int64_t>(run.bucket_bytes[i] / 4);  // bucket bytes at fp32 (shapes unknown: 1-D)
      g.rows = g.numel;
      b.tensors.push_back(g);
    }
    for (const auto& g : b.tensors) b.grad_bytes += g.numel * 4;
    b.plan = comp.plan(b.tensors, e, c.nodes * c.ranks_per_node, rates, precision);
    planned.push_back(std::move(b));
  }
  // The model's codec per step, all of it and up to each bucket's first collective, at the
  // rank count the run's codec was measured on (the measured scale is taken against it).
  const int ranks = c.nodes * c.ranks_per_node, run_ranks = recorded_ranks(run);
  double codec_model = 0, codec_before_first = 0;
  for (const auto& b : planned) {
    const BucketPlan plan =
        ranks == run_ranks ? b.plan : comp.plan(b.tensors, e, run_ranks, rates, precision);
    codec_model += plan.tail_s;
    bool first = true;
    for (const auto& ph : plan.phases) {
      codec_model += ph.compute_s;
      if (first) codec_before_first += ph.compute_s;
      first = first && ph.compute_s <= 0;  // a leading phase without codec work (PowerSGD's plain batch)
    }
  }
  // No codec of this compressor was measured: another run's compute, or another compressor.
  const bool codec_modelled = ref != nullptr || c.compress != run.config.compress;
  // A measured codec is the slowest rank's per step (/ranks): its wait for the slowest of
  // run_ranks is in the steps; at `ranks` the step waits E[max of ranks] - E[max of
  // run_ranks] codec sigmas longer (BucketPlan::codec_sigma, timeline.hpp).
  const double sigma_kept =
      codec_modelled ? 1.0
      : ranks >= 2   ? 1.0 - expected_max_std_normal(run_ranks) / expected_max_std_normal(ranks)
                     : 0.0;
  for (auto& b : planned) b.plan.codec_sigma *= sigma_kept;
  // The wait for the slowest rank beyond what the recorded steps hold (see the header).
  const int src_ranks = recorded_ranks(src);
  double rank_wait = 0;
  if (ranks != src_ranks && src_ranks >= 2) {
    const double spread = critical_rank_spread(src);
    if (std::isfinite(spread))
      rank_wait = (expected_max_std_normal(ranks) - expected_max_std_normal(src_ranks)) * spread /
                  expected_max_std_normal(src_ranks);
  }
  NetConfig net{c.nodes, c.ranks_per_node, c.algo, c.chunk_bytes == kAutoChunk ? chunk_priced(c) : c.chunk_bytes,
                c.channels, c.registered_buckets};
  // The measured loading time is exposed as measured (the loader settings are in it).
  StepConfig st{c.batch_per_rank, c.overlap, c.accumulate, c.loader_workers, 0.0, c.compute_threads};
  // A no-overlap reference timed backward with no communication beside it.
  st.compute_shares_cpu = ref && !ref->config.overlap;
  st.comm_preempts_compute = c.comm_preempts;
  st.machine_ranks = c.machine_ranks;
  st.machine_cores = c.machine_cores;
  st.codec_beside_compute = c.codec_beside_compute;
  const int src_acc = std::max(1, src.config.accumulate);
  auto simulate = [&](MeasuredStep m) {
    if (ref) {
      // ref's ready times onto run's buckets: a tensor is ready its recorded lead before its
      // ref bucket's ready time this step (the lead scaled with this step's backward), and a
      // bucket of run when the latest of its tensors is.
      const double ref_bwd =
          split_backward(ref->backward_s, ref->backward_sync_s, std::max(1, ref->config.accumulate)).first;
      const double scale = ref_bwd > 0 && m.backward_s > 0 ? m.backward_s / ref_bwd : 1.0;
      std::vector<double> ready(nb, -std::numeric_limits<double>::infinity());
      for (std::size_t i = 0; i < run.tensors.size(); ++i) {
        const auto rb = static_cast<std::size_t>(from[i].bucket);
        const double t = (rb < m.ready_s.size() && !std::isnan(m.ready_s[rb]) ? m.ready_s[rb] : ref->bucket_ready_s[rb]) -
                         from[i].before_s * scale;
        const auto b = static_cast<std::size_t>(run.tensors[i].bucket);
        if (b < nb) ready[b] = std::max(ready[b], t);
      }
      for (auto& t : ready)
        if (!std::isfinite(t)) t = std::numeric_limits<double>::quiet_NaN();
      m.ready_s = ready;
    }
    if (codec_modelled) m.encode_s = m.decode_s = m.codec_s = std::numeric_limits<double>::quiet_NaN();
    Workload w;
    w.model = c.model;
    w.forward_s = m.forward_s;  // one micro-step's, as simulate_step runs `accumulate` of them
    w.backward_s = m.backward_s;
    w.backward_nosync_s = m.backward_nosync_s;
    w.optimizer_s = m.optimizer_s;
    w.reducer_per_step_s = m.reducer_s;
    // Another accumulate than src's (predict --from-run --accumulate, compute-from a run of
    // another): the row's data wait per micro-step, c.accumulate times.
    w.data_s = std::max(0.0, m.data_s + (static_cast<double>(c.accumulate) / src_acc - 1) * m.data_row_s);
    w.rank_wait_s = rank_wait;
    std::vector<Bucket> buckets = planned;
    double f = 1.0;
    const double enc = or0(m.encode_s), dec = or0(m.decode_s);
    if (std::isnan(m.decode_s) && m.codec_s > 0 && codec_model > 0) f = m.codec_s / codec_model;
    else if (std::isnan(m.decode_s) && enc > 0 && codec_before_first > 0) f = enc / codec_before_first;
    else if (enc + dec > 0 && codec_model > 0) f = (enc + dec) / codec_model;
    for (std::size_t i = 0; i < nb; ++i) {
      auto& b = buckets[i];
      // A bucket this step has no row for takes its median ready time.
      const double ready = i < m.ready_s.size() && !std::isnan(m.ready_s[i]) ? m.ready_s[i] : run.bucket_ready_s[i];
      b.ready_s = std::clamp(ready - m.bwd_start_s, 0.0, m.backward_s);
      b.plan.tail_s *= f;
      for (auto& ph : b.plan.phases) ph.compute_s *= f;
    }
    return simulate_step(w, buckets, fabric, net, st, c.samples_per_epoch, true);
  };
  // Every row with forward and backward (the checks above guarantee at least one).
  std::vector<StepResult> steps;
  for (const auto& row : src.rows)
    if (!std::isnan(row.forward_s) && !std::isnan(row.backward_s))
      steps.push_back(simulate(measured_step(row, src)));
  GS_CHECK(!steps.empty(), src.path, ": no step has forward_s and backward_s");
  const auto mid = steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2);  // upper middle of an even count
  std::nth_element(steps.begin(), mid, steps.end(),
                   [](const StepResult& a, const StepResult& b) { return a.step_time_s < b.step_time_s; });
  return *mid;
}


}  // namespace gradsync::netmodel
