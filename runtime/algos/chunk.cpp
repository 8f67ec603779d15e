// chunk.cpp — the transport-aware pipelining chunk of ring-based algorithms.
//
// Purpose: out of the box, a pipelined algorithm should run at the line rate of what it runs
//   on; the chunk that does so depends on the transport, not on the message.
//
// Approach (the rule; the same answer on every rank, which chunked pipelines need):
//   1. --chunk-bytes (or GRADSYNC_CHUNK_BYTES) given: that, always.
//   2. ranks on several nodes (Open MPI's TCP BTL between them): the largest power of two that fits
//      under btl_tcp_eager_limit (read through MPI_T; 64 KiB by default -> 32 KiB chunks).
//      Above the eager limit every message waits for a rendezvous handshake (RTS, then
//      the receiver's ACK) before its payload moves; with a 4 MiB chunk that stalls the
//      pipeline once per chunk. Measured 2026-11-29 on the 2-host 1 Gbit/s testbed, one
//      TCP connection per peer: 32 KiB chunks 94-95% of the line rate, 4 MiB chunks
//      67-105 MB/s (54-84%).
//   3. all ranks on one node (shared-memory BTL): kShmChunkBytes. Large chunks use the BTL's
//      single-copy path; smaller ones keep the pipeline's slots in cache (see ring.cpp's
//      header for the measurements behind the value).
//   4. transport unknown (another backend): kDefaultChunkBytes, the NCCL_BUFFSIZE default.
//   The sizes and the eager-limit rule are plan/algos.hpp's (the model's tune reads them).
//   The answer depends only on placement and on the MPI library's settings, which are
//   the same on every rank of a job launched with one set of MCA parameters.
//
// Cost: one MPI_T read per process (cached).
// Use case: ring, and hier's inter-node ring, when --chunk-bytes is not given; rd and
//   rabenseifner cut their partner exchanges into pieces of this size (PieceExchange)
//   between nodes or when --chunk-bytes is given (choose_piece). On one node they send
//   whole messages: shared memory does not stall on them, and 4 MiB pieces measured slower
//   there (2026-12-02, 2 ranks, 16 MiB, 6 alternating repeats: rabenseifner 5.73 ms median
//   in pieces, 4.77 ms whole; rd 7.27 vs 7.76 ms over 3 repeats).
#include <string>

#include "algos/algorithms.hpp"
#include "core/units.hpp"
#include "plan/algos.hpp"

namespace gradsync {

using plan::kDefaultChunkBytes;
using plan::kShmChunkBytes;

ChunkChoice algos::choose_chunk(const Communicator& comm, const AlgoOptions& opts) {
  if (opts.chunk_bytes > 0) return {opts.chunk_bytes, "set (--chunk-bytes / GRADSYNC_CHUNK_BYTES)"};
  if (comm.node_count() > 1) {
    // Some neighbours are on other nodes: the network's eager limit rules. Any off-node
    // peer tells it (the limit is one MCA setting for the whole job).
    PeerLink net;
    for (int peer = 0; peer < comm.size() && net.kind != PeerLink::Kind::Network; ++peer) {
      const PeerLink link = comm.link_to(peer);
      if (link.kind == PeerLink::Kind::Network) net = link;
      if (link.kind == PeerLink::Kind::Unknown) break;
    }
    if (net.kind != PeerLink::Kind::Network) return {kDefaultChunkBytes, "transport unknown: NCCL_BUFFSIZE default"};
    const std::size_t eager = net.eager_limit > 0 ? net.eager_limit : plan::kTcpEagerLimitBytes;
    const std::size_t bytes = plan::chunk_below_eager_limit(eager);
    return {bytes, net.transport + " between nodes: largest power of two below the eager limit " +
                       format_bytes(static_cast<double>(eager)) + " (no rendezvous per chunk)"};
  }
  if (comm.size() > 1 && comm.link_to(comm.rank() == 0 ? 1 : 0).kind == PeerLink::Kind::SharedMemory)
    return {kShmChunkBytes, "one node, shared-memory transport"};
  return {kDefaultChunkBytes, "transport unknown: NCCL_BUFFSIZE default"};
}

ChunkChoice algos::choose_piece(const Communicator& comm, const AlgoOptions& opts) {
  if (opts.chunk_bytes > 0 || comm.node_count() > 1) return choose_chunk(comm, opts);
  return {0, "one node: whole exchanges (no rendezvous stall on shared memory)"};
}

}  // namespace gradsync
