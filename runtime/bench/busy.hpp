// gradsync/bench/busy.hpp — --busy-threads: host threads that keep the CPU busy while the
// sweep runs.
//
// Purpose: in training, DDP all-reduces its buckets while backward still computes, so a
// collective shares the host's cores with compute. N spinning threads per rank stand in for
// that compute, so the sweep measures what a collective costs while the host computes
// (gradsync-model calibrate fits the level's contention from such sweeps).
// Approach: each thread runs a dependent xorshift chain on one register: it takes a core
// and nothing else (no memory traffic beyond L1, no system calls), so what slows the
// collective is competition for cores, not for memory bandwidth. A relaxed atomic stop
// flag is read after every kSpinsPerCheck steps (a few microseconds), and the chain's value
// is stored to a volatile at the end, so the compiler cannot drop the loop. The constructor
// returns once every thread spins, so the whole sweep runs under load.
// Ownership: the object owns its threads. They start in the constructor and are stopped and
// joined in the destructor, also when an exception leaves the sweep, so none outlives it.
// They inherit the rank's CPU binding: with `mpirun --bind-to core` a rank shares its core
// with its own busy threads; with `--bind-to none` the scheduler spreads them.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace gradsync::bench {

// --busy-threads accepts 0..kMaxBusyThreads: more per rank is almost certainly a typo.
constexpr int kMaxBusyThreads = 256;

class BusyThreads {
 public:
  // Starts n spinning threads (0: none). A thread that cannot be started is a
  // gradsync::Error naming the rank, the host and the option; the ones already started are
  // stopped and joined first.
  explicit BusyThreads(int n);
  ~BusyThreads();
  BusyThreads(const BusyThreads&) = delete;
  BusyThreads& operator=(const BusyThreads&) = delete;

 private:
  void stop_and_join() noexcept;

  std::atomic<bool> stop_{false};
  std::atomic<int> started_{0};  // threads that have begun spinning
  std::vector<std::thread> threads_;
  // Steps each thread ran, written by the thread as it ends, read after the join (INFO log).
  std::vector<std::uint64_t> spins_;
};

}  // namespace gradsync::bench
