// gradsync/compress/loss_scaler.hpp — loss scaling for fp16 training, with the semantics of
// PyTorch's torch.cuda.amp.GradScaler (dynamic) and a fixed scale (static).
//
//   --loss-scale dynamic[:init=65536,growth=2,backoff=0.5,interval=2000]
//   --loss-scale static:V          (the scale is V forever)
//   --loss-scale none              (= static:1)
//
// Per step: the loss is multiplied by scale() before backward; each gradient buffer is
// unscaled (x *= 1/scale, the reciprocal taken in double and rounded to fp32 as GradScaler
// does) and checked for inf/nan — the check looks at the values *before* unscaling, as
// GradScaler's kernel does; then update(found_inf) decides the step:
//   found_inf:  the optimizer step is skipped; dynamic: scale *= backoff, good-step count = 0
//   otherwise:  the step is taken; dynamic: after `interval` consecutive good steps
//               scale *= growth (only if the result is finite) and the count restarts
// A static scale never changes; a step with inf/nan gradients is still skipped (applying it
// would put inf/nan into the weights).
// Distributed use: found_inf must be agreed by all ranks (e.g. Communicator::max_int64 of
// pending_found_inf()) before update(), since a compressor may not spread an inf to every
// rank's gradient the way a plain all-reduce does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gradsync {

struct LossScalerOptions {
  bool dynamic = true;
  float init_scale = 65536.f;
  float growth_factor = 2.f;
  float backoff_factor = 0.5f;
  std::int64_t growth_interval = 2000;
};

// Parses the --loss-scale text (forms above). UsageError naming the text and the key.
LossScalerOptions parse_loss_scale(const std::string& text);

struct LossScaleUpdate {
  bool skipped = false;   // the optimizer step must not be applied
  float old_scale = 0.f;  // the scale this step's loss was multiplied by
  float new_scale = 0.f;  // the scale of the next step
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& opts = {});

  float scale() const { return scale_; }
  float inv_scale() const;  // float(1.0 / double(scale))
  // Unscale one gradient buffer in place; true if it held an inf or nan (the step's
  // pending flag is set as well).
  bool unscale(float* grads, std::size_t n);
  bool pending_found_inf() const { return pending_found_inf_; }
  // End of step with the agreed flag; clears the pending flag.
  LossScaleUpdate update(bool found_inf);

  std::int64_t growth_tracker() const { return growth_tracker_; }  // consecutive good steps
  std::int64_t skipped_steps() const { return skipped_; }
  const LossScalerOptions& options() const { return opts_; }
  std::string spec() const;  // canonical text, e.g. "dynamic:backoff=0.5,growth=2,init=65536,interval=2000"

 private:
  LossScalerOptions opts_;
  float scale_;
  std::int64_t growth_tracker_ = 0;
  std::int64_t skipped_ = 0;
  bool pending_found_inf_ = false;
};

}  // namespace gradsync
