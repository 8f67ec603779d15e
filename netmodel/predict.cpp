// gradsync/netmodel/predict.cpp — workload from models/, buckets, and the cached predictor.
#include "netmodel/predict.hpp"

#include "core/error.hpp"
#include "models/compute_profile.hpp"
#include "models/zoo.hpp"
#include "netmodel/replay.hpp"
#include "netmodel/train_file.hpp"
#include "plan/algos.hpp"
#include "plan/precision.hpp"

namespace gradsync::netmodel {

double optimizer_bytes_per_param(const std::string& optimizer) {
  if (optimizer == "sgd" || optimizer == "momentum") return 20.0;
  if (optimizer == "adam" || optimizer == "adamw") return 28.0;
  throw UsageError("option --optimizer: unknown optimizer '" + optimizer + "' (known: sgd, adam, adamw)");
}

double working_set_bytes(double params, const std::string& optimizer, int ranks_per_node) {
  return params * optimizer_bytes_per_param(optimizer) * std::max(1, ranks_per_node);
}

const Fabric& Predictor::fabric(const std::string& name, const std::string& intra) {
  auto key = std::make_pair(name, intra);
  auto it = fabrics_.find(key);
  if (it != fabrics_.end()) return it->second;
  Fabric f = load_fabric(name);
  if (!intra.empty()) {
    const Fabric i = load_fabric(intra);
    f.intra = i.intra;
    f.description += "; intra level from " + i.name;
  }
  return fabrics_.emplace(key, std::move(f)).first->second;
}

namespace {
DeviceRates device_rates(const models::ComputeProfile& p) {
  return DeviceRates{p.peak_flops * p.efficiency, p.optimizer_bytes_per_s};
}
}  // namespace

const KernelRates* Predictor::kernels(const std::string& path) {
  if (path.empty()) return nullptr;
  auto it = kernels_.find(path);
  if (it == kernels_.end()) it = kernels_.emplace(path, load_kernel_rates(path)).first;
  return &it->second;
}

const Workload& Predictor::workload(const PredictConfig& c) {
  auto key = std::make_tuple(c.model, c.compute_profile, c.batch_per_rank, c.precision, c.optimizer);
  auto it = workloads_.find(key);
  if (it != workloads_.end()) return it->second;
  GS_USAGE_CHECK(c.batch_per_rank >= 1, "option --batch-per-rank must be >= 1, got ", c.batch_per_rank);
  auto& slot = models_[c.model];
  if (!slot) slot = std::make_shared<models::ModelSpec>(models::zoo_model(c.model));
  const auto& model = *std::static_pointer_cast<models::ModelSpec>(slot);
  const models::ComputeProfile& prof = profile(c.compute_profile);
  const bool half = precision_bytes(c.precision) == 2;
  const models::LayerTimes lt = models::layer_times(model, prof, c.batch_per_rank, half);
  Workload w;
  w.model = model.name;
  w.samples_per_epoch = model.samples_per_epoch;
  for (double f : lt.fwd_s) w.forward_s += f;
  // Backward in reverse layer order; a layer's tensors are ready when its backward ends.
  // Within a layer DDP's reverse order puts the last registered tensor (bias) first.
  double t = 0;
  for (std::size_t i = model.layers.size(); i-- > 0;) {
    t += lt.bwd_s[i];
    const auto& params = model.layers[i].params;
    for (std::size_t j = params.size(); j-- > 0;) {
      const auto& ts = params[j];
      GradShape g;
      g.numel = ts.numel();
      g.ndim = static_cast<int>(ts.shape.size());
      g.rows = ts.shape.empty() ? 1 : ts.shape[0];
      w.grads.push_back({g, t});
      w.parameters += static_cast<double>(g.numel);
    }
  }
  w.backward_s = t;
  w.optimizer_s = models::optimizer_step_s(model, prof, optimizer_bytes_per_param(c.optimizer));
  w.reducer_per_step_s = prof.reducer_per_step_s;
  w.reducer_per_bucket_s = prof.reducer_per_bucket_s;
  w.rank_jitter = prof.rank_jitter;
  w.codec_wait_s = prof.codec_wait_s;
  w.codec_wait_frac = prof.codec_wait_frac;
  return workloads_.emplace(key, std::move(w)).first->second;
}

const models::ComputeProfile& Predictor::profile(const std::string& name_or_path) {
  auto it = profiles_.find(name_or_path);
  if (it == profiles_.end()) it = profiles_.emplace(name_or_path, models::load_profile(name_or_path)).first;
  return it->second;
}

const std::vector<Bucket>& Predictor::buckets(const PredictConfig& c, int nranks) {
  const Compressor comp(c.compress);
  const LayoutKey key{c.model, c.compute_profile, c.batch_per_rank, c.precision + "/" + c.optimizer, c.bucket_mb,
                      c.first_bucket_mb};
  const Workload& w = workload(c);
  auto it = layouts_.find(key);
  if (it == layouts_.end()) it = layouts_.emplace(key, make_buckets(w.grads, c.bucket_mb, c.first_bucket_mb)).first;
  DeviceRates rates = device_rates(profile(c.compute_profile));
  rates.kernels = kernels(c.kernels);
  rates.working_set_bytes = working_set_bytes(w.parameters, c.optimizer, c.ranks_per_node);
  const DType precision = plan::parse_precision(c.precision);
  const int e = static_cast<int>(dtype_size(precision));
  // Wire bytes depend on the rank count for every compressor (2(p-1)/p for all-reduce).
  planned_ = it->second;
  for (auto& b : planned_) b.plan = comp.plan(b.tensors, e, nranks, rates, precision);
  return planned_;
}

double chunk_priced(const PredictConfig& c) {
  // A given chunk as the runtime applies it (plan::chunk_used: mpi runs whole messages).
  if (c.chunk_bytes == kAutoChunk) return static_cast<double>(plan::chunk_used(c.algo, c.nodes, 0));
  return c.chunk_bytes > 0 ? static_cast<double>(plan::chunk_used(c.algo, c.nodes, static_cast<std::size_t>(c.chunk_bytes)))
                           : 0.0;
}

const TrainRun& Predictor::recorded(const std::string& path) {
  auto it = runs_.find(path);
  if (it == runs_.end()) it = runs_.emplace(path, std::make_shared<const TrainRun>(read_train_file(path))).first;
  return *it->second;
}

StepResult Predictor::predict(const PredictConfig& c, bool keep_buckets) {
  GS_USAGE_CHECK(c.nodes >= 1, "option --nodes must be >= 1, got ", c.nodes);
  GS_USAGE_CHECK(c.ranks_per_node >= 1, "option --ranks-per-node must be >= 1, got ", c.ranks_per_node);
  GS_USAGE_CHECK(c.channels >= 1, "option --channels must be >= 1, got ", c.channels);
  GS_USAGE_CHECK((c.machine_ranks > 0) == (c.machine_cores > 0), "options --machine-ranks and --machine-cores go together (got ",
                 c.machine_ranks > 0 ? "only --machine-ranks" : "only --machine-cores", ")");
  GS_USAGE_CHECK(c.chunk_bytes >= 0 || c.chunk_bytes == kAutoChunk, "option --chunk-bytes must be >= 0 bytes or auto");
  check_algo_name(c.algo);
  const Fabric& f = fabric(c.fabric, c.intra);
  if (!c.from_run.empty()) return replay_recorded(recorded(c.from_run), c, f, *this);
  const Workload& w = workload(c);
  const auto& bs = buckets(c, c.nodes * c.ranks_per_node);
  NetConfig net{c.nodes, c.ranks_per_node, c.algo, chunk_priced(c), c.channels, c.registered_buckets};
  StepConfig st{c.batch_per_rank, c.overlap, c.accumulate, c.loader_workers, c.data_time_s, c.compute_threads};
  st.machine_ranks = c.machine_ranks;
  st.machine_cores = c.machine_cores;
  st.codec_beside_compute = c.codec_beside_compute;
  const int64_t samples = c.samples_per_epoch > 0 ? c.samples_per_epoch : w.samples_per_epoch;
  return simulate_step(w, bs, f, net, st, samples, keep_buckets);
}

}  // namespace gradsync::netmodel
