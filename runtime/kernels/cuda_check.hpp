// gradsync/kernels/cuda_check.hpp — the CUDA runtime's check macro and RAII device memory.
//
// GS_CUDA(call) throws gradsync::Error naming this process (rank, host), the call, CUDA's
// own error name and string, and file:line — the one check macro per C API of STYLE.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "core/error.hpp"  // gradsync::Error, what GS_CUDA throws

namespace gradsync {

[[noreturn]] void cuda_fail(cudaError_t rc, const char* call, const char* file, int line);

// True when a CUDA device can be used; otherwise false with the reason in *why (e.g.
// "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version").
// GPU tests skip on false.
bool cuda_device_available(std::string* why);

// Device memory owned by one object (cudaMalloc / cudaFree), grown on demand.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) { reserve(bytes); }
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;

  // At least `bytes` (contents are lost when it grows).
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

}  // namespace gradsync

#define GS_CUDA(call)                                                                              \
  do {                                                                                             \
    const cudaError_t gs_cuda_rc_ = (call);                                                        \
    if (gs_cuda_rc_ != cudaSuccess) ::gradsync::cuda_fail(gs_cuda_rc_, #call, __FILE__, __LINE__); \
  } while (0)
