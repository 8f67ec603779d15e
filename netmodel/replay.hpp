// gradsync/netmodel/replay.hpp — a recorded run's steps replayed through the model.
//
// compute=real: measured compute, measured buckets; the network part is modelled.
// "Compute" is everything local that the run timed: data loading, forward, backward,
// optimizer, the reducer's own per-step work (/steps/reducer_s: gradsync's bucket copies and
// launches; for PyTorch DDP the time from the end of communication to the optimizer), and
// the compressor's encode/decode kernels (the modelled per-bucket codec
// times are scaled so that their step total equals the measured encode_s + decode_s; where
// decode_s was not measured -- the PyTorch recorder with overlapping buckets, whose hooks
// decode in future callbacks -- the step total of the buckets' measured codec time
// (/buckets/codec_s: rank 0's time in the bucket outside its collectives), else the scale
// is encode_s (the hooks' synchronous part) over the modelled work before each bucket's
// first collective, and the codec's later work is priced at the same ratio; without those
// columns the device-rate estimates stay).
//
// Replay: every recorded step after warmup is simulated with that step's own compute and
// bucket ready times, and the prediction is the step whose predicted time is the median
// (a median of sums, as the measured step time is; the sum of the columns' medians is
// smaller by 3-8% for PyTorch runs on this 2-core host, whose slow steps are slow in every
// phase). With per-rank columns (/ranks, train_file.hpp) a step is the synchronous step of
// its ranks: rank r starts after its previous step's optimizer and reducer (o_r), its last
// bucket is ready o_r + pre_r after the last communication ended, so the all-reduce waits
// for the rank with the largest o_r + pre_r (the critical rank: its backward and rank 0's
// bucket ready times scaled to it); the step, timed as the slowest rank's (/steps/
// step_time_s), ends max_r(post_r - o_r) after the communication. Without /ranks the
// step's means stand for every rank. The row shows the median step whole (its parts add up).
//
// What-if (predict --from-run, compare --compute-from a run of another shape): the steps
// are priced under another configuration `c` than the one recorded -- other nodes x ranks
// per node, fabric, algorithm, chunk, channels, compressor or kernel rates. The compute is
// replayed as recorded: a shape that puts more ranks on a node's CPUs than the recorded run
// did does not slow it (on GPUs, one rank per device, it does not change). The codec:
// the recorded compressor keeps its measured scale (taken against the model's codec at the
// recorded rank count, then applied at c's); another compressor is modelled. Another
// accumulate K: the recorded micro-step's data wait and forward K times, K - 1 no_sync()
// backwards and the synchronized one (each kind's own time where /steps/backward_sync_s
// splits the recorded sum, else equal shares; netmodel/README.md). The wait for
// the slowest rank: the recorded steps hold it for the recorded p ranks; for P ranks the
// step waits (E[max of P] - E[max of p]) x sigma longer (shorter for P < p), sigma from how
// much later the critical rank is ready than the ranks' mean (the median over the steps with
// /ranks, = E[max of p] x sigma); StepResult::straggler_s. Without /ranks, no such term.
#pragma once

#include "netmodel/fabric.hpp"
#include "netmodel/predict.hpp"
#include "netmodel/timeline.hpp"
#include "netmodel/train_file.hpp"

namespace gradsync::netmodel {

// Predicts `run` priced under `c` (run.config itself for a plain compare; c.fabric and
// c.intra are resolved by the caller into `fabric`). With `ref` (compare --compute-from
// REF): the steps replayed are ref's -- its data, forward, backward, optimizer and reducer
// time, and each tensor's gradient ready time (by /model name: the ready time of the
// bucket it went to in ref, less how much earlier the tensor itself was ready there where ref
// records it, /model/tensor_ready_s, scaled with the step's backward) -- while the buckets are run's and the compressor, algorithm and shape
// c's. A bucket of run is ready when its last tensor is. The codec is modelled then (device
// or kernel rates), as no codec of run is measured. ref may have another shape than c (a
// what-if); both must be the same model. UsageError naming the file for what is missing.
StepResult replay_recorded(const TrainRun& run, const PredictConfig& c, const Fabric& fabric, Predictor& predictor,
                           const TrainRun* ref = nullptr);

// How many ranks a recorded run's rows hold per-rank columns for (/ranks), else its
// nnodes x ranks_per_node.
int recorded_ranks(const TrainRun& run);

}  // namespace gradsync::netmodel
