// gradsync/plan/precision.cpp — see precision.hpp.
#include "plan/precision.hpp"

#include "core/error.hpp"

namespace gradsync::plan {

DType parse_precision(const std::string& text) {
  if (text == "fp32") return DType::F32;
  if (text == "fp16") return DType::F16;
  if (text == "bf16") return DType::BF16;
  throw UsageError("option --precision: unknown precision '" + text + "' (known: fp32, fp16, bf16)");
}

const char* precision_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::F16: return "fp16";
    case DType::BF16: return "bf16";
  }
  return "?";
}

int precision_bytes(const std::string& text) { return static_cast<int>(dtype_size(parse_precision(text))); }

}  // namespace gradsync::plan
