// gradsync/train/precision.hpp — mixed precision in gradsync-train: what --precision and
// --loss-scale mean, and the rounding that emulates half-precision compute on the CPU.
//
// The recipe is PyTorch's automatic mixed precision (autocast + GradScaler) with DDP:
//   * master weights stay fp32 (the trainer's flat buffer; the optimizer updates them);
//   * each forward casts the weights to the half type (round to nearest even) and runs
//     every GEMM / convolution on half inputs with fp32 accumulation, its output rounded to
//     the half type (tensor cores' contract); ReLU and max pooling are exact on half values;
//     softmax and the cross-entropy run in fp32 on the half logits (autocast's fp32 list);
//   * the loss is multiplied by the loss scale S before backward; backward rounds every
//     activation gradient and every parameter gradient to the half type (the gradient of
//     the half copy of a weight is a half tensor; its fp32 .grad holds it widened, exactly);
//   * the gradients are communicated in half: with --compress none the reducer runs the
//     fp16/bf16 cast compressor (pre-divide by world size fused into the cast, all-reduce
//     Sum in the half type, widen back) on the *scaled* values, as DDP's fp16_compress_hook
//     does under GradScaler. The reducer then unscales (x 1/S) and checks for inf/nan;
//   * the ranks agree on found_inf (a max-allreduce of the flag), the scaler updates
//     (compress/loss_scaler.hpp: dynamic = GradScaler, init 65536, x2 after 2000 good
//     steps, x0.5 on inf/nan) and an inf/nan step is skipped (no optimizer step).
// An explicit --compress fp16 or bf16 is that cast, whatever the precision (e.g. bf16
// compute with fp16 on the wire; the user's choice). Any other compressor (powersgd, qsgd,
// onebit, topk) runs on the *unscaled* fp32 view: the reducer unscales and checks each
// bucket before the compressor, and zeroes a bucket holding inf/nan, so neither the wire
// nor the error-feedback memory ever sees a loss scale or an inf (a scale that halves or
// doubles would otherwise leave the memory in stale units). Its wire format is its own
// (top-k values and PowerSGD's P, Q stay fp32): half precision then changes the compute
// and the gradients' rounding, not the bytes. In a skipped step such a compressor has
// still encoded (its memory moved on); the update is dropped, as with PyTorch's hooks.
//
// Results: /steps/loss_scale, /steps/skipped, /steps/unscale_s; root attributes precision,
// loss_scale_mode, loss_scale_spec, skipped_steps, compress_effective (results.hpp).
// compression_ratio keeps its definition (fp32 payload / payload sent): 2.0 for fp16/bf16
// with --compress none, as for the fp16 compressor. fp32 has no scaler: --loss-scale with
// --precision fp32 is refused (exit 2) rather than silently ignored.
//
// Emulated compute has no activations: its synthetic gradients are multiplied by S and
// rounded to the half type, and its layer times come from the profile's half-precision peak.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "compress/loss_scaler.hpp"
#include "core/dtype.hpp"

namespace gradsync::train {

// "fp32" | "fp16" | "bf16" -> DType; UsageError naming --precision otherwise.
DType parse_precision(const std::string& text);
// DType -> "fp32" | "fp16" | "bf16".
const char* precision_name(DType t);

// The --loss-scale value that applies when the option is not given: "dynamic" for fp16,
// "none" for bf16 (bf16 has fp32's exponent range; PyTorch trains bf16 without a scaler)
// and fp32 (no scaling at all; an explicit --loss-scale with fp32 is refused).
std::string default_loss_scale(DType precision);
// The recorded mode of a scaler configuration: "dynamic", "static", or "none" (a static
// scale of 1: nothing is scaled, inf/nan steps are still skipped).
std::string loss_scale_mode(const LossScalerOptions& o);

// In place: x[i] = float(half(x[i])), round to nearest even (inf/nan kept; overflow -> inf).
// No-op for DType::F32. The float version runs on the kernels' vectorised casts; the
// double one (gradient checks) rounds through float.
void round_to(DType t, float* x, std::size_t n);
void round_to(DType t, double* x, std::size_t n);

}  // namespace gradsync::train
