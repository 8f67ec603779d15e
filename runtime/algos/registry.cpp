// registry.cpp — the one table of all-reduce algorithms: name -> factory.
// Selection is by name (--algo ring), never by scattered ifs. The names and their order are
// plan::allreduce_names() (runtime/plan/algos.hpp, shared with the model); this table only
// attaches a factory to each, and checks once that every name has exactly one.
#include <algorithm>
#include <string>

#include "algos/algorithms.hpp"
#include "algos/allreduce.hpp"
#include "algos/detail.hpp"
#include "core/error.hpp"
#include "plan/algos.hpp"

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
  // Every shared name has a factory here, in the shared order (a new algorithm is one row
  // in plan/algos.cpp and one here).
  static const bool consistent = [] {
    const auto& names = plan::allreduce_names();
    GS_CHECK(names.size() == entries.size(), "all-reduce registry has ", entries.size(), " factories for ",
             names.size(), " shared names");
    for (std::size_t i = 0; i < names.size(); ++i)
      GS_CHECK(names[i] == entries[i].name, "all-reduce registry row ", i, " is '", entries[i].name,
               "', the shared name is '", names[i], "'");
    return true;
  }();
  (void)consistent;
  return entries;
}

const Entry& find(const std::string& name) {
  for (const auto& e : table())
    if (name == e.name) return e;
  throw UsageError("unknown all-reduce algorithm '" + name + "' (known: " + plan::allreduce_names_text() + ")");
}

}  // namespace

const std::vector<std::string>& allreduce_names() {
  (void)table();  // checks the factories against the shared names
  return plan::allreduce_names();
}

void check_allreduce_name(const std::string& name) { (void)find(name); }

std::unique_ptr<AllreduceAlgorithm> make_allreduce(const std::string& name, Communicator& comm,
                                                   const AlgoOptions& opts) {
  const Entry& e = find(name);
  algos::check_options(opts);
  return e.make(comm, opts);
}

Request AllreduceAlgorithm::start(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op,
                                  const void* after) {
  GS_CHECK(after == nullptr, "all-reduce '", name(),
           "' runs on the host and cannot follow a device event: device memory takes the library's own (mpi)");
  run(sendbuf, recvbuf, count, t, op);
  return {};
}

void algos::check_options(const AlgoOptions& opts) {
  GS_USAGE_CHECK(opts.channels >= 1 && opts.channels <= kMaxChannels, "all-reduce channels (--channels) must be in 1..",
                 kMaxChannels, ", got ", opts.channels);
}

}  // namespace gradsync
