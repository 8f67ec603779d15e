// gradsync/core/timer.hpp — monotonic wall time in seconds, and the process's CPU time.
#pragma once

#include <time.h>

#include <chrono>

namespace gradsync {

inline double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// CPU time of the whole process (every thread: compute, communication, loader), seconds.
inline double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

class Stopwatch {
 public:
  Stopwatch() : start_(now_s()) {}
  double elapsed_s() const { return now_s() - start_; }
  void reset() { start_ = now_s(); }

 private:
  double start_;
};

}  // namespace gradsync
