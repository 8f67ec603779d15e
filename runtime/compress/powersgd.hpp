// gradsync/compress/powersgd.hpp —
//   "powersgd:rank=R[,start=K][,min_rate=2][,warm_start=1][,error_feedback=1][,threads=1]"
// PowerSGD (Vogels et al., NeurIPS 2019) with the semantics of PyTorch DDP's
// torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.powerSGD_hook.
//
// Per bucket, at step >= start (before that: a plain fp32 all-reduce, as the hook's
// start_powerSGD_iter; our default start=10 suits short runs, PyTorch's is 1000):
//   * every tensor of >= 2 dimensions is viewed as a row-major matrix M (n = shape[0],
//     m = the rest); with r = min(n, m, R) it is compressed only if
//     (n + m) * r * min_rate < n * m. Everything else (1-D tensors, small matrices, and any
//     bucket element no tensor covers) is all-reduced uncompressed, as one batch.
//   * error feedback: bucket += memory; the hook keeps a copy of the bucket (input_tensor_cp)
//   * P = M Q                      (Q: m x r, kept across steps with warm_start=1)
//     all-reduce(Sum) of all P's of the bucket in one message (plus the uncompressed batch)
//     orthogonalize each P (Gram-Schmidt on its columns; a zero column stays zero)
//     Q = M^T P;  all-reduce(Sum) of all Q's in one message;  Q /= p
//     M ~ P Q^T                    (written over the bucket: the average's approximation)
//     uncompressed batch /= p
//   * memory = copy - bucket       (over the whole bucket, as the hook does)
// Q is initialised once per bucket (every step with warm_start=0) from a standard normal
// drawn from a counter-based stream of the seed alone, so all ranks start from the same Q.
//
// No copy of the bucket is kept: until decompress the bucket itself holds the step's input
// (bucket + memory; only P, Q and the packed uncompressed batch are all-reduced), so
// decompress computes memory = M - P Q^T and the bucket = P Q^T in one pass per row
// (kernels::powersgd_expand), and the uncompressed batch's memory = bucket - batch / p
// before the average is unpacked. The values are the hook's; products are summed in the
// fixed orders of kernels/cpu_powersgd.cpp (so the CPU ISAs and threads=T agree bit for bit).
//
// Memory: one path for host and device buckets. Every operation on the bucket and on P, Q,
// the packed batch and the memory goes through the bucket's BucketKernels
// (compress/bucket_kernels.hpp: the compressor's own host kernels for host buckets, the
// device's for buckets reduced in place on a GPU: cuBLAS products, Gram-Schmidt and the
// element-wise passes on the device), and that state lives in the same memory
// (BucketKernels::state), so accepts_device_memory() is true. Only the initial random Q
// is drawn on the host and uploaded. On a GPU the products are summed in cuBLAS's orders
// and Gram-Schmidt in double: the host's values within rounding.
//
// threads=T (default 1): the matrices of a bucket are independent in every phase, so each
// phase splits them (contiguous runs of matrices, balanced by elements) over T threads: the
// caller and T - 1 workers owned by the compressor. Results do not depend on T. The default
// is 1 because in training the codec runs on the communication thread while backward
// computes on the host's cores (emulated and host compute); a second codec thread takes
// a core from backward. Ask for threads=2 when the cores are otherwise idle (CUDA compute,
// or a host with more cores than ranks x compute threads). Device buckets run their
// matrices in order on the communication thread's stream (threads only split host work).
// Stats: compressed = 4 * (|P| + |Q| + |uncompressed|) bytes, collective "allreduce",
// compressed = false on the plain steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "compress/bucket_kernels.hpp"
#include "compress/compressor.hpp"

namespace gradsync::compress_detail {

struct PowerSgdOptions {
  int rank = 1;             // R
  std::int64_t start = 10;  // first compressed step
  double min_rate = 2.0;    // compress a matrix only if it shrinks by more than this
  bool warm_start = true;   // keep Q across steps
  bool error_feedback = true;
  int threads = 1;          // threads per phase (the caller + threads - 1 workers)
};

class PowerSgdCompressor final : public Compressor {
 public:
  PowerSgdCompressor(const PowerSgdOptions& opts, std::uint64_t seed);
  ~PowerSgdCompressor() override;
  PowerSgdCompressor(PowerSgdCompressor&&) noexcept;
  PowerSgdCompressor& operator=(PowerSgdCompressor&&) noexcept;
  std::string spec() const override;
  void reduce(Communicator& comm, AllreduceAlgorithm& allreduce, BucketView& bucket, std::int64_t step,
              CompressStats& stats) override;
  bool accepts_device_memory() const override { return true; }

  // Which parts of a bucket are compressed and where their P and Q live.
  struct Matrix {
    std::size_t offset = 0;  // in the bucket (elements)
    std::int64_t rows = 0, cols = 0;
    int rank = 0;
    std::size_t p_offset = 0, q_offset = 0;  // in the batched P (rows x rank) / Q (cols x rank), column-major
  };
  struct Span {
    std::size_t offset = 0, count = 0;
  };
  struct Plan {
    std::vector<Matrix> matrices;  // compressed, in bucket order
    std::vector<Span> plain;       // everything else, in bucket order
    std::size_t p_size = 0, q_size = 0, plain_size = 0;
  };
  static Plan make_plan(const BucketView& bucket, int rank, double min_rate);
  // Thread t of `threads` takes matrices [first[t], first[t + 1]): contiguous runs with about
  // equal elements (size threads + 1; a run may be empty).
  static std::vector<std::size_t> split_matrices(const Plan& plan, int threads);

  // ---- the phases of one compressed step, callable without a communicator --------------
  // 1. error feedback in (bucket += memory), Q (initialised if needed), P = M Q, and the
  //    uncompressed batch packed: after it, p_buffer() and plain_buffer() are to be summed.
  //    The bucket keeps this step's input until decompress.
  void compute_p(BucketView& bucket, std::int64_t step);
  // 2. orthogonalise the summed P's, Q = M^T P: after it, q_buffer() is to be summed.
  void compute_q(BucketView& bucket);
  // 3. Q /= world; memory = M - P Q^T and M = P Q^T; memory = input - batch / world and
  //    the batch / world unpacked, for the uncompressed rest.
  void decompress(BucketView& bucket, int world);

  // The batched P, Q and uncompressed batch of a bucket, in the bucket's memory (host
  // memory for host buckets: tests and tools read and write them between the phases).
  std::span<float> p_buffer(int bucket) { return {state(bucket).p, state(bucket).plan.p_size}; }
  std::span<float> q_buffer(int bucket) { return {state(bucket).q, state(bucket).plan.q_size}; }
  std::span<float> plain_buffer(int bucket) { return {state(bucket).plain, state(bucket).plan.plain_size}; }
  const Plan& plan(int bucket) { return state(bucket).plan; }
  const PowerSgdOptions& options() const { return opts_; }

  // The random Q of a bucket (all its matrices, batched): standard normal (Box-Muller over
  // the counter-based stream of (seed, bucket, epoch)); epoch is 0 with warm start, else the step.
  static void random_q(std::uint64_t seed, int bucket, std::int64_t epoch, float* q, std::size_t count);
  // Modified Gram-Schmidt on the columns of a column-major rows x cols matrix.
  static void orthogonalize(float* p, std::int64_t rows, int cols);

 private:
  struct State {
    Plan plan;
    std::vector<std::size_t> split;  // split_matrices(plan, threads)
    std::size_t count = 0;
    BucketKernels* kernels = nullptr;  // whose memory p, q, plain and memory are in
    float* p = nullptr;                // plan.p_size floats (BucketKernels::state)
    float* q = nullptr;                // plan.q_size
    float* plain = nullptr;            // plan.plain_size
    float* memory = nullptr;           // count floats, with error feedback (made at the first compute_p)
    bool q_ready = false;
  };
  class Workers;  // the threads - 1 worker threads (powersgd.cpp)
  State& state(int bucket);
  State& state_for(const BucketView& bucket);
  // fn(mat) for every matrix of s: on host memory the runs of s.split on the caller and
  // the workers, on a device in order on the calling thread.
  template <class Fn>
  void for_each_matrix(const State& s, const Fn& fn);

  PowerSgdOptions opts_;
  std::uint64_t seed_;
  std::unique_ptr<BucketKernels> host_;          // the kernels of host buckets
  std::uint64_t owner_ = 0;                      // this compressor's BucketKernels::state owner
  std::map<int, State> states_;
  std::vector<float> q_init_;                    // the random Q, drawn on the host
  std::unique_ptr<Workers> workers_;  // null with threads=1
};

}  // namespace gradsync::compress_detail
