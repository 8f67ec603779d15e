// gradsync/compress/error_feedback.hpp — error-feedback memory (Seide et al. 2014; Karimireddy
// et al. 2019): what a lossy compressor dropped from a bucket is remembered and added to
// that bucket's gradient at the next step, so the compression error does not accumulate.
//
//   x      = gradient + memory          (add_to: in place on the bucket)
//   encode x, communicate, decode
//   memory = x - decoded                (the kernels write it in the same pass as encoding
//                                        where they can: sign_compress, or set() after)
//
// One memory per bucket index, created zero on first use. A bucket's size never changes in
// a run; a different size for a known index is a programming error (checked).
#pragma once

#include <cstddef>
#include <map>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu_kernels.hpp"

namespace gradsync::compress_detail {

class ErrorFeedback {
 public:
  // The memory of bucket `index`: `count` floats, zero the first time.
  float* memory(int index, std::size_t count) {
    auto [it, fresh] = mem_.try_emplace(index);
    if (fresh) it->second.assign(count, 0.f);
    GS_CHECK_EQ(it->second.size(), count, "error-feedback memory of bucket ", index, " changed size");
    return it->second.data();
  }
  bool has(int index) const { return mem_.count(index) != 0; }
  // x += memory (creating a zero memory the first time).
  void add_to(int index, float* x, std::size_t count) { kernels::add_inplace(x, memory(index, count), count); }
  // memory = input - decoded
  void set(int index, const float* input, const float* decoded, std::size_t count) {
    kernels::ef_residual(input, decoded, memory(index, count), count);
  }
  void clear() { mem_.clear(); }

 private:
  std::map<int, std::vector<float>> mem_;
};

}  // namespace gradsync::compress_detail
