#include "bench/collective.hpp"

#include <algorithm>
#include <functional>

#include "bench/ops.hpp"
#include "core/error.hpp"

namespace gradsync::bench {

namespace {

// "nccl" (the NCCL communicator's native call, --device cuda) is an algorithm of every
// operation: the collective calls the communicator it is given, which is then NCCL's.
std::vector<std::string> with_nccl(std::vector<std::string> names) {
  names.emplace_back("nccl");
  return names;
}

// One row per operation: its name, the algorithms it accepts, the default, and the factory.
// pingpong has no factory: it is a pair of point-to-point loops (pingpong.cpp).
struct OpEntry {
  std::string name;
  std::function<std::vector<std::string>()> algos;
  std::string default_algo;
  std::function<std::unique_ptr<Collective>(const CollectiveConfig&, Communicator&)> make;
};

const std::vector<OpEntry>& op_table() {
  static const std::vector<OpEntry> table = {
      {"allreduce", [] { return with_nccl(allreduce_names()); }, "auto", make_allreduce_op},
      {"reducescatter", [] { return std::vector<std::string>{"mpi", "ring", "nccl"}; }, "mpi", make_reducescatter_op},
      {"allgather", [] { return std::vector<std::string>{"mpi", "ring", "nccl"}; }, "mpi", make_allgather_op},
      {"alltoall", [] { return std::vector<std::string>{"mpi", "pairwise", "nccl"}; }, "mpi", make_alltoall_op},
      {"broadcast", [] { return std::vector<std::string>{"mpi", "binomial", "nccl"}; }, "mpi", make_broadcast_op},
      {"sendrecv", [] { return std::vector<std::string>{"mpi", "pieces"}; }, "mpi", make_sendrecv_op},
      {"pingpong", [] { return std::vector<std::string>{"mpi", "nccl"}; }, "mpi", nullptr},
  };
  return table;
}

const OpEntry& entry(const std::string& op) {
  for (const auto& e : op_table())
    if (e.name == op) return e;
  throw UsageError("option --op: unknown operation '" + op + "'");
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

const std::vector<std::string>& op_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& e : op_table()) n.push_back(e.name);
    return n;
  }();
  return names;
}

std::vector<std::string> algo_names_for(const std::string& op) { return entry(op).algos(); }

std::string default_algo(const std::string& op) { return entry(op).default_algo; }

void check_op_algo(const std::string& op, const std::string& algo) {
  const auto names = algo_names_for(op);
  for (const auto& n : names)
    if (n == algo) return;
  throw UsageError("option --algo: '" + algo + "' is not an algorithm for " + op + " (known: " + join(names) + ")");
}

std::unique_ptr<Collective> make_collective(const std::string& op, const CollectiveConfig& cfg, Communicator& comm) {
  const OpEntry& e = entry(op);
  GS_CHECK(e.make != nullptr, "operation ", op, " is not a collective");
  return e.make(cfg, comm);
}

// ---- input patterns ------------------------------------------------------------------------

float reduce_input(int r, std::size_t i, int n, DType t) {
  // Largest integer below which every integer is exact: 2^(mantissa bits + 1).
  const std::int64_t exact = t == DType::F32 ? (1 << 24) : t == DType::F16 ? 2048 : 256;
  const std::int64_t m = std::min<std::int64_t>(15, exact / n);
  if (m == 0) {
    // More ranks than exact integers: one rank contributes 1 per element, the rest 0.
    return (i + static_cast<std::size_t>(r)) % static_cast<std::size_t>(n) == 0 ? 1.f : 0.f;
  }
  return static_cast<float>((static_cast<std::uint64_t>(r) * 5 + i * 3 + 1) % static_cast<std::uint64_t>(m + 1));
}

float move_input(int r, std::size_t i) {
  return static_cast<float>((static_cast<std::uint64_t>(r) * 37 + i * 11 + 1) % 251);
}

float avg_of_sum(float sum, int n, DType t) {
  float v = sum * (1.0f / static_cast<float>(n));
  std::uint16_t h;
  switch (t) {
    case DType::F32: break;
    case DType::F16: h = f32_to_f16(v); v = f16_to_f32(h); break;
    case DType::BF16: h = f32_to_bf16(v); v = bf16_to_f32(h); break;
  }
  return v;
}

}  // namespace gradsync::bench
