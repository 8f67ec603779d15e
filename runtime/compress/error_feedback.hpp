// gradsync/compress/error_feedback.hpp — error-feedback memory (Seide et al. 2014; Karimireddy
// et al. 2019): what a lossy compressor dropped from a bucket is remembered and added to
// that bucket's gradient at the next step, so the compression error does not accumulate.
//
//   x      = gradient + memory
//   encode x, communicate, decode
//   memory = x - decoded
//
// SignMemory is the memory of sign (1-bit) compression (compress/onebit.hpp), kept
// *deferred*: per bucket it holds r = gradient + memory, the input last compressed, and the
// scale each of its chunks was compressed with, not r - decoded. The residual is a function
// of those two (kernels::sign_residual: r - (r >= 0 ? scale : -scale)), so the next encode
// resolves it in the same pass that reads the gradient (kernels::sign_compress_ef): encoding
// streams the gradient once and the memory once each way, and leaves the gradient as it was.
// Zero the first time: r = 0 with scale 0 is a residual of 0.
//
// Top-k and PowerSGD keep their memory in their own compressors (compress/topk.hpp,
// compress/powersgd.hpp). One memory per bucket index; a bucket's size never changes in a
// run, and a different size for a known index is a programming error (checked by
// BucketKernels::state).
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress/bucket_kernels.hpp"

namespace gradsync::compress_detail {

class SignMemory {
 public:
  struct View {
    float* last;    // `count` floats: the input last compressed
    float* scales;  // `chunks` floats: the scale of each chunk of it
  };
  // The memory of bucket `index`, zero the first time, in `k`'s memory kind (host or
  // device: BucketKernels::state slots `slot` and `slot` + 1 of `owner`).
  static View memory(BucketKernels& k, std::uint64_t owner, int index, int slot, std::size_t count,
                     std::size_t chunks) {
    return {static_cast<float*>(k.state(owner, index, slot, count * sizeof(float))),
            static_cast<float*>(k.state(owner, index, slot + 1, chunks * sizeof(float)))};
  }
};

}  // namespace gradsync::compress_detail
