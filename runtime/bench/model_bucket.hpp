// gradsync/bench/model_bucket.hpp — all of a zoo model's gradient tensors as one bucket.
//
// The layout the kernel benchmarks time PowerSGD on, on the CPU (gradsync-kernels-bench)
// and on the GPU (gradsync-gpu-kernels-bench), so that the two and powersgd-vs-torch.py's
// hook on the same shapes measure one workload: the tensors of models/zoo.hpp in backward
// (reverse registration) order, as DDP's buckets hold them, packed from offset 0.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "compress/compressor.hpp"
#include "models/zoo.hpp"

namespace gradsync::bench {

inline std::vector<TensorView> model_bucket_tensors(const std::string& model) {
  std::vector<TensorView> tensors;
  for (const auto& t : models::zoo_model(model).tensors())
    tensors.push_back({t.name, t.shape, 0, static_cast<std::size_t>(t.numel())});
  std::reverse(tensors.begin(), tensors.end());
  std::size_t offset = 0;
  for (auto& t : tensors) {
    t.offset = offset;
    offset += t.count;
  }
  return tensors;
}

// Elements of a packed bucket (the end of its last tensor).
inline std::size_t bucket_elements(const std::vector<TensorView>& tensors) {
  return tensors.empty() ? 0 : tensors.back().offset + tensors.back().count;
}

}  // namespace gradsync::bench
