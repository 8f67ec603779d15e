// registry.cpp — the one table of all-reduce algorithms: name -> factory.
// Selection is by name (--algo ring), never by scattered ifs; the order of the table is the
// order users see in help texts and errors.
#include <algorithm>
#include <string>

#include "algos/algorithms.hpp"
#include "algos/allreduce.hpp"
#include "algos/detail.hpp"
#include "core/error.hpp"

namespace gradsync {
namespace {

using Factory = std::unique_ptr<AllreduceAlgorithm> (*)(Communicator&, const AlgoOptions&);

struct Entry {
  const char* name;
  Factory make;
};

const std::vector<Entry>& table() {
  static const std::vector<Entry> entries = {
      {"ring", &algos::make_ring},
      {"rd", &algos::make_recursive_doubling},
      {"rabenseifner", &algos::make_rabenseifner},
      {"tree", &algos::make_tree},
      {"hier", &algos::make_hierarchical},
      {"shm", &algos::make_shared_memory},
      {"mpi", &algos::make_native},
      {"auto", &algos::make_auto},
  };
  return entries;
}

const Entry& find(const std::string& name) {
  for (const auto& e : table())
    if (name == e.name) return e;
  std::string known;
  for (const auto& n : allreduce_names()) known += (known.empty() ? "" : ", ") + n;
  throw UsageError("unknown all-reduce algorithm '" + name + "' (known: " + known + ")");
}

}  // namespace

const std::vector<std::string>& allreduce_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& e : table()) v.emplace_back(e.name);
    return v;
  }();
  return names;
}

void check_allreduce_name(const std::string& name) { (void)find(name); }

std::unique_ptr<AllreduceAlgorithm> make_allreduce(const std::string& name, Communicator& comm,
                                                   const AlgoOptions& opts) {
  const Entry& e = find(name);
  algos::check_options(opts);
  return e.make(comm, opts);
}

void algos::check_options(const AlgoOptions& opts) {
  GS_USAGE_CHECK(opts.channels >= 1 && opts.channels <= kMaxChannels, "all-reduce channels (--channels) must be in 1..",
                 kMaxChannels, ", got ", opts.channels);
}

}  // namespace gradsync
