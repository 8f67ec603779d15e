// gradsync/netmodel/timeline.hpp — one training step as a sequence of events.
//
// The simulator replays what a DDP-style reducer does in one step, on two streams:
//
//   compute:  [data (exposed part)] [forward] [backward: layers in reverse order] ... [optimizer]
//   comm:                                 [bucket 0][bucket 1]...[bucket B-1]
//
// * Gradients become ready in backward order (the reverse of forward order): a layer's
//   tensors are ready when that layer's backward ends.
// * DDP bucketing (torch.nn.parallel.DistributedDataParallel, reducer.cpp): tensors are
//   assigned in reverse order; the first bucket closes at --first-bucket-mb (default 1),
//   the others at --bucket-mb (default 25); a bucket closes when it reaches its limit and
//   the tensor that crosses the limit stays in it. Sizes count gradient bytes at fp32 (the
//   reducer holds fp32 gradients; fp16/bf16 precision casts at the wire) — assumption.
// * A bucket is ready when its last tensor is. It starts no earlier than it is ready and
//   than the previous bucket's communication ends (one comm stream, buckets in order);
//   with overlap off, no earlier than the end of backward. Its duration is its plan
//   (compress.hpp): encode, collectives, decode.
// * Step = exposed data + accumulate x forward + backward + max(0, last comm end -
//   backward end) + optimizer + the reducer's own work + the wait for the slowest rank
//   (ranks' compute and a hook's codec jitter; a synchronous step ends with its slowest rank).
//   comm_exposed = max(0, last comm end - backward end).
//   Gradient accumulation (accumulate = k > 1) runs k-1 micro-steps without sync first.
// * Data loading: each micro-step loads batch x data_time_s seconds of work. With 0 loader
//   workers it is serial with compute; with w workers it runs in the background w at a
//   time (prefetch) and only max(0, load/w - rest of the step) is exposed.
// * Shaped inter-node link (fabric.hpp, burst_bytes > 0, nodes > 1): each collective spends
//   tokens (the bytes one rank sends): the part the tokens at its start cover runs at the
//   peak, the rest at the sustained rate (and leaves the bucket empty); tokens refill at the
//   rate. The step is iterated to the steady state of the bucket across steps, so a step
//   whose traffic exceeds rate x (step time) settles where the link's rate sets its length.
// * Epoch = ceil(samples_per_epoch / (batch_per_rank x ranks x accumulate)) steps.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "netmodel/compress.hpp"
#include "netmodel/fabric.hpp"

namespace gradsync::netmodel {

// One gradient tensor in ready order, its ready time relative to the start of backward.
struct ReadyGrad {
  GradShape shape;
  double ready_s = 0;
};

// The computation side of a step, independent of the network.
struct Workload {
  std::string model;
  double forward_s = 0;   // one micro-step's (StepConfig::accumulate of them per step)
  double backward_s = 0;  // the synchronized (last) micro-step's
  // Each earlier micro-step's backward, with no communication beside it (a recorded run's
  // /steps/backward_sync_s splits the two); NaN: backward_s.
  double backward_nosync_s = std::numeric_limits<double>::quiet_NaN();
  double optimizer_s = 0;
  double data_s = 0;              // exposed data loading per step taken as measured (compare of
                                  // real-compute runs), on top of the modelled loading below
  std::vector<ReadyGrad> grads;   // ready order
  double parameters = 0;          // elements over all grads (the codec's working set follows it)
  // The reducer's own work per synchronized step (compute profile): per_step + per_bucket x
  // buckets, on the training thread, added to the step.
  double reducer_per_step_s = 0, reducer_per_bucket_s = 0;
  // Sigma of one rank's step time around the ranks' mean, as a fraction of its compute
  // (compute profile's rank_jitter): the step waits for the slowest rank (StepResult::straggler_s).
  double rank_jitter = 0;
  // The slowest rank's codec per bucket (compute profile's codec_wait_s, codec_wait_frac): a
  // bucket with a codec waits E[max of p std normals] x (codec_wait_s + codec_wait_frac x its
  // codec time) in its collective for the rank that encoded last (BucketTiming::comm_s).
  double codec_wait_s = 0, codec_wait_frac = 0;
  // A replayed run's wait for the slowest rank beyond what its recorded steps hold, added to
  // straggler_s: positive for more ranks than recorded, negative for fewer (replay.hpp).
  double rank_wait_s = 0;
  int64_t samples_per_epoch = 0;
};

// E[max of p independent standard normal variables]: 0 for p = 1, 1/sqrt(pi) for 2,
// 1.0294 for 4, 1.4236 for 8 (numerical integration; p >= 1).
double expected_max_std_normal(int p);

struct Bucket {
  std::vector<GradShape> tensors;
  int64_t grad_bytes = 0;  // at fp32
  double ready_s = 0;      // relative to backward start
  BucketPlan plan;
};

// DDP bucketing (see above). Bucket caps in MiB (1 MiB = 2^20 bytes, as DDP's bucket_cap_mb).
std::vector<Bucket> make_buckets(const std::vector<ReadyGrad>& grads, double bucket_mb, double first_bucket_mb);

struct NetConfig {
  int nodes = 1;
  int ranks_per_node = 1;
  std::string algo = "auto";
  double chunk_bytes = 0;
  int channels = 1;
  // The buckets are registered shared buffers (gradsync-train --buffers shared, its default,
  // on one node): shm reduces a plain fp32 bucket straight from the peers' buckets.
  bool registered_buckets = true;
};

struct StepConfig {
  int64_t batch_per_rank = 32;
  bool overlap = true;
  int accumulate = 1;
  int loader_workers = 4;
  double data_time_s = 0;  // per sample
  // Threads of a rank busy computing during backward, on average (0: unknown). With the
  // fabric's cores_per_node and no fitted contention, the CPU share gives the slowdown of
  // communication inside backward (backward_contention).
  double compute_threads = 0;
  // Backward's time was measured with no communication beside it (compare --compute-from a
  // no-overlap run): in an overlapping step, while a bucket is in flight inside backward,
  // backward gets the CPU share of its compute threads next to one communication thread
  // per rank, cpu_share(g (compute_threads + 1)) / cpu_share(g compute_threads) times its
  // time alone (g: ranks per node). Needs compute_threads and the fabric's cores_per_node.
  bool compute_shares_cpu = false;
  // With compute_shares_cpu: each rank's communication thread preempts compute (a real-time
  // policy, e.g. the PyTorch bridge's --comm-sched rr) instead of sharing the CPU. While a
  // bucket is in flight inside backward, that thread holds a core of the node's
  // cores_per_node, and the ranks' compute threads share the rest: backward runs
  // min(1, cores / (g c)) / min(1, (cores - g) / (g c)) times slower (c: compute_threads),
  // and stops while a bucket is in flight when no core is left (cores <= g), except for the
  // bucket's fitted contention (BucketTiming::contention_s: the communication thread waiting
  // for a core while compute holds it). Communication itself is not slowed by compute
  // otherwise (backward_contention's CPU share is 1).
  bool comm_preempts_compute = false;
  // The ranks that share one machine's CPUs and those CPUs (a train file's machine_ranks and
  // machine_cores: the namespace testbed runs its hosts on one machine); 0: each node is a
  // machine of its own, with ranks_per_node ranks and the fabric's cores_per_node.
  // A codec runs on its rank's CPU at the same time as the other ranks' (every rank encodes
  // the same bucket, then they meet in a collective), so with more such ranks than cores its
  // codec takes ceil(ranks / cores) times its time alone (codec_cpu_share).
  int machine_ranks = 0, machine_cores = 0;
  // The codec runs on a thread of its own beside backward's compute (gradsync-train's
  // reducer encodes on its communication thread), not in the compute thread (PyTorch's DDP
  // calls a hook on the autograd thread). With overlap, compute_threads and the cores known,
  // the part of a bucket's codec that falls inside backward then takes
  // ceil(ranks x (compute_threads + 1) / cores) times its time alone (the ranks' compute
  // threads and codec threads on the machine's cores; at least codec_cpu_share).
  bool codec_beside_compute = true;
};

struct BucketTiming {
  int64_t grad_bytes = 0;
  double wire_bytes = 0;
  int ntensors = 0;
  double ready_s = 0, start_s = 0, end_s = 0;  // relative to the step start
  double comm_s = 0;   // collectives only, with the wait for the slowest rank's codec (Workload::codec_wait_s)
  double codec_s = 0;  // encode + decode + casts
  double codec_wait_s = 0;  // of comm_s: the wait for the slowest rank's codec (Workload::codec_wait_s)
  double contention_s = 0;  // of comm_s: extra time of collectives that ran during backward (fabric contention)
};

struct StepResult {
  double data_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;  // the step's, over its micro-steps
  double backward_sync_s = 0;  // the synchronized (last) micro-step's backward, part of backward_s
  double comm_total_s = 0;    // sum of bucket durations
  double reducer_s = 0;       // the reducer's own work (Workload), part of the step
  // The wait for the slowest rank, part of the step: E[max of p std normals] x rank_jitter x
  // (forward + backward + optimizer); 0 for one rank or without a fitted jitter; plus a
  // replayed run's Workload::rank_wait_s; plus the wait for the slowest rank's codec,
  // E[max of p] x sum over buckets of codec_sigma x the bucket's codec time (BucketPlan::
  // codec_sigma: a PyTorch hook's codec varies from step to step and the step ends with the
  // slowest rank's; the buckets' variations taken as one, as the step's host state moves
  // them together).
  double straggler_s = 0;
  double comm_exposed_s = 0;
  double step_time_s = 0;
  int64_t steps_per_epoch = 0;
  double epoch_time_s = 0;
  double bytes_sent = 0;      // wire bytes contributed by one rank per step
  std::vector<BucketTiming> buckets;
};

// Runs the event simulation of one step.
// How much longer communication takes inside backward: the level's fitted `contention`
// when it has one (!= 1, or a contention_us); else, with compute_threads > 0 and the cores
// known, the CPU share: each rank's compute threads and one communication thread against
// the communication thread alone. The ranks and cores are the machine's when given
// (machine_ranks on machine_cores: StepConfig::machine_ranks, the namespace testbed's hosts
// on one machine), else the node's (ranks_per_node on the fabric's cores_per_node;
// fabric.hpp, Level::cpu_share); else 1. With comm_preempts
// (StepConfig::comm_preempts_compute) the unfitted share is 1.
double backward_contention(const Fabric& fabric, const NetConfig& net, double compute_threads,
                           bool comm_preempts = false, int machine_ranks = 0, int machine_cores = 0);

// How much longer backward takes while a bucket is in flight beside it, its compute
// measured alone (StepConfig::compute_shares_cpu): g ranks per node with compute_threads
// each, one communication thread per rank, sharing the fabric's cores_per_node (1 without
// it), or machine_ranks sharing machine_cores when given; with comm_preempts the
// communication threads take their cores first. Infinite when backward gets no core at all.
double backward_slowdown_in_flight(const Fabric& fabric, double ranks_per_node, double compute_threads,
                                   bool comm_preempts, int machine_ranks = 0, int machine_cores = 0);

// How much longer a bucket's codec takes than alone: ceil of the busy threads, the ranks of
// a machine (StepConfig::machine_ranks, else ranks_per_node) x threads_per_rank, over its
// cores (machine_cores, else the fabric's cores_per_node) when they are more, else 1; 1
// when the cores are not known.
double codec_cpu_share(const Fabric& fabric, const NetConfig& net, const StepConfig& st, double threads_per_rank = 1);

StepResult simulate_step(const Workload& w, const std::vector<Bucket>& buckets, const Fabric& fabric,
                         const NetConfig& net, const StepConfig& step, int64_t samples_per_epoch,
                         bool keep_buckets = true);

}  // namespace gradsync::netmodel
