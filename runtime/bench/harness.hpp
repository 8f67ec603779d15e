// gradsync/bench/harness.hpp — the part of the benchmark that is the same for every
// operation: buffers, data, the timing loop, checking (nccl-tests' common.cu, in small).
//
// Per size and per mode (out of place, then in place):
//   1. fill: the send buffer with the collective's input, receive buffers with a sentinel
//      (-1, never a valid result) so an operation that writes nothing is caught;
//   2. warm-up iterations, then timed iterations. Each iteration: (in place: copy the input
//      back into the buffer) - barrier - time one call on every rank. The iteration's time
//      is the slowest rank's (max over ranks, gathered after the loop);
//   3. with checking on: count wrong elements of the last iteration's result on every rank
//      (out of place also counts changed send-buffer elements) and sum over ranks.
// Timing each call between barriers (instead of back to back as nccl-tests) gives raw
// per-iteration values for the cost model; the barrier's exit skew (a few us) is included.
//
// With --busy-threads N, N threads per rank spin on the CPU from the first size's warm-up
// to the end of the last size (busy.hpp), in run_collective and run_pingpong alike.
//
// With a DeviceContext (--device cuda) the calls get device buffers of the same sizes: the
// host buffers are still filled and checked, and copied to / from the device around the
// timed loop; the in-place input is restored by a device-to-device copy (untimed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/collective.hpp"
#include "bench/device.hpp"
#include "bench/options.hpp"
#include "comm/communicator.hpp"
#include "comm/shared_buffer.hpp"

namespace gradsync::bench {

struct PhaseResult {
  std::vector<double> time_us;  // per timed iteration: the slowest rank's time
  double time_us_avg = 0;
  double algbw_GBps = 0;
  double busbw_GBps = 0;        // pingpong: bw = size / half round trip
  std::int64_t nwrong = -1;     // summed over ranks; -1 when not checked
};

struct SizeResult {
  std::int64_t size_bytes = 0;
  std::int64_t count = 0;
  PhaseResult oop;  // pingpong: the half round trips
  PhaseResult ip;   // unused by pingpong
  std::string algo_used;
};

// Called on every rank after each size (rank 0 prints the row: rows are the progress).
using RowCallback = std::function<void(const SizeResult&)>;

// Runs the sweep of `o` for `coll`. Collective over `comm` (barriers and the max / sum over
// ranks; a host communicator). `device`: null for host buffers.
std::vector<SizeResult> run_collective(const BenchOptions& o, Communicator& comm, Collective& coll,
                                       const RowCallback& on_row, DeviceContext* device = nullptr);

// Ping-pong between ranks 0 and 1 (pingpong.cpp). Collective over `comm` (2 ranks); with a
// device, the transfers use device->p2p_comm(o.algo, comm) on device buffers.
std::vector<SizeResult> run_pingpong(const BenchOptions& o, Communicator& comm, const RowCallback& on_row,
                                     DeviceContext* device = nullptr);

// A 64-byte aligned, uninitialised byte buffer. Allocation failure is a gradsync::Error
// naming the rank, the host and the size.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t bytes);
  // In the node's shared memory, registered with comm (--buffers shared). Collective.
  Buffer(Communicator& comm, std::size_t bytes);
  void* data() { return shared_ ? shared_->data() : ptr_.get(); }
  const void* data() const { return shared_ ? shared_->data() : ptr_.get(); }
  std::size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte[], Free> ptr_;
  std::unique_ptr<SharedBuffer> shared_;
  std::size_t bytes_ = 0;
};

// --off-cache: one ordinary store per cache line of `flush` (not memset, which may stream
// past the cache), so the caches hold it instead of the buffers the next call uses.
void evict_caches(Buffer& flush, int iteration);

// Bandwidth in GB/s (1e9 bytes per second, as nccl-tests) of `bytes` in `time_us`.
inline double gbps(double bytes, double time_us) { return time_us > 0 ? bytes / time_us / 1e3 : 0.0; }

}  // namespace gradsync::bench
