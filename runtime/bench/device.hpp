// gradsync/bench/device.hpp — where the measured buffers live (--device).
//
//   cpu   host memory: the harness's own aligned buffers; no DeviceContext at all.
//   cuda  GPU memory (cudaMalloc), one GPU per rank (cuda/device.hpp). The harness still
//         fills and checks host buffers and copies them to and from the GPU outside the
//         timed region. Two ways to communicate:
//           --algo nccl  NcclCommunicator's native call on the device buffers;
//           any other    the host algorithm over MPI with host staging: each call copies
//                        its input device -> pinned host and its result back, inside the
//                        timed region (StagedCollective, cuda_device.cpp).
//         Every call returns after its GPU work completed, so host timers measure it all.
//
// The CUDA implementation (cuda_device.cpp) is compiled only where the CUDA libraries are
// linked (GRADSYNC_HAVE_CUDA); this interface has no CUDA types, so the harness and
// pingpong compile the same either way.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "bench/collective.hpp"
#include "bench/options.hpp"
#include "comm/communicator.hpp"

namespace gradsync::bench {

class DeviceContext {
 public:
  virtual ~DeviceContext() = default;

  // Lines for the table header (without the leading "# "), describing rank 0's view.
  virtual std::vector<std::string> header_lines(const BenchOptions& o) const = 0;
  // One line for the footer (memory footprint after the sweep), without "# ".
  virtual std::string footer_line() const = 0;
  // Appended to the `timing` attribute of the result file.
  virtual std::string timing_note(const BenchOptions& o) const = 0;

  // Device memory owned by the context (freed with it); at least 1 byte.
  virtual void* alloc(std::size_t bytes) = 0;
  // Synchronous copies (outside the timed region).
  virtual void upload(void* dev, const void* host, std::size_t bytes) = 0;
  virtual void download(void* host, const void* dev, std::size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;  // device to device

  // The collective of `op` on device buffers: for "nccl" over the NCCL communicator (made
  // on first use, collective over `world`), otherwise the host collective over `world`
  // wrapped in host staging. Collective over `world`.
  virtual std::unique_ptr<Collective> make_collective(const std::string& op, const CollectiveConfig& cfg,
                                                      Communicator& world) = 0;
  // The communicator pingpong uses on device buffers: NCCL for "nccl", else `world` with
  // host staging.
  virtual Communicator& p2p_comm(const std::string& algo, Communicator& world) = 0;
};

// --device cuda: every rank checks for a GPU; if any has none, throws NoCudaDeviceError
// on every rank, whose message is non-empty only on the lowest such rank ("no CUDA device
// found (rank r/n on host: <CUDA's reason>)"), so the job prints one line. Otherwise
// selects this rank's GPU. Collective over `world`. Defined only with GRADSYNC_HAVE_CUDA.
std::unique_ptr<DeviceContext> make_cuda_context(Communicator& world);

}  // namespace gradsync::bench
