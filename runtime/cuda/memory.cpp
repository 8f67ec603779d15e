#include "cuda/memory.hpp"

#include "core/error.hpp"
#include "core/units.hpp"

namespace gradsync {

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
