// gradsync/train/options.hpp — gradsync-train's command line: one struct, one parser, one
// validator. Everything here runs before MPI is initialised, so a bad option fails fast
// (exit status 2, "gradsync-train: error: ...") without any communication.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gradsync::train {

struct TrainOptions {
  std::string model;
  std::string device = "cpu";    // cpu | cuda (device/device.hpp: the same trainer on GPU memory)
  std::string backend;           // nccl | mpi; default nccl on cuda, mpi on cpu (nccl on cpu refused)
  std::string compute;           // "real" | "emulated"; default: real for mlp/cnn, emulated otherwise
  std::string compute_profile;   // name or TOML path; default: h200 (emulated), cpu (real: recorded only)
  std::int64_t batch_per_rank = 32;
  std::int64_t steps = 0;        // 0: from --epochs, or 50 when neither is given
  std::int64_t epochs = 0;
  std::int64_t samples_per_epoch = 0;  // 0: the model's default (8192 for mlp/cnn; the zoo's epoch)
  double bucket_mb = 25.0;
  double first_bucket_mb = 1.0;
  bool overlap = true;
  std::int64_t accumulate = 1;
  std::string algo = "auto";
  // shared: host buckets in the node's shared memory, registered with the reducer's
  // communicator, when all ranks share one node (shm then reads peers' buckets in place);
  // private: each process's own memory.
  std::string buffers = "shared";
  std::int64_t chunk_bytes = 0;  // 0: auto, by transport (GRADSYNC_CHUNK_BYTES=auto)
  std::int64_t channels = 0;     // 0: GRADSYNC_CHANNELS
  std::string compress = "none";
  std::string precision = "fp32";  // fp32 | fp16 | bf16 (precision.hpp)
  std::string loss_scale;          // dynamic[:...] | static:V | none; default from the precision
  bool loss_scale_given = false;   // --loss-scale was on the command line
  std::string optimizer = "sgd";
  double lr = 0;                 // 0: 0.05 for sgd, 0.001 for adam
  std::uint64_t seed = 1;
  std::int64_t loader_workers = 2;
  std::int64_t prefetch = 2;
  double data_time_us = 0;       // emulated loading cost per sample
  std::int64_t warmup_steps = 2;
  std::string out;               // default results/train-<model>-<UTC>.h5
  // --tune FABRIC: before the run, the model (netmodel/tune.hpp) picks every knob of the
  // list below that was not given on the command line; what it chose is recorded.
  std::string tune;
  std::vector<std::string> knobs_given;  // of bucket-mb, first-bucket-mb, algo, chunk-bytes, channels, compress, precision
  std::string tune_choice;               // the applied gradsync-train options
  std::string tune_bound;                // what bounds the chosen configuration
  double tune_predicted_step_s = 0, tune_default_step_s = 0;
  bool list_models = false;
  bool json = false;
  bool quiet = false;
  bool help = false;
};

// Parses argv (Boost.Program_options). UsageError naming the option on anything malformed.
// Fills defaults that depend on other options (compute, profile, lr, steps).
TrainOptions parse_train_options(int argc, const char* const* argv);
std::string train_usage();

// Checks every option that can be checked without a communicator (model, algorithm,
// compressor spec, optimizer, profile, ranges, exclusive options). UsageError otherwise.
void validate_train_options(const TrainOptions& o);
// --tune: applies the model's choice for a cluster of nodes x ranks_per_node (the knobs not
// given on the command line). Deterministic, so every rank picks the same. UsageError when
// the run is not one the model can predict (real compute, an unknown fabric). machine_ranks
// and machine_cores: the ranks sharing one machine's cores and those cores (core/cpus.hpp
// machine_share; 0: unknown), so the tuner prices the codecs at their share of the cores
// (the namespace testbed's hosts, an oversubscribed node).
void apply_tune(TrainOptions& o, int nodes, int ranks_per_node, int machine_ranks = 0, int machine_cores = 0);
// The part of it that applies to --device cuda only (called by validate_train_options):
// what the GPU path does not support yet (real compute of models other than mlp) is refused
// with exit status 2. Every --compress spec and precision runs on cuda.
void check_cuda_train_options(const TrainOptions& o);

// The options that define the run as (option name, canonical value) pairs, in help order
// (compared across ranks before the first step; excludes output and verbosity).
std::vector<std::pair<std::string, std::string>> fingerprint_items(const TrainOptions& o);
// The same as one line "key=value key=value ...".
std::string train_fingerprint(const TrainOptions& o);

// --list-models: zoo and trainable models (name, tensors, parameters, gradient bytes).
std::string list_models_text(bool json);

}  // namespace gradsync::train
