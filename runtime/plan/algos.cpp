// gradsync/plan/algos.cpp — see algos.hpp.
#include "plan/algos.hpp"

#include "core/error.hpp"

namespace gradsync::plan {

bool parse_buffers(const std::string& text) {
  GS_USAGE_CHECK(text == "shared" || text == "private", "option --buffers: unknown value '", text,
                 "' (known: shared, private)");
  return text == "shared";
}

const std::vector<std::string>& allreduce_names() {
  static const std::vector<std::string> names = {"ring", "rd", "rabenseifner", "tree", "hier", "shm", "mpi", "auto"};
  return names;
}

bool is_allreduce_name(const std::string& name) {
  for (const auto& n : allreduce_names())
    if (n == name) return true;
  return false;
}

std::string allreduce_names_text() {
  std::string s;
  for (const auto& n : allreduce_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::size_t chunk_used(const std::string& algo, int nodes, std::size_t given) {
  if (algo == "mpi") return 0;
  if (!is_allreduce_name(algo) || given > 0) return given;
  if (algo == "rd" || algo == "rabenseifner") return nodes > 1 ? default_chunk_bytes(nodes) : 0;
  if (algo == "shm" && nodes <= 1) return kShmRoundBytes;
  return default_chunk_bytes(nodes);
}

bool auto_uses_hier(const Shape& s) { return s.nodes > 1 && s.ranks_per_node > 1 && s.uniform; }

bool auto_uses_shm(const Shape& s) { return s.nodes == 1 && s.ranks_per_node > 1 && s.shm; }

const char* auto_allreduce(std::uint64_t bytes, const Shape& s) {
  if (auto_uses_shm(s)) return bytes <= kAutoSmallBytes ? "mpi" : "shm";
  if (bytes <= kAutoSmallBytes) return "rd";
  if (auto_uses_hier(s)) return "hier";
  if (bytes <= kAutoMediumBytes) return "rabenseifner";
  return "ring";
}

const char* mpi_allreduce(std::uint64_t bytes) { return bytes < kMpiRdBytes ? "rd" : "ring"; }

std::string resolve_allreduce(const std::string& algo, std::uint64_t bytes, const Shape& s) {
  if (algo == "auto") {
    const std::string a = auto_allreduce(bytes, s);
    return a == "mpi" ? mpi_allreduce(bytes) : a;  // the model costs Open MPI's own choice
  }
  if (algo == "mpi") return mpi_allreduce(bytes);
  return algo;
}

}  // namespace gradsync::plan
