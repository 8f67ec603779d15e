// gradsync/cuda/stream.hpp — RAII CUDA streams and events.
//
// Stream: a non-blocking stream (no implicit synchronisation with the legacy default
// stream), destroyed with its owner. Event: completion markers (query / synchronize) and,
// when created with timing, GPU-side intervals (Event::elapsed_ms = cudaEventElapsedTime).
// Both are created on the device that is current at construction.
#pragma once

#include <cuda_runtime_api.h>

namespace gradsync {

class Stream {
 public:
  Stream();  // cudaStreamCreateWithFlags(cudaStreamNonBlocking)
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  Stream& operator=(Stream&& o) noexcept;

  cudaStream_t get() const { return s_; }
  void synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  // timing=false: cudaEventDisableTiming (cheaper; completion only).
  explicit Event(bool timing = true);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  Event& operator=(Event&& o) noexcept;

  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t stream);
  // True once the work recorded before it has completed; throws on an execution error.
  bool query() const;
  void synchronize() const;
  // Milliseconds from `start` to `end` (both recorded with timing, `end` completed).
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  cudaEvent_t e_ = nullptr;
};

}  // namespace gradsync
