// gradsync/bench/ops.hpp — the factories of the per-operation definitions (op_*.cpp),
// used only by the operation table in collective.cpp.
#pragma once

#include <memory>

#include "bench/collective.hpp"

namespace gradsync::bench {

std::unique_ptr<Collective> make_allreduce_op(const CollectiveConfig& cfg, Communicator& comm);
std::unique_ptr<Collective> make_reducescatter_op(const CollectiveConfig& cfg, Communicator& comm);
std::unique_ptr<Collective> make_allgather_op(const CollectiveConfig& cfg, Communicator& comm);
std::unique_ptr<Collective> make_alltoall_op(const CollectiveConfig& cfg, Communicator& comm);
std::unique_ptr<Collective> make_broadcast_op(const CollectiveConfig& cfg, Communicator& comm);
std::unique_ptr<Collective> make_sendrecv_op(const CollectiveConfig& cfg, Communicator& comm);

}  // namespace gradsync::bench
