// gradsync/plan/algos.hpp — all-reduce algorithm names and the rules that resolve "auto"
// (gradsync's default) and "mpi" (Open MPI's tuned decision) to a concrete algorithm.
//
// Purpose: the runtime (runtime/algos/auto.cpp) and the model (netmodel/collectives.cpp)
//   must pick the same algorithm for the same bucket on the same cluster shape; this is the
//   one place that decides.
// Approach: a fixed decision table on (bytes, shape), evaluated identically on every rank:
//     one node of several ranks with a shared window:
//       bytes <= 64 KiB -> mpi (Open MPI's shared-memory collectives answer in well under
//       a microsecond), larger -> shm (each byte copied once into the window, summed once)
//     otherwise:
//     bytes <= 64 KiB                                      -> rd            lg p rounds
//     several nodes, equal ranks per node, more than one   -> hier          bytes stay on the node
//     bytes <= 1 MiB                                       -> rabenseifner  2 lg p rounds, 2n(p-1)/p bytes
//     larger                                               -> ring          bandwidth-optimal, pipelined
//   The 64 KiB bound is where n beta starts to rival the alpha terms on the fabrics we model
//   (alpha ~ 1-50 us, beta ~ 0.1-1 ns/byte); the 1 MiB bound is where the ring's 2 (p-1)
//   alphas become negligible. "mpi" follows ompi_coll_tuned_allreduce_intra_dec_fixed
//   before 4.0: recursive doubling below 10,000 bytes, ring above.
// Cost: O(1) per decision.
// Use case: runtime auto's pick(bytes), the model's resolve_algo, the parity tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gradsync::plan {

// The cluster shape a decision depends on. `uniform`: every node holds ranks_per_node
// ranks (the runtime learns it collectively; the model's topologies always are).
// `shm`: the ranks of one node can map an MPI-3 shared window (the runtime asks the
// communicator; the model assumes it on one node).
struct Shape {
  int nodes = 1;
  int ranks_per_node = 1;
  bool uniform = true;
  bool shm = false;
};

constexpr std::uint64_t kAutoSmallBytes = std::uint64_t{64} << 10;   // rd up to here
constexpr std::uint64_t kAutoMediumBytes = std::uint64_t{1} << 20;   // rabenseifner up to here
constexpr std::uint64_t kMpiRdBytes = 10000;                         // Open MPI < 4.0: rd below

// Pipelining depth of the chunked algorithms (ring, hier's rings, the bench's ring
// reduce-scatter and all-gather): chunks that may be in flight per peer and channel (the
// NCCL_STEPS analog), at least kPipelineSlots and enough for kInFlightBytes, so that small
// chunks (32 KiB below the TCP eager limit) still keep 1 MiB posted, which the sockets go on
// moving while a rank is descheduled (Open MPI's TCP BTL progresses only inside MPI calls).
// The runtime posts that many (runtime/algos/ring.cpp); the model prices a chunked step's
// per-message latency as overlapped by as many (netmodel/collectives.cpp).
inline constexpr std::size_t kPipelineSlots = 4;
inline constexpr std::size_t kInFlightBytes = std::size_t{1} << 20;
inline constexpr std::size_t kMaxPipelineSlots = 64;
inline constexpr std::size_t pipeline_slots(std::size_t chunk_bytes) {
  const std::size_t want = kInFlightBytes / (chunk_bytes > 0 ? chunk_bytes : 1);
  return want < kPipelineSlots ? kPipelineSlots : (want > kMaxPipelineSlots ? kMaxPipelineSlots : want);
}

// The transport-aware pipelining chunk (the rule; runtime/algos/chunk.cpp applies it with
// what MPI reports, netmodel/tune.cpp with Open MPI's defaults):
//   between nodes over a network transport: the largest power of two that fits under its
//     eager limit less a header reserve (64 KiB, Open MPI's btl_tcp_eager_limit, -> 32 KiB),
//     so that no chunk waits for a rendezvous handshake;
//   one node over shared memory, or an unknown transport: 4 MiB (NCCL_BUFFSIZE's default).
inline constexpr std::size_t kDefaultChunkBytes = std::size_t{4} << 20;
inline constexpr std::size_t kShmChunkBytes = std::size_t{4} << 20;
// shm's round (runtime/algos/shm.cpp) when --chunk-bytes is not given: p copies of a round
// stay in the last-level cache.
inline constexpr std::size_t kShmRoundBytes = std::size_t{4} << 20;
// shm reads its peers' buffers in place (no copy-in; comm/shared_buffer.hpp) from this
// size on, when every rank's buffers are registered: below it the exchange of where they
// are (one more barrier) and the closing barrier cost more than the copies they save.
inline constexpr std::size_t kShmZeroCopyMinBytes = std::size_t{256} << 10;
// --buffers (gradsync-bench, gradsync-train, gradsync-model): "shared" (registered shared
// buffers: true) or "private" (false); UsageError naming the option otherwise.
bool parse_buffers(const std::string& text);
inline constexpr std::size_t kTcpEagerLimitBytes = std::size_t{64} << 10;  // Open MPI's default
inline constexpr std::size_t kEagerHeaderReserve = 256;  // the BTL's match header (~30 bytes)
inline constexpr std::size_t chunk_below_eager_limit(std::size_t eager_limit) {
  const std::size_t room = (eager_limit > 2 * kEagerHeaderReserve ? eager_limit : 2 * kEagerHeaderReserve) -
                           kEagerHeaderReserve;
  std::size_t q = 1;
  while (q * 2 <= room) q *= 2;
  return q;
}
// The chunk gradsync's runtime picks by default on `nodes` nodes of Open MPI (TCP between
// nodes, shared memory on one), as the model assumes it.
inline constexpr std::size_t default_chunk_bytes(int nodes) {
  return nodes > 1 ? chunk_below_eager_limit(kTcpEagerLimitBytes) : kShmChunkBytes;
}

// The chunk (or piece) an all-reduce algorithm runs with on `nodes` nodes of Open MPI when
// --chunk-bytes is `given` (0: not given): what the runtime's AllreduceAlgorithm::chunk()
// reports, gradsync-train records as chunk_bytes_used, the compressors' ring all-gather uses
// and the model prices (tests/plan checks it against the runtime's algorithms).
//   ring, tree, hier, auto: given, else default_chunk_bytes(nodes);
//   shm: given, else its kShmRoundBytes round on one node (on several it runs the ring);
//   rd, rabenseifner: pieces of given, else default_chunk_bytes between nodes; on one node
//     whole exchanges (0);
//   mpi: the library's own call, whole (0), whatever is given.
// Names outside the runtime's (the model's dbtree, nccl): given.
std::size_t chunk_used(const std::string& algo, int nodes, std::size_t given);

// The runtime's all-reduce algorithms, in the order users see them:
// ring, rd, rabenseifner, tree, hier, shm, mpi, auto.
const std::vector<std::string>& allreduce_names();
bool is_allreduce_name(const std::string& name);
// "a, b, c" of allreduce_names() for error messages.
std::string allreduce_names_text();

// Whether auto uses hier at all on this shape (the runtime builds hier's sub-communicators
// only then).
bool auto_uses_hier(const Shape& s);
// Whether auto runs the one-node rule (mpi / shm).
bool auto_uses_shm(const Shape& s);
// The algorithm auto runs for a message of `bytes` on shape `s`: mpi or shm on one node
// with a shared window, else rd, hier, rabenseifner or ring.
const char* auto_allreduce(std::uint64_t bytes, const Shape& s);
// The algorithm Open MPI's fixed rule runs ("mpi"): rd or ring.
const char* mpi_allreduce(std::uint64_t bytes);
// `algo` resolved for one all-reduce: auto and mpi by the rules above, others themselves.
std::string resolve_allreduce(const std::string& algo, std::uint64_t bytes, const Shape& s);

}  // namespace gradsync::plan
