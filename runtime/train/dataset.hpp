// gradsync/train/dataset.hpp — a synthetic, deterministic, learnable classification set.
//
// Each class k has a fixed prototype p_k (drawn once from the seed; for images a smooth
// random field: Gaussian noise box-blurred twice, so nearby pixels correlate). Sample i of
// a split is
//     label = H(seed, split, i) mod K
//     x     = shift(p_label, dy, dx) + noise * N(0, 1) per element
// with (dy, dx) uniform in [-max_shift, max_shift] (circular shift; images only) and the
// noise drawn from a counter-based hash of (seed, split, i, element). So any sample can be
// produced independently, by any thread, in any order, and the same seed gives the same
// bits everywhere. Train and eval splits share prototypes and differ in the hash stream:
// the eval set is held out (no sample in common, same distribution).
//
// Difficulty: the prototypes have RMS `separation` per element against unit noise. For
// "mlp" (64 dims, separation 0.45) the class means are ~5 noise-sigmas apart, a Bayes
// accuracy near 95%; "cnn" adds +-2 pixel shifts so a linear model is not enough.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradsync::train {

enum class Split : std::uint8_t { Train = 0, Eval = 1 };

struct DataSpec {
  std::vector<std::int64_t> shape;  // per sample: {D} or {C, H, W}
  int classes = 10;
  double separation = 0.45;         // RMS of a class prototype per element
  double noise = 1.0;               // standard deviation of the per-element noise
  int max_shift = 0;                // images: circular shift range in pixels (each axis)
  std::int64_t train_samples = 8192;  // M: the training set (one epoch)
  std::int64_t eval_samples = 2048;   // the held-out set
};

// The data set the trainable model `model` ("mlp", "cnn") is trained on, with M samples.
DataSpec data_spec_for(const std::string& model, std::int64_t train_samples);

class SyntheticDataset {
 public:
  SyntheticDataset(DataSpec spec, std::uint64_t seed);

  const DataSpec& spec() const { return spec_; }
  std::int64_t sample_size() const { return size_; }
  std::int64_t size(Split s) const { return s == Split::Train ? spec_.train_samples : spec_.eval_samples; }

  // Writes sample `index` of `split` into x[sample_size()] and returns its label.
  // Const and stateless: safe from any number of threads.
  std::int32_t sample(Split split, std::int64_t index, float* x) const;

 private:
  DataSpec spec_;
  std::uint64_t seed_;
  std::int64_t size_ = 0;
  std::vector<float> prototypes_;  // classes x size_
};

}  // namespace gradsync::train
