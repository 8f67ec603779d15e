#include "cuda/memory.hpp"

#include "core/error.hpp"
#include "core/units.hpp"

namespace gradsync {

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) cudaFreeHost(ptr_);  // no throw from a destructor
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void PinnedBuffer::reserve(std::size_t bytes) {
  if (bytes <= bytes_ && ptr_) return;
  if (ptr_) GS_CUDA(cudaFreeHost(ptr_));
  ptr_ = nullptr;
  bytes_ = 0;
  const std::size_t alloc = bytes > 0 ? bytes : 1;
  const cudaError_t rc = cudaMallocHost(&ptr_, alloc);
  if (rc != cudaSuccess) {
    ptr_ = nullptr;
    cudaGetLastError();
    throw Error(where() + ": cudaMallocHost of " + format_bytes(static_cast<double>(alloc)) +
                " of pinned host memory failed: " + cudaGetErrorString(rc));
  }
  bytes_ = bytes;
}

void copy_to_device(void* dev, const void* host, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  GS_CUDA(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream));
  GS_CUDA(cudaStreamSynchronize(stream));
}

void copy_to_host(void* host, const void* dev, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  GS_CUDA(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream));
  GS_CUDA(cudaStreamSynchronize(stream));
}

void copy_device_to_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || dst == src) return;
  GS_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  GS_CUDA(cudaStreamSynchronize(stream));
}

}  // namespace gradsync
