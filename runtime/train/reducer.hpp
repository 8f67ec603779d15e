// gradsync/train/reducer.hpp — the DDP-style gradient reducer: buckets, a communication
// thread, overlap of bucket all-reduces with backward.
//
// Buckets. Parameters are grouped in *reverse* forward order (the order backward produces
// their gradients) into buckets of at least `bucket_bytes`: plan::assign_buckets()
// (runtime/plan/buckets.hpp, shared with the model's step simulator) walks the
// tensors in that order and closes the current bucket as soon as its size reaches its limit
// (the tensor that crosses the limit stays in it). The first bucket formed — the one holding
// the last parameters, whose gradients are ready first — uses `first_bucket_bytes` (1 MiB by
// default) so communication starts early; all later ones use `bucket_bytes` (25 MiB). This
// is PyTorch DDP's steady-state layout: after its first iteration DDP rebuilds the buckets
// with compute_bucket_assignment_by_size over the parameters in gradient-ready order and
// limits {first_bucket_bytes, bucket_bytes}. (Before that rebuild, iteration 0 uses
// parameters in forward order, which puts the small bucket on the *first* parameters.)
//
// Ownership. The reducer owns one flat fp32 buffer per bucket; each parameter's gradient is
// a view into it (grad(i)), laid out in bucket order. Backward writes gradients there
// directly, so nothing is copied before or after the all-reduce; the optimizer reads the
// averaged gradients from the same views.
//
// Protocol of one optimizer step with K micro-steps (training thread):
//   for each micro-step:  begin_backward(t0, step, sync = last micro-step)
//                         backward calls mark_ready(i) once per tensor
//                         finish_backward()  -> records of the step when sync
// In a sync backward, a bucket is *ready* when its last gradient is marked, and buckets are
// *launched* in bucket order (bucket b+1 never starts before b) by pushing them on a queue
// that one communication thread pops, calling compressor.reduce() on the reducer's own
// communicator. With overlap off, all buckets are launched at finish_backward().
// finish_backward() waits for every bucket and rethrows any error of the communication
// thread. In a non-sync backward (no_sync, gradient accumulation) nothing is communicated.
//
// Mixed precision (see precision.hpp): with ReducerOptions::unscale != None, a sync step's
// begin_backward gets the reciprocal of the step's loss scale, and the communication
// thread unscales each bucket (x inv_scale) and checks it for inf/nan, inside the bucket's
// [start, end]: AfterReduce for the fp16/bf16 cast compressors (the scaled gradients are
// what travels in half, so small values survive the cast), BeforeReduce for every other
// compressor (it encodes the unscaled fp32 gradients; a bucket holding inf/nan is zeroed
// first, so no inf/nan reaches its error-feedback memory or the wire). finish_backward()
// reports this rank's verdict in StepComm::found_inf; the ranks must still agree on it.
//
// Devices (device/device.hpp): the buckets live in the memory of the reducer's Device.
// On the host the compressor reduces them in place on the host communicator. On a GPU the
// communication thread first waits for the bucket's gradients (Device::wait_produced: the
// compute stream's event), then either reduces it in place on the device communicator
// (NCCL, for compressors that accept device memory) or *stages* it: download into a host
// mirror, [unscale], compressor.reduce on the host communicator, [unscale], upload — all
// inside the bucket's [start, end]. Which path a run takes is decided once, at
// construction (staged()); the protocol above is the same for both.
//
// Threads: mark_ready/begin/finish are called from one training thread. The communication
// thread touches a bucket's buffer only between its launch and its completion, during
// which backward no longer writes it (its gradients are final).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algos/allreduce.hpp"
#include "comm/communicator.hpp"
#include "compress/compressor.hpp"
#include "device/device.hpp"
#include "models/zoo.hpp"

namespace gradsync::train {

// A backward's progress over the buckets (the reducer's, on every device): which
// gradients were marked ready, which buckets are complete, and which may be launched, in
// bucket order (as DDP: bucket b only after b - 1).
class BucketReadiness {
 public:
  BucketReadiness() = default;
  BucketReadiness(const std::vector<std::vector<std::size_t>>& assignment, std::size_t ntensors);
  void reset();  // a new backward: nothing marked, nothing launched
  // Tensor i's gradient is ready; true when it completes its bucket. `who` ("reducer")
  // starts the error for a tensor marked twice or unknown.
  bool mark(std::size_t i, const char* who);
  // The next bucket in bucket order if it is complete: b, and it counts as launched.
  bool pop_launchable(std::size_t& b);
  bool launchable() const { return next_ < complete_.size() && complete_[next_]; }
  std::size_t bucket_of(std::size_t i) const { return bucket_of_[i]; }
  std::size_t marked() const { return marked_count_; }

 private:
  std::vector<std::size_t> size_;       // per bucket: its tensors
  std::vector<std::size_t> bucket_of_;  // per tensor
  std::vector<std::uint8_t> marked_;    // per tensor
  std::vector<std::size_t> pending_;    // per bucket: tensors not yet ready
  std::vector<std::uint8_t> complete_;  // per bucket
  std::size_t next_ = 0, marked_count_ = 0;
};

// A bucket layout as text (limits, then each bucket's tensor range and bytes), for
// check_same_on_all_ranks; Reducer::layout().
std::string bucket_layout(std::int64_t bucket_bytes, std::int64_t first_bucket_bytes, std::size_t ntensors,
                          const std::vector<std::vector<std::size_t>>& assignment,
                          const std::vector<std::int64_t>& bytes_per_bucket);

// Where the reducer unscales gradients (mixed precision; see above).
enum class Unscale : std::uint8_t { None, AfterReduce, BeforeReduce };

struct ReducerOptions {
  std::int64_t bucket_bytes = 25LL << 20;
  std::int64_t first_bucket_bytes = 1LL << 20;
  bool overlap = true;
  Unscale unscale = Unscale::None;
  // Host buckets as registered shared buffers of the host communicator (comm/shared_buffer.hpp)
  // where its ranks share one node; else (or on a device) as the device allocates them.
  bool shared_buckets = false;
};

// One bucket's all-reduce in one step; times in seconds from the step start (t0).
struct BucketRecord {
  std::int64_t bytes = 0;
  double ready_s = 0, start_s = 0, end_s = 0;
  double codec_s = 0;  // the compressor's encode + decode time inside [start_s, end_s] (0 for none)
};

// What the communication of one synchronized step did.
struct StepComm {
  std::vector<BucketRecord> buckets;  // in bucket order
  CompressStats stats;                // summed over buckets
  double comm_busy_s = 0;             // sum over buckets of end - start
  // Reducer bookkeeping (both threads), not the reduce itself: wall time of the reducer's
  // own code, except bucket launches (waking the communication thread), which count their
  // thread CPU time; see launch_wall_s for their wall time.
  double overhead_s = 0;
  // Wall time of the bucket launches: on an oversubscribed machine it includes being
  // preempted by the communication thread that the launch woke up.
  double launch_wall_s = 0;
  // Mixed precision: a bucket held inf/nan on this rank (checked before unscaling), and
  // the time spent unscaling and checking (part of the buckets' end - start).
  bool found_inf = false;
  double unscale_s = 0;
};

// The communicators of a reducer. `host` (with `host_algo` built on it) reduces host-memory
// buckets and staged device buckets; `device` (with `device_algo`), when set, reduces device
// buckets in place (NCCL). Each should be used by nobody else while the reducer lives (the
// communication thread runs on them).
struct ReducerComms {
  Communicator* host = nullptr;
  AllreduceAlgorithm* host_algo = nullptr;
  Communicator* device = nullptr;
  AllreduceAlgorithm* device_algo = nullptr;
};

class Reducer {
 public:
  // Buckets in `dev`'s memory (not owned; outlives the reducer).
  Reducer(device::Device& dev, ReducerComms comms, Compressor& compressor, std::vector<models::TensorSpec> tensors,
          ReducerOptions opts);
  // Host memory: `comm` and `allreduce` as ReducerComms::host / host_algo.
  Reducer(Communicator& comm, AllreduceAlgorithm& allreduce, Compressor& compressor,
          std::vector<models::TensorSpec> tensors, ReducerOptions opts);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  std::size_t num_buckets() const { return views_.size(); }
  std::vector<std::int64_t> bucket_bytes() const;
  // The buckets are registered shared buffers (ReducerOptions::shared_buckets took effect).
  bool shared_buckets() const { return shared_buckets_; }
  const std::vector<std::vector<std::size_t>>& assignment() const { return assignment_; }
  // Gradient view of tensor i (forward order), numel elements inside its bucket, in the
  // device's memory.
  float* grad(std::size_t i) const { return grad_ptr_[i]; }
  // Device buckets reduced through a host mirror (see above); false on the host.
  bool staged() const { return staged_; }
  // The layout as text (limits, then each bucket's tensor range and bytes), for
  // check_same_on_all_ranks.
  std::string layout() const;

  // inv_scale: 1 / the step's loss scale (used by sync steps when unscale != None; must
  // be 1 otherwise).
  void begin_backward(double t0, std::int64_t step, bool sync, float inv_scale = 1.f);
  void mark_ready(std::size_t tensor);
  StepComm finish_backward();

 private:
  void launch_ready_buckets();  // training thread: push ready buckets in bucket order
  void timed_launch();          // the same, accounted in overhead (CPU) and launch_wall_s_
  void push(std::size_t b);
  void comm_loop();
  // Communication thread: unscale and check the working copy of bucket b (in `work`'s
  // memory); zero it when non-finite and `zero_bad`. Returns true when it held inf/nan.
  bool unscale_bucket(device::Device& work, std::size_t b, float inv_scale, bool zero_bad);
  // Communication thread: everything between a bucket's start and end (see above).
  void reduce_bucket(std::size_t b, std::int64_t step, float inv_scale, CompressStats& st, bool& bad,
                     double& unscale_s);

  device::Device& dev_;
  ReducerComms comms_;
  Compressor& compressor_;
  std::vector<models::TensorSpec> tensors_;
  ReducerOptions opts_;
  bool staged_ = false;

  std::vector<std::vector<std::size_t>> assignment_;
  std::vector<std::unique_ptr<device::Array>> storage_;  // one flat buffer per bucket, in dev_
  std::vector<std::unique_ptr<device::Array>> mirror_;   // staged: its host copy
  std::vector<BucketView> views_;                        // the working copies the compressor reduces
  std::vector<float*> grad_ptr_;                         // per tensor, into storage_
  bool shared_buckets_ = false;

  // Training-thread state of the current backward.
  double t0_ = 0;
  std::int64_t step_ = 0;
  bool sync_ = false;
  float inv_scale_ = 1.f;  // read by the communication thread under mu_
  bool in_backward_ = false;
  BucketReadiness readiness_;
  double train_overhead_s_ = 0;
  double launch_wall_s_ = 0;

  // Shared with the communication thread, guarded by mu_.
  std::mutex mu_;
  std::condition_variable cv_queue_, cv_done_;
  std::deque<std::size_t> queue_;
  std::size_t done_ = 0;
  std::vector<BucketRecord> records_;
  std::vector<CompressStats> stats_;
  double comm_overhead_s_ = 0;
  bool found_inf_ = false;
  double unscale_s_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gradsync::train
