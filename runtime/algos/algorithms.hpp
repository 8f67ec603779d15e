// gradsync/algos/algorithms.hpp — one factory per algorithm unit. The registry
// (registry.cpp) maps names to these; "auto" and "hier" compose them. Each factory does the
// algorithm's setup (peers, sub-communicators) and may communicate: call it on all ranks.
#pragma once

#include <memory>

#include "algos/allreduce.hpp"

namespace gradsync::algos {

std::unique_ptr<AllreduceAlgorithm> make_ring(Communicator& comm, const AlgoOptions& opts);
std::unique_ptr<AllreduceAlgorithm> make_recursive_doubling(Communicator& comm, const AlgoOptions& opts);
std::unique_ptr<AllreduceAlgorithm> make_rabenseifner(Communicator& comm, const AlgoOptions& opts);
std::unique_ptr<AllreduceAlgorithm> make_tree(Communicator& comm, const AlgoOptions& opts);
std::unique_ptr<AllreduceAlgorithm> make_hierarchical(Communicator& comm, const AlgoOptions& opts);
std::unique_ptr<AllreduceAlgorithm> make_shared_memory(Communicator& comm, const AlgoOptions& opts);
std::unique_ptr<AllreduceAlgorithm> make_native(Communicator& comm, const AlgoOptions& opts);
std::unique_ptr<AllreduceAlgorithm> make_auto(Communicator& comm, const AlgoOptions& opts);

// Throws UsageError for channels outside [1, kMaxChannels].
void check_options(const AlgoOptions& opts);

// The pipelining chunk for an algorithm on `comm` (chunk.cpp): opts.chunk_bytes when set,
// else from the transport between its nodes. Depends only on the node count and the MPI
// library's settings, so every rank computes the same value (the pipelined algorithms
// need that: all ranks must cut segments into the same chunks).
ChunkChoice choose_chunk(const Communicator& comm, const AlgoOptions& opts);

// The piece size of rd's and rabenseifner's partner exchanges (chunk.cpp): choose_chunk's
// when --chunk-bytes is set or the ranks span several nodes (whole messages above the TCP
// eager limit stall on the rendezvous); on one node 0, whole exchanges.
ChunkChoice choose_piece(const Communicator& comm, const AlgoOptions& opts);

}  // namespace gradsync::algos
