// gradsync/train/precision.cpp — see precision.hpp.
#include "train/precision.hpp"

#include <algorithm>
#include <array>

#include "core/error.hpp"
#include "kernels/cpu_kernels.hpp"
#include "plan/precision.hpp"

namespace gradsync::train {

// The names are the shared ones (runtime/plan/precision.hpp; the model reads them too).
DType parse_precision(const std::string& text) { return plan::parse_precision(text); }

const char* precision_name(DType t) { return plan::precision_name(t); }

std::string default_loss_scale(DType precision) { return precision == DType::F16 ? "dynamic" : "none"; }

std::string loss_scale_mode(const LossScalerOptions& o) {
  if (o.dynamic) return "dynamic";
  return o.init_scale == 1.f ? "none" : "static";
}

void round_to(DType t, float* x, std::size_t n) {
  if (t == DType::F32) return;
  // Through a small half buffer: two vectorised passes, cache-resident.
  constexpr std::size_t kChunk = 4096;
  std::array<std::uint16_t, kChunk> h;
  for (std::size_t i = 0; i < n; i += kChunk) {
    const std::size_t m = std::min(kChunk, n - i);
    kernels::cast_to_half(t, x + i, h.data(), m, 1.f);
    kernels::cast_from_half(t, h.data(), x + i, m, 1.f);
  }
}

void round_to(DType t, double* x, std::size_t n) {
  if (t == DType::F32) return;
  for (std::size_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(x[i]);
    x[i] = t == DType::F16 ? f16_to_f32(f32_to_f16(f)) : bf16_to_f32(f32_to_bf16(f));
  }
}

}  // namespace gradsync::train
