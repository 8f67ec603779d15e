// gradsync/algos/allreduce.hpp — the registry of collective algorithms.
//
// Each algorithm is a unit of its own (ring.cpp, rd.cpp, ...) behind one shape: setup
// (buffers, peers, sub-communicators) in the constructor, only the hot loop in run().
// They are written over Communicator's point-to-point calls, so they run on any backend.
// "mpi" (the library's own MPI_Allreduce) is an entry too, so every measurement can be
// compared with the library's own, and "auto" picks one by size and rank count.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/dtype.hpp"

namespace gradsync {

struct AlgoOptions {
  // Pipelining chunk of ring-based algorithms (NCCL_BUFFSIZE analog), the piece size of rd's
  // and rabenseifner's exchanges, and the round size of shm.
  // 0: transport-aware default (see choose_chunk() in algorithms.hpp and ring.cpp's header).
  std::size_t chunk_bytes = 0;
  int channels = 1;  // concurrent rings on disjoint slices
};

// The chunk an algorithm runs with and why (recorded in result files and the log).
struct ChunkChoice {
  std::size_t bytes = 0;  // 0: the algorithm does not pipeline
  std::string reason;
};

class AllreduceAlgorithm {
 public:
  virtual ~AllreduceAlgorithm() = default;
  virtual std::string name() const = 0;
  // The algorithm actually used for a message of `bytes` (differs from name() for "auto").
  virtual std::string chosen(std::size_t bytes) const {
    (void)bytes;
    return name();
  }
  // The pipelining chunk it uses (for ranks' own links; the same on every rank for ring).
  virtual ChunkChoice chunk() const { return {}; }
  // Reduce `count` elements of `t` across all ranks of the communicator given at
  // construction. recvbuf == sendbuf means in place. Every rank calls with the same
  // count, type and op.
  virtual void run(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) = 0;
  // run(), ordered after a device event and returned as a request for the communicator's
  // wait() (`after`: see Communicator::iallreduce). The library's own all-reduce ("mpi")
  // hands the event to its communicator (NCCL: the collective follows the caller's kernels
  // on the device); every other algorithm runs on the host, completes here and refuses an
  // event.
  virtual Request start(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op,
                        const void* after);
};

// Names in registry order: ring, rd, rabenseifner, tree, hier, shm, mpi, auto.
const std::vector<std::string>& allreduce_names();
// Throws UsageError listing the known names for an unknown one.
std::unique_ptr<AllreduceAlgorithm> make_allreduce(const std::string& name, Communicator& comm,
                                                   const AlgoOptions& opts = {});
// Validates a name without a communicator (for option checking before any communication).
void check_allreduce_name(const std::string& name);

}  // namespace gradsync
