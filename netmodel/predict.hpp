// gradsync/netmodel/predict.hpp — one configuration in, one predicted step out.
//
// A PredictConfig names everything gradsync-train is run with (model, compute profile,
// nodes x ranks per node, batch, buckets, overlap, algorithm, chunking, compressor,
// precision, data loading, optimizer) plus the fabric. The Predictor turns it into a
// Workload (models/: per-layer times from the compute profile, tensors in backward order),
// DDP buckets and their compression plans, then runs the timeline (timeline.hpp).
// Everything that does not depend on the network is cached, so a grid over nodes and
// bucket sizes only re-runs the event loop and the collective formulas.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "models/compute_profile.hpp"
#include "netmodel/fabric.hpp"
#include "netmodel/timeline.hpp"

namespace gradsync::netmodel {

struct TrainRun;  // train_file.hpp

struct PredictConfig {
  std::string model = "resnet50";
  std::string fabric = "roce-100g";    // name or TOML file
  std::string intra;                   // optional: take the intra level from this fabric
  std::string compute_profile = "h200";
  int nodes = 1;
  int ranks_per_node = 1;
  int64_t batch_per_rank = 32;
  double bucket_mb = 25;
  double first_bucket_mb = 1;
  bool overlap = true;
  int accumulate = 1;
  std::string algo = "auto";
  double chunk_bytes = 0;  // 0: unpipelined; kAutoChunk: the runtime's default (chunk_priced)
  int channels = 1;
  // The buckets are registered shared buffers (gradsync-train --buffers shared, its default;
  // timeline.hpp NetConfig::registered_buckets). A train file without the attribute: false.
  bool registered_buckets = true;
  std::string compress = "none";
  std::string precision = "fp32";
  int loader_workers = 4;
  double data_time_s = 0;  // per sample
  std::string optimizer = "sgd";
  int64_t samples_per_epoch = 0;  // 0: the model's data set
  std::string kernels;  // measured kernel rates file (calibrate --kernels); empty: device rates
  double compute_threads = 0;  // busy compute threads per rank in backward (timeline.hpp StepConfig)
  // The communication threads preempt compute (a real-time policy: a train file's
  // comm_sched rr or fifo; timeline.hpp StepConfig::comm_preempts_compute).
  bool comm_preempts = false;
  // Ranks sharing one machine's CPUs and those CPUs (a train file's machine_ranks and
  // machine_cores; timeline.hpp StepConfig::machine_ranks); 0: a node is a machine.
  int machine_ranks = 0, machine_cores = 0;
  // The codec runs beside compute on a thread of its own (gradsync-train); false for a
  // PyTorch-recorded file (source = "pytorch": DDP calls hooks on the autograd thread).
  // timeline.hpp StepConfig::codec_beside_compute.
  bool codec_beside_compute = true;
  // predict --from-run: a recorded gradsync-train (or PyTorch-recorded) file whose steps are
  // replayed (replay.hpp) instead of a zoo model's modelled compute; the other fields are the
  // run's own but for the what-if's network side (fabric, shape, algorithm, chunk,
  // channels, compressor, kernels, samples per epoch).
  std::string from_run;
};

// --chunk-bytes auto: the chunk the runtime picks when none is given (plan::chunk_used:
// the transport-aware default, shm's round on one node, whole messages for mpi).
inline constexpr double kAutoChunk = -1;
// The chunk `predict` prices for c: a given chunk as the runtime applies it to c.algo on
// c.nodes (plan::chunk_used), the runtime's own for kAutoChunk, 0 (unpipelined) for 0.
double chunk_priced(const PredictConfig& c);

// SGD with momentum touches 20 bytes per parameter, Adam(W) 28 (models/compute_profile.hpp).
double optimizer_bytes_per_param(const std::string& optimizer);
// Bytes a data-parallel step streams on one node: params x the optimizer's bytes per
// parameter (its reads and writes of parameters, gradients and state) x ranks per node.
// Selects the codec kernels' size regime (DeviceRates::working_set_bytes).
double working_set_bytes(double params, const std::string& optimizer, int ranks_per_node);

class Predictor {
 public:
  StepResult predict(const PredictConfig& c, bool keep_buckets = true);

  // The pieces, for callers that bring their own workload (compare, real compute).
  const Fabric& fabric(const std::string& name, const std::string& intra);
  const Workload& workload(const PredictConfig& c);
  const std::vector<Bucket>& buckets(const PredictConfig& c, int nranks);

 private:
  std::map<std::string, std::shared_ptr<void>> models_;  // ModelSpec, type-erased here
  std::map<std::pair<std::string, std::string>, Fabric> fabrics_;
  std::map<std::string, KernelRates> kernels_;
  std::map<std::string, std::shared_ptr<const TrainRun>> runs_;

 public:
  // Loaded once per path; nullptr for an empty path.
  const KernelRates* kernels(const std::string& path);
  // A recorded run (read_train_file), loaded once per path.
  const TrainRun& recorded(const std::string& path);
  // A compute profile (models::load_profile), loaded once per name or path.
  const models::ComputeProfile& profile(const std::string& name_or_path);

 private:
  std::map<std::tuple<std::string, std::string, int64_t, std::string, std::string>, Workload> workloads_;
  std::map<std::string, models::ComputeProfile> profiles_;
  // Bucket layouts (tensors per bucket) do not depend on the rank count or the compressor;
  // the compressor's plan does, and costs little, so it is made per call into `planned_`
  // (a grid over nodes x bucket sizes would otherwise cache one copy per configuration).
  using LayoutKey = std::tuple<std::string, std::string, int64_t, std::string, double, double>;
  std::map<LayoutKey, std::vector<Bucket>> layouts_;
  std::vector<Bucket> planned_;
};

}  // namespace gradsync::netmodel
