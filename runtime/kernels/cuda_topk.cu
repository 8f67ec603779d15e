// CUDA top-k by magnitude: a stable descending radix sort of (magnitude key, index) pairs
// (CUB), the first k indices sorted back into increasing order, then a gather of values.
// Stability makes ties at the threshold go in index order, so the chosen set is exactly the
// CPU's (cpu_topk.cpp). O(n) work in a few passes over 31 key bits; scratch is ~16 bytes per
// element plus CUB's temporary storage, kept in `scratch` across calls.
#include <cub/device/device_radix_sort.cuh>

#include "core/error.hpp"
#include "kernels/cuda_kernels.hpp"

namespace gradsync::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void keys_kernel(const float* x, std::size_t n, std::uint32_t* keys, std::int32_t* iota) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    keys[i] = magnitude_key(x[i]);
    iota[i] = static_cast<std::int32_t>(i);
  }
}

__global__ void gather_kernel(const float* x, const std::int32_t* idx, std::size_t k, float* vals) {
  for (std::size_t j = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < k;
       j += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    vals[j] = x[idx[j]];
}

__global__ void scatter_add_kernel(const std::int32_t* idx, const float* vals, std::size_t k, float scale, float* out) {
  for (std::size_t j = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < k;
       j += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[idx[j]] += vals[j] * scale;
}

unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 8192 ? b : 8192);
}

std::size_t align_up(std::size_t v) { return (v + 255) & ~std::size_t{255}; }

}  // namespace

void topk_select(const float* x, std::size_t n, std::size_t k, std::int32_t* idx, float* vals, DeviceBuffer& scratch,
                 cudaStream_t stream) {
  GS_CHECK(k <= n, "top-k asked for ", k, " of ", n, " elements");
  GS_CHECK(n <= static_cast<std::size_t>(INT32_MAX), "top-k indices are int32; ", n, " elements is too many");
  if (k == 0) return;
  const int num = static_cast<int>(n);
  const int numk = static_cast<int>(k);

  // Ask CUB for its temporary storage of both sorts, then carve one scratch allocation:
  // keys_in | keys_out | idx_in | idx_out | cub temp.
  std::size_t temp_desc = 0, temp_asc = 0;
  GS_CUDA(cub::DeviceRadixSort::SortPairsDescending(
      nullptr, temp_desc, static_cast<const std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr),
      static_cast<const std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr), num, 0, 31, stream));
  GS_CUDA(cub::DeviceRadixSort::SortKeys(nullptr, temp_asc, static_cast<const std::int32_t*>(nullptr),
                                         static_cast<std::int32_t*>(nullptr), numk, 0, 31, stream));
  const std::size_t arr = align_up(n * 4);
  const std::size_t temp = align_up(temp_desc > temp_asc ? temp_desc : temp_asc);
  scratch.reserve(4 * arr + temp);
  char* base = scratch.as<char>();
  auto* keys_in = reinterpret_cast<std::uint32_t*>(base);
  auto* keys_out = reinterpret_cast<std::uint32_t*>(base + arr);
  auto* idx_in = reinterpret_cast<std::int32_t*>(base + 2 * arr);
  auto* idx_out = reinterpret_cast<std::int32_t*>(base + 3 * arr);
  void* cub_temp = base + 4 * arr;

  keys_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, keys_in, idx_in);
  GS_CUDA(cudaGetLastError());
  std::size_t t = temp;
  GS_CUDA(
      cub::DeviceRadixSort::SortPairsDescending(cub_temp, t, keys_in, keys_out, idx_in, idx_out, num, 0, 31, stream));
  t = temp;
  GS_CUDA(cub::DeviceRadixSort::SortKeys(cub_temp, t, idx_out, idx, numk, 0, 31, stream));
  gather_kernel<<<blocks_for(k), kThreads, 0, stream>>>(x, idx, k, vals);
  GS_CUDA(cudaGetLastError());
}

void scatter_add(const std::int32_t* idx, const float* vals, std::size_t k, float scale, float* out,
                 cudaStream_t stream) {
  if (k == 0) return;
  scatter_add_kernel<<<blocks_for(k), kThreads, 0, stream>>>(idx, vals, k, scale, out);
  GS_CUDA(cudaGetLastError());
}

}  // namespace gradsync::kernels::cuda
