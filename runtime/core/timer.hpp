// gradsync/core/timer.hpp — monotonic wall time in seconds.
#pragma once

#include <chrono>

namespace gradsync {

inline double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
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
