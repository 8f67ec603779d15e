#include "bench/busy.hpp"

#include <string>
#include <system_error>

#include "core/error.hpp"
#include "core/log.hpp"

namespace gradsync::bench {

namespace {

// Steps between two reads of the stop flag: ~4096 x a few cycles, a few microseconds, so
// the flag costs nothing and the destructor waits at most that long per thread.
constexpr int kSpinsPerCheck = 4096;

// One busy thread: a dependent chain of xorshift64 steps (Marsaglia 2003) on a register.
// Every step needs the previous one, so it keeps one core's integer units busy and never
// touches memory; `seed` differs per thread only so the threads do not compute the same.
// It says it runs (`started`) before its first round, and it checks the stop flag only after
// each round, so every thread that started has spun at least one round.
void spin(const std::atomic<bool>& stop, std::atomic<int>& started, std::uint64_t seed, std::uint64_t& spins) {
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull | 1;  // xorshift stays at 0 forever: start odd
  std::uint64_t rounds = 0;
  started.fetch_add(1, std::memory_order_release);
  do {
    for (int i = 0; i < kSpinsPerCheck; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
    ++rounds;
  } while (!stop.load(std::memory_order_relaxed));
  // A volatile store needs the chain's value, so the optimiser must keep the loop.
  volatile std::uint64_t sink = x;
  (void)sink;
  spins = rounds * kSpinsPerCheck;
}

}  // namespace

BusyThreads::BusyThreads(int n) {
  GS_CHECK(n >= 0 && n <= kMaxBusyThreads, "--busy-threads ", n, " is outside 0..", kMaxBusyThreads);
  if (n == 0) return;
  // Sized before any thread starts: each thread writes its own element as it ends.
  spins_.assign(static_cast<std::size_t>(n), 0);
  threads_.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    try {
      threads_.emplace_back(spin, std::cref(stop_), std::ref(started_), static_cast<std::uint64_t>(i + 1),
                            std::ref(spins_[static_cast<std::size_t>(i)]));
    } catch (const std::system_error& e) {
      stop_and_join();  // the destructor does not run for a constructor that throws
      throw Error(where() + ": --busy-threads " + std::to_string(n) + ": cannot start busy thread " +
                  std::to_string(i + 1) + ": " + e.what());
    }
  }
  // The sweep starts only once every thread runs: on a busy host a new thread may wait for
  // a core, and a short sweep could otherwise end before some thread ever spun.
  while (started_.load(std::memory_order_acquire) < n) std::this_thread::yield();
  GS_LOG(INFO) << "bench: " << n << " busy thread" << (n == 1 ? "" : "s") << " spinning";
}

BusyThreads::~BusyThreads() {
  if (threads_.empty()) return;
  stop_and_join();
  std::uint64_t total = 0;
  for (std::uint64_t s : spins_) total += s;
  // The tests read this line: every thread joined, and how much work they did meanwhile.
  GS_LOG(INFO) << "bench: busy threads stopped and joined: " << threads_.size() << " thread"
               << (threads_.size() == 1 ? "" : "s") << ", " << total << " xorshift steps";
}

void BusyThreads::stop_and_join() noexcept {
  stop_.store(true, std::memory_order_relaxed);  // the join, not the flag, orders spins_
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

}  // namespace gradsync::bench
