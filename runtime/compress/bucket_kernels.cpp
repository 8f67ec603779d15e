// gradsync/compress/bucket_kernels.cpp — the host BucketKernels (see bucket_kernels.hpp).
#include "compress/bucket_kernels.hpp"

#include <map>
#include <vector>

#include "kernels/cpu_kernels.hpp"

namespace gradsync {

namespace {

class HostBucketKernels final : public BucketKernels {
 public:
  void cast_to_half(DType t, const float* in, std::uint16_t* out, std::size_t n, float scale) override {
    ++launches_;
    kernels::cast_to_half(t, in, out, n, scale);
  }
  void cast_from_half(DType t, const std::uint16_t* in, float* out, std::size_t n, float scale) override {
    ++launches_;
    kernels::cast_from_half(t, in, out, n, scale);
  }
  void* scratch(int slot, std::size_t bytes) override {
    auto& v = scratch_[slot];
    if (v.size() * sizeof(std::uint64_t) < bytes) v.assign((bytes + 7) / 8, 0);
    return v.data();
  }
  void fence() override {}

 private:
  std::map<int, std::vector<std::uint64_t>> scratch_;  // 8-byte aligned regions
};

}  // namespace

std::unique_ptr<BucketKernels> make_host_bucket_kernels() { return std::make_unique<HostBucketKernels>(); }

}  // namespace gradsync
