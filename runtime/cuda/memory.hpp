// gradsync/cuda/memory.hpp — owned device and pinned host memory.
//
// DeviceBuffer (kernels/cuda_check.hpp) owns cudaMalloc memory; PinnedBuffer, the same
// CudaBuffer with another allocator, owns page-locked host memory (cudaMallocHost), the staging area of host-staged
// communication: copies from and to pinned memory run at full PCIe/NVLink-C2C speed and
// can be asynchronous. Never managed (unified) memory: a benchmark must know where its
// bytes are.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda_check.hpp"

namespace gradsync {

struct PinnedMemory {
  static constexpr const char* call = "cudaMallocHost";
  static constexpr const char* what = "pinned host memory";
  static constexpr bool allocate_empty = true;
  static cudaError_t allocate(void** p, std::size_t n) { return cudaMallocHost(p, n); }
  static cudaError_t release(void* p) { return cudaFreeHost(p); }
};

// Page-locked host memory owned by one object (cudaMallocHost / cudaFreeHost).
using PinnedBuffer = CudaBuffer<PinnedMemory>;

// Synchronous copies on `stream` (issue, then wait for the stream). Zero bytes is a no-op.
void copy_to_device(void* dev, const void* host, std::size_t bytes, cudaStream_t stream);
void copy_to_host(void* host, const void* dev, std::size_t bytes, cudaStream_t stream);
void copy_device_to_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

}  // namespace gradsync
