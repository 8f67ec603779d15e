// gradsync/compress/collectives.hpp — what the compressors need around the communicator:
// collectives ordered after their kernels, byte-blob all-gather / all-to-all, and the
// estimates of bytes sent that CompressStats records.
//
// Blobs: the Communicator's native collectives are typed (F32/F16/BF16). Compressed
// messages are bytes (codes, packed signs, int32 indices next to fp32 values), so they are
// padded to a multiple of 4 bytes and moved as F32 words: the collective copies bit
// patterns and never does arithmetic on them.
//
// The all-gathers of a host-memory bucket over MPI run gradsync's ring all-gather
// (algos/ring.hpp) in the chunk of the user's all-reduce algorithm, the one the model
// prices (netmodel/collectives.cpp): between hosts over TCP, Open MPI's MPI_Allgather moves
// whole blocks, which stall on the rendezvous as whole all-reduce segments did (README
// "Transport-aware chunk"). With `--algo mpi` (the library's own collectives throughout) and
// for device memory (the collective follows the encode's device event) the communicator's.
//
// Wire bytes (per rank, all rounds), for the results file and the cost model:
//   all-reduce of B bytes: the algorithm actually used decides (same estimate as none.cpp):
//     ceil(log2 p) * B for recursive doubling, else 2 (p-1)/p * B (ring, Rabenseifner,
//     tree/hier averaged over ranks, and what a ring-like MPI_Allreduce sends);
//   all-gather of B bytes per rank: (p-1) * B (ring / Bruck: every other block passes once);
//   all-to-all of B bytes per peer: (p-1) * B.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "algos/allreduce.hpp"
#include "algos/ring.hpp"
#include "comm/communicator.hpp"
#include "compress/bucket_kernels.hpp"
#include "compress/compressor.hpp"
#include "core/error.hpp"

namespace gradsync::compress_detail {

inline std::size_t pad4(std::size_t bytes) { return (bytes + 3) & ~std::size_t{3}; }

// Every collective of a compressor follows the kernels it launched on the bucket's memory
// (BucketKernels::ready(): on a device an event the communicator orders its collective
// after, so the host does not wait for the encode; on the host null, the kernels are done)
// and returns once complete (Communicator::wait: the one wait loop and its time-out).

// count elements of t per rank; recv holds p * count, block r from rank r.
inline void allgather_after(Communicator& comm, BucketKernels& k, const void* send, void* recv, std::size_t count,
                            DType t) {
  Request r = comm.iallgather(send, recv, count, t, k.ready());
  comm.wait(r);
}

// A compressor's all-gathers (see the top of this file). One per compressor: its RingBlocks
// keeps the ring's layout and workspace across calls, so it serves one reduce() at a time,
// as the compressor's own scratch does.
class BlockAllgather {
 public:
  // count elements of t per rank; recv holds p * count, block r from rank r. `bucket`: the
  // bucket the blocks belong to (its memory kind decides the path).
  void run(Communicator& comm, AllreduceAlgorithm& algo, const BucketView& bucket, BucketKernels& k,
           const void* send, void* recv, std::size_t count, DType t) {
    if (bucket.kernels != nullptr || comm.backend() != "mpi" || algo.name() == "mpi" || comm.size() == 1) {
      allgather_after(comm, k, send, recv, count, t);
      return;
    }
    ring_.allgather(comm, send, recv, count, t, algo.chunk().bytes, algos::kTagBlockAllgather);
  }

  // Bytes (a multiple of 4, moved as F32 words: see the top of this file).
  void bytes(Communicator& comm, AllreduceAlgorithm& algo, const BucketView& bucket, BucketKernels& k,
             const void* send, void* recv, std::size_t bytes_per_rank) {
    GS_CHECK(bytes_per_rank % 4 == 0, "a compressor all-gathers whole 4-byte words, got ", bytes_per_rank);
    run(comm, algo, bucket, k, send, recv, bytes_per_rank / 4, DType::F32);
  }

 private:
  RingBlocks ring_;
};

// send and recv hold p * bytes_per_peer; send block j goes to rank j, recv block i came from rank i.
inline void alltoall_bytes(Communicator& comm, BucketKernels& k, const void* send, void* recv,
                           std::size_t bytes_per_peer) {
  GS_CHECK(bytes_per_peer % 4 == 0, "alltoall_bytes needs whole 4-byte words, got ", bytes_per_peer);
  Request r = comm.ialltoall(send, recv, bytes_per_peer / 4, DType::F32, k.ready());
  comm.wait(r);
}

// In-place all-reduce of buf with the user's algorithm (AllreduceAlgorithm::start).
inline void allreduce_after(Communicator& comm, AllreduceAlgorithm& algo, BucketKernels& k, void* buf,
                            std::size_t count, DType t, RedOp op) {
  if (count == 0) return;
  Request r = algo.start(buf, buf, count, t, op, k.ready());
  comm.wait(r);
}

inline std::uint64_t allreduce_wire_bytes(const AllreduceAlgorithm& algo, std::uint64_t bytes, int p) {
  if (p <= 1 || bytes == 0) return 0;
  if (algo.chosen(bytes) == "rd")
    return static_cast<std::uint64_t>(std::ceil(std::log2(static_cast<double>(p)))) * bytes;
  return static_cast<std::uint64_t>(
      std::llround(2.0 * static_cast<double>(p - 1) / static_cast<double>(p) * static_cast<double>(bytes)));
}

inline std::uint64_t allgather_wire_bytes(std::uint64_t bytes_per_rank, int p) {
  return p <= 1 ? 0 : static_cast<std::uint64_t>(p - 1) * bytes_per_rank;
}

inline std::uint64_t alltoall_wire_bytes(std::uint64_t bytes_per_peer, int p) {
  return p <= 1 ? 0 : static_cast<std::uint64_t>(p - 1) * bytes_per_peer;
}

}  // namespace gradsync::compress_detail
