#include "kernels/cuda_check.hpp"

#include "core/error.hpp"

namespace gradsync {

void cuda_fail(cudaError_t rc, const char* call, const char* file, int line) {
  throw Error(detail::concat(where(), ": ", call, " failed: ", cudaGetErrorName(rc), " (", cudaGetErrorString(rc),
                             ") at ", file, ":", line));
}

bool cuda_device_available(std::string* why) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(rc);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return false;
  }
  if (count == 0) {
    if (why) *why = "cudaGetDeviceCount: no CUDA device";
    return false;
  }
  return true;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);  // no throw from a destructor; a failing free leaks at worst
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::reserve(std::size_t bytes) {
  if (bytes <= bytes_) return;
  if (ptr_) GS_CUDA(cudaFree(ptr_));
  ptr_ = nullptr;
  bytes_ = 0;
  GS_CUDA(cudaMalloc(&ptr_, bytes));
  bytes_ = bytes;
}

}  // namespace gradsync
