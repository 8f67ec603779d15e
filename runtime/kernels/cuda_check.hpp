// gradsync/kernels/cuda_check.hpp — the CUDA runtime's check macro and RAII device memory.
//
// GS_CUDA(call) throws gradsync::Error naming this process (rank, host), the call, CUDA's
// own error name and string, and file:line — the one check macro per C API of STYLE.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "core/error.hpp"  // gradsync::Error, what GS_CUDA throws

#define GS_CUDA(call)                                                                              \
  do {                                                                                             \
    const cudaError_t gs_cuda_rc_ = (call);                                                        \
    if (gs_cuda_rc_ != cudaSuccess) ::gradsync::cuda_fail(gs_cuda_rc_, #call, __FILE__, __LINE__); \
  } while (0)

namespace gradsync {

[[noreturn]] void cuda_fail(cudaError_t rc, const char* call, const char* file, int line);

// True when a CUDA device can be used; otherwise false with the reason in *why (e.g.
// "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version").
// GPU tests skip on false.
bool cuda_device_available(std::string* why);

// A failed allocation of `bytes` by `call` ("cudaMalloc", ...): throws gradsync::Error
// naming this process, the size, `what` and CUDA's error string.
[[noreturn]] void cuda_alloc_fail(cudaError_t rc, const char* call, const char* what, std::size_t bytes);

// Memory owned by one object, grown on demand (contents are lost when it grows). `Kind` is
// the allocator pair: DeviceMemory below (cudaMalloc / cudaFree), PinnedMemory in
// cuda/memory.hpp (cudaMallocHost / cudaFreeHost). Kind::allocate_empty: reserve(0) still
// allocates (one byte), so get() is never null once reserved.
template <class Kind>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  explicit CudaBuffer(std::size_t bytes) { reserve(bytes); }
  ~CudaBuffer() {
    if (ptr_) Kind::release(ptr_);  // no throw from a destructor; a failing free leaks at worst
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  CudaBuffer(CudaBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  CudaBuffer& operator=(CudaBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_) Kind::release(ptr_);
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }

  // At least `bytes` (contents are lost when it grows). Failure throws gradsync::Error.
  void reserve(std::size_t bytes) {
    if (bytes <= bytes_ && (ptr_ || !Kind::allocate_empty)) return;
    if (ptr_) GS_CUDA(Kind::release(ptr_));
    ptr_ = nullptr;
    bytes_ = 0;
    const std::size_t n = bytes > 0 ? bytes : 1;
    const cudaError_t rc = Kind::allocate(&ptr_, n);
    if (rc != cudaSuccess) {
      ptr_ = nullptr;
      cuda_alloc_fail(rc, Kind::call, Kind::what, n);
    }
    bytes_ = bytes;
  }
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

struct DeviceMemory {
  static constexpr const char* call = "cudaMalloc";
  static constexpr const char* what = "device memory";
  static constexpr bool allocate_empty = false;
  static cudaError_t allocate(void** p, std::size_t n) { return cudaMalloc(p, n); }
  static cudaError_t release(void* p) { return cudaFree(p); }
};

// Device memory owned by one object (cudaMalloc / cudaFree).
using DeviceBuffer = CudaBuffer<DeviceMemory>;

}  // namespace gradsync
