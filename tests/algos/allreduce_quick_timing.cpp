// A quick timing loop (not a test): every algorithm on the same buffer, reporting the
// median time, algbw and busbw (nccl-tests' factor 2 (p-1)/p) per algorithm.
//   mpirun -np 2 build/tests/allreduce_quick_timing [bytes=16M] [iters=20] [chunk=4M] [algos...]
// An algorithm may carry its own chunk size: ring:256K.
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <cstdio>
#include <string>
#include <vector>

#include "algos/allreduce.hpp"
#include "comm/mpi_comm.hpp"
#include "core/timer.hpp"
#include "core/units.hpp"

namespace gs = gradsync;

int main(int argc, char** argv) {
  gs::MpiRuntime mpi(&argc, &argv);
  gs::MpiCommunicator world;
  const std::size_t bytes = argc > 1 ? static_cast<std::size_t>(gs::parse_size(argv[1], "bytes")) : 16u << 20;
  const int iters = argc > 2 ? std::stoi(argv[2]) : 20;
  gs::AlgoOptions opts;
  if (argc > 3) opts.chunk_bytes = static_cast<std::size_t>(gs::parse_size(argv[3], "chunk"));
  std::vector<std::string> names;
  for (int i = 4; i < argc; ++i) names.emplace_back(argv[i]);
  if (names.empty()) names = {"MPI_Allreduce", "mpi", "ring", "rd", "rabenseifner", "tree", "hier", "auto"};
  const std::size_t count = std::max<std::size_t>(1, bytes / 4);
  std::vector<float> send(count, 1.0f), recv(count, 0.0f);
  const int p = world.size();
  // Interleave the algorithms iteration by iteration so that noise from a shared machine
  // hits them alike.
  // "MPI_Allreduce" (not a registry name) is the blocking MPI call, for reference: the
  // registry's "mpi" goes through the communicator (MPI_Iallreduce polled with a time-out).
  class BlockingMpi final : public gs::AllreduceAlgorithm {
   public:
    std::string name() const override { return "MPI_Allreduce"; }
    void run(const void* s, void* r, std::size_t n, gs::DType, gs::RedOp) override {
      MPI_Allreduce(s == r ? MPI_IN_PLACE : s, r, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
  };
  std::vector<std::unique_ptr<gs::AllreduceAlgorithm>> algos;
  for (const auto& name : names) {
    if (name == "MPI_Allreduce") algos.push_back(std::make_unique<BlockingMpi>());
    else if (name.find(':') != std::string::npos) {  // "ring:256K": that algorithm with that chunk size
      gs::AlgoOptions o = opts;
      o.chunk_bytes = static_cast<std::size_t>(gs::parse_size(name.substr(name.find(':') + 1), "chunk"));
      algos.push_back(gs::make_allreduce(name.substr(0, name.find(':')), world, o));
    } else {
      algos.push_back(gs::make_allreduce(name, world, opts));
    }
  }
  std::vector<std::vector<double>> times(algos.size());
  for (int it = -3; it < iters; ++it)
    for (std::size_t a = 0; a < algos.size(); ++a) {
      world.barrier();
      const double t0 = gs::now_s();
      algos[a]->run(send.data(), recv.data(), count, gs::DType::F32, gs::RedOp::Sum);
      const double dt = world.max_double(gs::now_s() - t0);
      if (it >= 0) times[a].push_back(dt);
    }
  for (std::size_t a = 0; a < algos.size(); ++a) {
    auto& t = times[a];
    std::sort(t.begin(), t.end());
    const double med = t[t.size() / 2];
    const double algbw = static_cast<double>(count * 4) / med / 1e9;
    if (world.rank() == 0)
      std::printf("%-14s %-14s %10zu B  median %10.2f us  min %10.2f us  algbw %6.3f GB/s  busbw %6.3f GB/s\n",
                  names[a].c_str(), algos[a]->chosen(count * 4).c_str(), count * 4, med * 1e6, t[0] * 1e6, algbw,
                  algbw * 2.0 * (p - 1) / p);
  }
  return 0;
}
