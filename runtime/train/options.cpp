// gradsync/train/options.cpp — see options.hpp.
#include "train/options.hpp"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "algos/allreduce.hpp"
#include "compress/compressor.hpp"
#include "core/error.hpp"
#include "core/json.hpp"
#include "core/params.hpp"
#include "netmodel/tune.hpp"
#include "core/units.hpp"
#include "plan/algos.hpp"
#include "models/compute_profile.hpp"
#include "models/zoo.hpp"
#include "train/network.hpp"
#include "train/optimizer.hpp"
#include "train/precision.hpp"

namespace po = boost::program_options;

namespace gradsync::train {

namespace {

po::options_description describe(TrainOptions& o) {
  po::options_description d("gradsync-train options");
  // clang-format off
  d.add_options()
    ("help,h", po::bool_switch(&o.help), "print this help")
    ("model", po::value(&o.model), "model: a trainable one (mlp, cnn) or a zoo model (resnet50, bert-base, ...)")
    ("device", po::value(&o.device), "cpu or cuda: where gradients live and compute runs (cuda: one GPU per rank; real compute for mlp, emulated for every model; default cpu)")
    ("backend", po::value(&o.backend), "nccl (GPU buffers, --device cuda only) or mpi (host memory; with --device cuda staged through pinned host buffers); default nccl on cuda, mpi on cpu")
    ("compute", po::value(&o.compute), "real (forward/backward on the CPU; mlp, cnn) or emulated (replay a compute profile); default real for mlp/cnn, emulated otherwise")
    ("compute-profile", po::value(&o.compute_profile), "built-in profile (h200, a100, v100, cpu) or a TOML file; default h200 for emulated (recorded only for real compute, default cpu)")
    ("batch-per-rank", po::value(&o.batch_per_rank), "samples per rank per micro-step (default 32)")
    ("steps", po::value(&o.steps), "optimizer steps (default 50 unless --epochs)")
    ("epochs", po::value(&o.epochs), "epochs instead of --steps")
    ("samples-per-epoch", po::value(&o.samples_per_epoch), "training-set size M (default: 8192 for mlp/cnn, the zoo model's epoch)")
    ("bucket-mb", po::value(&o.bucket_mb), "bucket size limit in MiB (default 25)")
    ("first-bucket-mb", po::value(&o.first_bucket_mb), "limit of the first bucket formed (the last parameters) in MiB (default 1)")
    ("no-overlap", "launch all bucket all-reduces after backward instead of during it")
    ("accumulate", po::value(&o.accumulate), "micro-steps per optimizer step (gradient accumulation; sync on the last; default 1)")
    ("algo", po::value(&o.algo), "all-reduce algorithm from the registry (default auto: by size and placement, shm on one node, hier on several nodes of several ranks, ring for large buckets between nodes; runtime/plan/algos.hpp); top-k, QSGD and 1-bit all-gather on a ring in its chunk (mpi: MPI_Allgather)")
    ("buffers", po::value(&o.buffers), "shared (default) or private: host buckets in the node's shared memory, registered with the communicator when all ranks share one node, so --algo shm (and auto where it picks shm) sums and copies straight from the peers' buckets; private: each process's own memory")
    ("chunk-bytes", po::value<std::string>(), "ring pipelining chunk, e.g. 4M, or auto (default GRADSYNC_CHUNK_BYTES: auto, by transport)")
    ("channels", po::value(&o.channels), "concurrent rings (default GRADSYNC_CHANNELS)")
    ("compress", po::value(&o.compress), "gradient compressor spec (default none; with --precision fp16/bf16, none communicates in that half type)")
    ("precision", po::value(&o.precision), "fp32, fp16 or bf16: mixed precision with fp32 master weights; half-precision compute (real) and gradients communicated in half (default fp32)")
    ("loss-scale", po::value(&o.loss_scale), "dynamic[:init=65536,growth=2,backoff=0.5,interval=2000] (GradScaler), static:V or none (default dynamic for fp16, none for bf16; refused with fp32)")
    ("optimizer", po::value(&o.optimizer), "sgd (momentum 0.9) or adam (default sgd)")
    ("lr", po::value(&o.lr), "learning rate (default 0.05 for sgd, 0.001 for adam)")
    ("seed", po::value(&o.seed), "seed of data, initial weights, sampler and emulated gradients (default 1)")
    ("loader-workers", po::value(&o.loader_workers), "data loader threads; 0 loads in the training thread (default 2)")
    ("prefetch", po::value(&o.prefetch), "batches the loader may build ahead (default 2)")
    ("data-time-us", po::value(&o.data_time_us), "emulated loading cost per sample in microseconds, spent in the loader (default 0)")
    ("warmup-steps", po::value(&o.warmup_steps), "steps left out of the summary statistics (default 2)")
    ("out", po::value(&o.out), "result file (default results/train-<model>-<UTC time>.h5)")
    ("list-models", po::bool_switch(&o.list_models), "list the models and exit")
    ("tune", po::value(&o.tune), "FABRIC (name or TOML): let gradsync-model's tuner pick bucket sizes, algorithm, chunk, channels, compressor and precision (those not given) for this cluster; the choice and its predicted step are recorded. Under Open MPI 4's mpirun write --tune=FABRIC: mpirun also reads a separate '--tune X' anywhere on its command line as its own option (an MCA parameter file) and every process prints 'Unable to locate the variable file'")
    ("json", po::bool_switch(&o.json), "machine-readable output (--list-models, summary)")
    ("quiet", po::bool_switch(&o.quiet), "no progress and no summary (the output path is still printed)");
  // clang-format on
  return d;
}

}  // namespace

std::string train_usage() {
  TrainOptions o;
  std::ostringstream os;
  os << "usage: mpirun -np N gradsync-train --model NAME [options]\n"
        "       gradsync-train --list-models [--json]\n\n"
        "Data-parallel training with a DDP-style bucketed gradient reducer; writes an HDF5 result.\n\n"
     << describe(o);
  return os.str();
}

TrainOptions parse_train_options(int argc, const char* const* argv) {
  TrainOptions o;
  po::options_description d = describe(o);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(d).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  if (o.help || o.list_models) return o;
  o.overlap = vm.count("no-overlap") == 0;
  for (const char* k : {"bucket-mb", "first-bucket-mb", "algo", "chunk-bytes", "channels", "compress", "precision"})
    if (vm.count(k)) o.knobs_given.emplace_back(k);
  if (!vm.count("chunk-bytes") && param_string("GRADSYNC_CHUNK_BYTES") != "auto") o.knobs_given.emplace_back("chunk-bytes");
  GS_USAGE_CHECK(!o.model.empty(), "option --model is required (see --list-models)");
  GS_USAGE_CHECK(!(vm.count("steps") && vm.count("epochs")), "options --steps and --epochs are exclusive");
  // 0 (auto, the default): the algorithm picks by transport (runtime/algos/chunk.cpp).
  const std::string chunk_text =
      vm.count("chunk-bytes") ? vm["chunk-bytes"].as<std::string>() : param_string("GRADSYNC_CHUNK_BYTES");
  const char* chunk_opt = vm.count("chunk-bytes") ? "--chunk-bytes" : "--chunk-bytes (default from GRADSYNC_CHUNK_BYTES)";
  if (chunk_text != "auto") {
    o.chunk_bytes = parse_size(chunk_text, chunk_opt);
    GS_USAGE_CHECK(o.chunk_bytes > 0, "option ", chunk_opt, ": must be > 0 bytes or auto, got ", chunk_text);
  }
  GS_USAGE_CHECK(!vm.count("channels") || o.channels >= 1, "option --channels: must be >= 1, got ", o.channels);
  (void)plan::parse_buffers(o.buffers);
  GS_USAGE_CHECK(!vm.count("samples-per-epoch") || o.samples_per_epoch >= 1,
                 "option --samples-per-epoch: must be >= 1, got ", o.samples_per_epoch);
  GS_USAGE_CHECK(!vm.count("epochs") || o.epochs >= 1, "option --epochs: must be >= 1, got ", o.epochs);
  GS_USAGE_CHECK(!vm.count("steps") || o.steps >= 1, "option --steps: must be >= 1, got ", o.steps);
  if (o.backend.empty()) o.backend = o.device == "cuda" ? "nccl" : "mpi";
  if (o.compute.empty()) o.compute = is_trainable(o.model) ? "real" : "emulated";
  if (o.compute_profile.empty()) o.compute_profile = o.compute == "emulated" ? "h200" : "cpu";
  if (vm.count("lr") == 0) o.lr = o.optimizer == "adam" ? 0.001 : 0.05;
  if (o.steps == 0 && o.epochs == 0 && !vm.count("steps") && !vm.count("epochs")) o.steps = 50;
  o.loss_scale_given = vm.count("loss-scale") != 0;
  if (!o.loss_scale_given) {
    const bool known = o.precision == "fp32" || o.precision == "fp16" || o.precision == "bf16";
    // An unknown precision is refused by validate_train_options, naming --precision.
    o.loss_scale = known ? default_loss_scale(parse_precision(o.precision)) : "none";
  }
  if (o.channels == 0) o.channels = parse_int(param_string("GRADSYNC_CHANNELS"), "GRADSYNC_CHANNELS");
  return o;
}

void apply_tune(TrainOptions& o, int nodes, int ranks_per_node, int machine_ranks, int machine_cores) {
  if (o.tune.empty()) return;
  GS_USAGE_CHECK(o.compute == "emulated", "option --tune: the model predicts zoo models with --compute emulated, not '",
                 o.model, "' with --compute ", o.compute);
  netmodel::PredictConfig base;
  base.model = o.model;
  base.fabric = o.tune;
  base.compute_profile = o.compute_profile;
  base.nodes = nodes;
  base.ranks_per_node = ranks_per_node;
  base.batch_per_rank = o.batch_per_rank;
  base.overlap = o.overlap;
  base.accumulate = static_cast<int>(o.accumulate);
  base.loader_workers = static_cast<int>(o.loader_workers);
  base.data_time_s = o.data_time_us * 1e-6;
  base.optimizer = o.optimizer;
  base.samples_per_epoch = o.samples_per_epoch;
  if (machine_ranks > 0 && machine_cores > 0) {  // the cores this run's ranks share (core/cpus.hpp)
    base.machine_ranks = machine_ranks;
    base.machine_cores = machine_cores;
  }
  netmodel::TuneSpace space = netmodel::default_tune_space(nodes, ranks_per_node);
  auto given = [&](const char* k) { return std::find(o.knobs_given.begin(), o.knobs_given.end(), k) != o.knobs_given.end(); };
  if (given("bucket-mb")) space.bucket_mb = {o.bucket_mb};
  if (given("first-bucket-mb")) space.first_bucket_mb = {o.first_bucket_mb};
  if (given("algo")) space.algo = {o.algo};
  if (given("chunk-bytes")) space.chunk_bytes = {static_cast<double>(o.chunk_bytes)};
  if (given("channels")) space.channels = {static_cast<int>(o.channels)};
  if (given("compress")) space.compress = {o.compress};
  if (given("precision")) space.precision = {o.precision};
  netmodel::Predictor predictor;
  netmodel::TuneReport rep;
  try {
    rep = netmodel::tune(base, space, predictor, 1);
  } catch (const UsageError& e) {
    throw UsageError(std::string("option --tune: ") + e.what());
  }
  const netmodel::PredictConfig& c = rep.best.config;
  o.bucket_mb = c.bucket_mb;
  o.first_bucket_mb = c.first_bucket_mb;
  o.algo = c.algo;
  // The model's chunk for algorithms that take one; the transport-aware default otherwise.
  if (!given("chunk-bytes")) o.chunk_bytes = c.algo == "ring" || c.algo == "hier" || c.algo == "tree" || c.algo == "auto" || c.algo == "shm"
                                                 ? static_cast<std::int64_t>(c.chunk_bytes)
                                                 : 0;
  o.channels = c.channels;
  o.compress = c.compress;
  o.precision = c.precision;
  if (!o.loss_scale_given) o.loss_scale = default_loss_scale(parse_precision(o.precision));
  o.tune_choice = netmodel::train_args(c);
  o.tune_bound = rep.bound.name;
  o.tune_predicted_step_s = rep.best.step_time_s;
  o.tune_default_step_s = rep.base.step_time_s;
}

void validate_train_options(const TrainOptions& o) {
  // Model: trainable or zoo (zoo_model's UsageError lists only the zoo; list both).
  if (!is_trainable(o.model)) {
    bool known = false;
    for (const auto& n : models::zoo_names()) known = known || n == o.model;
    if (!known) {
      std::string names;
      for (const auto& n : trainable_names()) names += (names.empty() ? "" : ", ") + n;
      for (const auto& n : models::zoo_names()) names += ", " + n;
      throw UsageError("option --model: unknown model '" + o.model + "' (known: " + names + ")");
    }
  }
  GS_USAGE_CHECK(o.device == "cpu" || o.device == "cuda", "option --device: '", o.device,
                 "' is neither cpu nor cuda");
  GS_USAGE_CHECK(o.backend == "nccl" || o.backend == "mpi", "option --backend: '", o.backend,
                 "' is neither nccl nor mpi");
  GS_USAGE_CHECK(o.device == "cuda" || o.backend == "mpi",
                 "option --backend: nccl communicates GPU buffers and needs --device cuda (cpu training uses mpi)");
  GS_USAGE_CHECK(o.compute == "real" || o.compute == "emulated", "option --compute: '", o.compute,
                 "' is neither real nor emulated");
  GS_USAGE_CHECK(o.compute != "real" || is_trainable(o.model), "option --compute: real compute needs a trainable model (mlp, cnn); '",
                 o.model, "' can only be emulated (--compute emulated)");
  try {
    (void)models::load_profile(o.compute_profile);
  } catch (const UsageError& e) {
    throw UsageError(std::string("option --compute-profile: ") + e.what());
  }
  GS_USAGE_CHECK(o.batch_per_rank > 0, "option --batch-per-rank: must be positive, got ", o.batch_per_rank);
  GS_USAGE_CHECK(o.steps >= 0 && o.epochs >= 0, "options --steps/--epochs must be positive");
  GS_USAGE_CHECK(o.steps > 0 || o.epochs > 0, "option --", o.epochs == 0 ? "steps" : "epochs", ": must be positive");
  GS_USAGE_CHECK(o.samples_per_epoch >= 0, "option --samples-per-epoch: must be positive, got ", o.samples_per_epoch);
  GS_USAGE_CHECK(std::isfinite(o.bucket_mb) && o.bucket_mb > 0, "option --bucket-mb: must be positive, got ", o.bucket_mb);
  GS_USAGE_CHECK(std::isfinite(o.first_bucket_mb) && o.first_bucket_mb > 0,
                 "option --first-bucket-mb: must be positive, got ", o.first_bucket_mb);
  GS_USAGE_CHECK(o.bucket_mb * 1048576.0 >= 4.0 && o.first_bucket_mb * 1048576.0 >= 4.0,
                 "options --bucket-mb/--first-bucket-mb: a bucket must hold at least one fp32 value");
  GS_USAGE_CHECK(o.accumulate >= 1, "option --accumulate: must be >= 1, got ", o.accumulate);
  try {
    check_allreduce_name(o.algo);
  } catch (const UsageError& e) {
    throw UsageError(std::string("option --algo: ") + e.what());
  }
  GS_USAGE_CHECK(o.chunk_bytes >= 0, "option --chunk-bytes: must be positive, got ", o.chunk_bytes);
  GS_USAGE_CHECK(o.channels >= 1, "option --channels: must be >= 1, got ", o.channels);
  check_compressor_spec(o.compress);  // its messages name --compress
  const DType precision = parse_precision(o.precision);  // its message names --precision
  GS_USAGE_CHECK(precision != DType::F32 || !o.loss_scale_given, "option --loss-scale: '", o.loss_scale,
                 "' needs --precision fp16 or bf16 (fp32 training has no loss scaling)");
  (void)parse_loss_scale(o.loss_scale);  // its messages name --loss-scale
  check_optimizer_name(o.optimizer);  // its message names --optimizer
  GS_USAGE_CHECK(std::isfinite(o.lr) && o.lr > 0, "option --lr: must be positive, got ", o.lr);
  GS_USAGE_CHECK(o.loader_workers >= 0 && o.loader_workers <= 256, "option --loader-workers: must be in [0, 256], got ",
                 o.loader_workers);
  GS_USAGE_CHECK(o.prefetch >= 1, "option --prefetch: must be >= 1, got ", o.prefetch);
  GS_USAGE_CHECK(std::isfinite(o.data_time_us) && o.data_time_us >= 0, "option --data-time-us: must be >= 0, got ",
                 o.data_time_us);
  GS_USAGE_CHECK(o.warmup_steps >= 0, "option --warmup-steps: must be >= 0, got ", o.warmup_steps);
  if (o.device == "cuda") check_cuda_train_options(o);
}

void check_cuda_train_options(const TrainOptions& o) {
  // What the CUDA device (device/cuda.hpp) does not do is refused, not run on the host.
  // Every --compress spec runs on cuda (device/device.hpp: staged or in place).
  GS_USAGE_CHECK(o.compute == "emulated" || o.model == "mlp",
                 "option --device cuda: real compute on the GPU exists for mlp only so far; '", o.model,
                 "' with --compute real trains on the CPU (--device cpu), or use --compute emulated");
}

std::vector<std::pair<std::string, std::string>> fingerprint_items(const TrainOptions& o) {
  auto num = [](double v) {
    std::ostringstream os;
    os << std::setprecision(17) << v;
    return os.str();
  };
  return {{"model", o.model},
          {"device", o.device},
          {"backend", o.backend},
          {"compute", o.compute},
          {"compute-profile", o.compute_profile},
          {"batch-per-rank", std::to_string(o.batch_per_rank)},
          {"steps", std::to_string(o.steps)},
          {"epochs", std::to_string(o.epochs)},
          {"samples-per-epoch", std::to_string(o.samples_per_epoch)},
          {"bucket-mb", num(o.bucket_mb)},
          {"first-bucket-mb", num(o.first_bucket_mb)},
          {"no-overlap", o.overlap ? "false" : "true"},
          {"accumulate", std::to_string(o.accumulate)},
          {"algo", o.algo},
          {"buffers", o.buffers},
          {"chunk-bytes", std::to_string(o.chunk_bytes)},
          {"channels", std::to_string(o.channels)},
          {"compress", o.compress},
          {"precision", o.precision},
          {"loss-scale", o.loss_scale},
          {"optimizer", o.optimizer},
          {"lr", num(o.lr)},
          {"seed", std::to_string(o.seed)},
          {"loader-workers", std::to_string(o.loader_workers)},
          {"prefetch", std::to_string(o.prefetch)},
          {"data-time-us", num(o.data_time_us)},
          {"warmup-steps", std::to_string(o.warmup_steps)},
          {"tune", o.tune}};
}

std::string train_fingerprint(const TrainOptions& o) {
  std::string s;
  for (const auto& [k, v] : fingerprint_items(o)) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

std::string list_models_text(bool json) {
  std::vector<models::ModelSpec> specs;
  for (const auto& n : models::zoo_names()) specs.push_back(models::zoo_model(n));
  for (const auto& n : trainable_names()) specs.push_back(make_network<float>(n)->spec());
  if (json) {
    Json arr = Json::array();
    for (const auto& m : specs) {
      Json o = Json::object();
      o.set("name", m.name)
          .set("trainable", is_trainable(m.name))
          .set("tensors", static_cast<long long>(m.num_tensors()))
          .set("parameters", static_cast<long long>(m.num_parameters()))
          .set("grad_bytes", static_cast<long long>(m.grad_bytes()));
      arr.push(std::move(o));
    }
    return arr.dump(2) + "\n";
  }
  std::ostringstream os;
  os << std::left << std::setw(16) << "model" << std::right << std::setw(9) << "tensors" << std::setw(14)
     << "parameters" << std::setw(12) << "grad MiB" << "  compute\n";
  for (const auto& m : specs)
    os << std::left << std::setw(16) << m.name << std::right << std::setw(9) << m.num_tensors() << std::setw(14)
       << m.num_parameters() << std::setw(12) << std::fixed << std::setprecision(2)
       << static_cast<double>(m.grad_bytes()) / 1048576.0 << "  "
       << (is_trainable(m.name) ? "real or emulated" : "emulated") << "\n";
  return os.str();
}

}  // namespace gradsync::train
