#include "cuda/stream.hpp"

#include "kernels/cuda_check.hpp"

namespace gradsync {

Stream::Stream() { GS_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }

Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);  // no throw from a destructor
}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (s_) cudaStreamDestroy(s_);
    s_ = o.s_;
    o.s_ = nullptr;
  }
  return *this;
}

void Stream::synchronize() const { GS_CUDA(cudaStreamSynchronize(s_)); }

Event::Event(bool timing) {
  GS_CUDA(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (e_) cudaEventDestroy(e_);
    e_ = o.e_;
    o.e_ = nullptr;
  }
  return *this;
}

void Event::record(cudaStream_t stream) { GS_CUDA(cudaEventRecord(e_, stream)); }

bool Event::query() const {
  const cudaError_t rc = cudaEventQuery(e_);
  if (rc == cudaErrorNotReady) return false;
  if (rc != cudaSuccess) cuda_fail(rc, "cudaEventQuery", __FILE__, __LINE__);
  return true;
}

void Event::synchronize() const { GS_CUDA(cudaEventSynchronize(e_)); }

float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0.f;
  GS_CUDA(cudaEventElapsedTime(&ms, start.e_, end.e_));
  return ms;
}

}  // namespace gradsync
