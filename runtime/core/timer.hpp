// gradsync/core/timer.hpp — monotonic wall time in seconds, and the process's and the thread's CPU time.
#pragma once

#include <time.h>

#include <chrono>

namespace gradsync {

inline double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// CPU time of a clock_gettime CPU clock, seconds.
inline double cpu_clock_s(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
// CPU time of the whole process (every thread: compute, communication, loader).
inline double process_cpu_s() { return cpu_clock_s(CLOCK_PROCESS_CPUTIME_ID); }
// CPU time of the calling thread.
inline double thread_cpu_s() { return cpu_clock_s(CLOCK_THREAD_CPUTIME_ID); }

class Stopwatch {
 public:
  Stopwatch() : start_(now_s()) {}
  double elapsed_s() const { return now_s() - start_; }
  void reset() { start_ = now_s(); }

 private:
  double start_;
};

}  // namespace gradsync
