// gradsync/netmodel/tune.hpp — `gradsync-model tune`: search the runtime's knobs with the
// step model and explain the winner.
//
// A TuneSpace lists the values of each runtime knob (bucket size, first bucket, algorithm,
// chunk, channels, compressor with its parameters, precision, and the fabric when several
// interfaces are offered); an axis with one value is fixed. tune() predicts every
// combination (pruned where a knob cannot matter: chunk and channels only for the
// algorithms that pipeline) and ranks them by predicted step time.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "netmodel/grid.hpp"
#include "netmodel/predict.hpp"

namespace gradsync::netmodel {

struct TuneSpace {
  std::vector<double> bucket_mb, first_bucket_mb, chunk_bytes;
  std::vector<int> channels;
  std::vector<std::string> algo, compress, precision, fabric;
};

// The searched values of every knob the user did not fix, for a cluster of `nodes` x
// `ranks_per_node` (shm only on one node, hier only on several nodes of several ranks).
TuneSpace default_tune_space(int nodes, int ranks_per_node);

// gradsync-train's defaults for this run (bucket 25 MiB, first 1 MiB, auto, the runtime's
// transport-aware chunk: 32 KiB between nodes, 4 MiB on one node; 1 channel, no
// compression, fp32), on the base's cluster and fabric.
PredictConfig runtime_default_config(const PredictConfig& base);

// The share of the winner's step spent on each bound, and the largest.
struct TuneBound {
  std::string name;  // compute | data | latency | bandwidth | codec
  double compute_s = 0, data_s = 0, latency_s = 0, bandwidth_s = 0, codec_s = 0;
  double comm_total_s = 0, comm_exposed_s = 0;
};

struct TuneEntry {
  PredictConfig config;
  double step_time_s = 0, epoch_time_s = 0, comm_exposed_s = 0;
  // In TuneReport::top: other algorithms predicted the same to the last digit with every
  // other knob equal (e.g. topk, qsgd and onebit send no all-reduce, and ring, rd and
  // rabenseifner run their all-gathers alike), listed instead of repeated.
  std::vector<std::string> same_algos;
  // Likewise other first-bucket caps (e.g. where every cap from 0.25 to 5 MiB leaves the
  // first bucket's all-reduce hidden behind backward). Each value listed, here and in
  // same_algos, predicts the same with only that knob changed.
  std::vector<double> same_first_bucket_mb;
};

struct TuneReport {
  TuneEntry best, base;
  std::vector<TuneEntry> top;                   // best first, distinct configurations
  std::vector<TuneEntry> best_per_compressor;   // in the order of the space
  TuneBound bound;
  std::size_t evaluated = 0;
  std::size_t fabrics_searched = 1;  // > 1: the interface (fabric) was a knob
  double seconds = 0;
};

// Splits `predict`-style options into the base configuration (options of one value) and
// the space: a knob given on the command line (bucket-mb, first-bucket-mb, algo,
// chunk-bytes, channels, compress, precision, fabric) searches only the values given; the
// others keep default_tune_space(). UsageError for a list on a non-knob option.
void apply_tune_axes(const std::vector<Axis>& given, PredictConfig& base, TuneSpace& space);

TuneReport tune(const PredictConfig& base, const TuneSpace& space, Predictor& predictor, std::size_t top_n = 5);

// The gradsync-train options that apply a configuration's knobs.
std::string train_args(const PredictConfig& c);
Json tune_json(const TuneReport& r);
std::string tune_text(const TuneReport& r);

}  // namespace gradsync::netmodel
