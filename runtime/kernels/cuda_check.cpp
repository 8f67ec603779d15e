#include "kernels/cuda_check.hpp"

#include "core/error.hpp"
#include "core/units.hpp"

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

void cuda_alloc_fail(cudaError_t rc, const char* call, const char* what, std::size_t bytes) {
  cudaGetLastError();  // clear it: the process may go on (and report) after this
  throw Error(detail::concat(where(), ": ", call, " of ", format_bytes(static_cast<double>(bytes)), " of ", what,
                             " failed: ", cudaGetErrorString(rc)));
}

}  // namespace gradsync
