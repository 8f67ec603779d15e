// gradsync/cuda/memory.hpp — owned device and pinned host memory.
//
// DeviceBuffer (kernels/cuda_check.hpp, reused here) owns cudaMalloc memory; PinnedBuffer
// owns page-locked host memory (cudaMallocHost), the staging area of host-staged
// communication: copies from and to pinned memory run at full PCIe/NVLink-C2C speed and
// can be asynchronous. Never managed (unified) memory: a benchmark must know where its
// bytes are.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda_check.hpp"

namespace gradsync {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes) { reserve(bytes); }
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;

  // At least `bytes` (contents are lost when it grows). Failure throws gradsync::Error
  // naming the size.
  void reserve(std::size_t bytes);
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Synchronous copies on `stream` (issue, then wait for the stream). Zero bytes is a no-op.
void copy_to_device(void* dev, const void* host, std::size_t bytes, cudaStream_t stream);
void copy_to_host(void* host, const void* dev, std::size_t bytes, cudaStream_t stream);
void copy_device_to_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

}  // namespace gradsync
