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
std::unique_ptr<AllreduceAlgorithm> make_native(Communicator& comm, const AlgoOptions& opts);
std::unique_ptr<AllreduceAlgorithm> make_auto(Communicator& comm, const AlgoOptions& opts);

// Throws UsageError for chunk_bytes == 0 or channels outside [1, kMaxChannels].
void check_options(const AlgoOptions& opts);

}  // namespace gradsync::algos
