// gradsync/train/dataset.cpp — the synthetic data set (see dataset.hpp).
#include "train/dataset.hpp"

#include <cmath>
#include <functional>
#include <numeric>

#include "core/error.hpp"
#include "train/rng.hpp"

namespace gradsync::train {

DataSpec data_spec_for(const std::string& model, std::int64_t train_samples) {
  DataSpec d;
  if (model == "mlp") {
    d.shape = {64};
    d.separation = 0.45;
  } else if (model == "cnn") {
    d.shape = {1, 16, 16};
    d.separation = 0.8;
    d.max_shift = 2;
  } else {
    throw UsageError("no data set for model '" + model + "' (trainable: mlp, cnn)");
  }
  d.train_samples = train_samples;
  return d;
}

namespace {

// 3x3 circular box blur of each channel of a C x H x W image, in place.
void box_blur(std::vector<float>& img, std::int64_t c, std::int64_t h, std::int64_t w) {
  std::vector<float> out(img.size());
  for (std::int64_t ch = 0; ch < c; ++ch)
    for (std::int64_t y = 0; y < h; ++y)
      for (std::int64_t x = 0; x < w; ++x) {
        float s = 0;
        for (int dy = -1; dy <= 1; ++dy)
          for (int dx = -1; dx <= 1; ++dx)
            s += img[static_cast<std::size_t>((ch * h + (y + dy + h) % h) * w + (x + dx + w) % w)];
        out[static_cast<std::size_t>((ch * h + y) * w + x)] = s / 9.0f;
      }
  img.swap(out);
}

}  // namespace

SyntheticDataset::SyntheticDataset(DataSpec spec, std::uint64_t seed) : spec_(std::move(spec)), seed_(seed) {
  GS_USAGE_CHECK(spec_.shape.size() == 1 || spec_.shape.size() == 3, "data set: shape must be {D} or {C,H,W}");
  GS_USAGE_CHECK(spec_.classes >= 2, "data set: need at least 2 classes");
  GS_USAGE_CHECK(spec_.train_samples > 0 && spec_.eval_samples > 0, "data set: sizes must be positive");
  size_ = std::accumulate(spec_.shape.begin(), spec_.shape.end(), std::int64_t{1}, std::multiplies<std::int64_t>());
  prototypes_.resize(static_cast<std::size_t>(spec_.classes * size_));
  for (int k = 0; k < spec_.classes; ++k) {
    SplitMix64 rng(mix64(seed_, 0xda7aULL, static_cast<std::uint64_t>(k)));
    std::vector<float> p(static_cast<std::size_t>(size_));
    for (auto& v : p) v = static_cast<float>(rng.normal());
    if (spec_.shape.size() == 3) {
      box_blur(p, spec_.shape[0], spec_.shape[1], spec_.shape[2]);
      box_blur(p, spec_.shape[0], spec_.shape[1], spec_.shape[2]);
    }
    double ms = 0;
    for (float v : p) ms += static_cast<double>(v) * v;
    const float scale = static_cast<float>(spec_.separation / std::sqrt(ms / static_cast<double>(size_)));
    for (std::int64_t i = 0; i < size_; ++i) prototypes_[static_cast<std::size_t>(k * size_ + i)] = p[static_cast<std::size_t>(i)] * scale;
  }
}

std::int32_t SyntheticDataset::sample(Split split, std::int64_t index, float* x) const {
  GS_CHECK(index >= 0 && index < size(split), "sample index ", index, " out of range");
  const std::uint64_t key = mix64(seed_, 0x5a3b1eULL + static_cast<std::uint64_t>(split), static_cast<std::uint64_t>(index));
  const auto label = static_cast<std::int32_t>(key % static_cast<std::uint64_t>(spec_.classes));
  const float* proto = prototypes_.data() + label * size_;
  std::int64_t sy = 0, sx = 0;
  if (spec_.shape.size() == 3 && spec_.max_shift > 0) {
    const std::int64_t span = 2 * spec_.max_shift + 1;
    sy = static_cast<std::int64_t>((key >> 32) % static_cast<std::uint64_t>(span)) - spec_.max_shift;
    sx = static_cast<std::int64_t>((key >> 48) % static_cast<std::uint64_t>(span)) - spec_.max_shift;
  }
  // Gaussian noise by Box-Muller on pairs of counter-based uniforms.
  const auto nkey = static_cast<std::uint32_t>(key ^ (key >> 32));
  const float sigma = static_cast<float>(spec_.noise);
  for (std::int64_t i = 0; i < size_; i += 2) {
    const auto j = static_cast<std::uint32_t>(i);
    const float u1 = (static_cast<float>(hash32(nkey, j) >> 8) + 0.5f) * 0x1.0p-24f;  // (0, 1)
    const float u2 = static_cast<float>(hash32(nkey ^ 0x9e3779b9u, j) >> 8) * 0x1.0p-24f;
    const float r = std::sqrt(-2.0f * std::log(u1)) * sigma;
    x[i] = r * std::cos(6.2831853f * u2);
    if (i + 1 < size_) x[i + 1] = r * std::sin(6.2831853f * u2);
  }
  if (spec_.shape.size() == 1) {
    for (std::int64_t i = 0; i < size_; ++i) x[i] += proto[i];
  } else {
    const std::int64_t C = spec_.shape[0], H = spec_.shape[1], W = spec_.shape[2];
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t y = 0; y < H; ++y)
        for (std::int64_t xx = 0; xx < W; ++xx) {
          const std::int64_t py = ((y - sy) % H + H) % H, px = ((xx - sx) % W + W) % W;
          x[(c * H + y) * W + xx] += proto[(c * H + py) * W + px];
        }
  }
  return label;
}

}  // namespace gradsync::train
