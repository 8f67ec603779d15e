// gradsync/plan/precision.hpp — the training precisions (--precision) and their element
// sizes on the wire, shared by gradsync-train and the model.
#pragma once

#include <string>

#include "core/dtype.hpp"

namespace gradsync::plan {

// "fp32" | "fp16" | "bf16" -> DType; UsageError naming --precision otherwise.
DType parse_precision(const std::string& text);
const char* precision_name(DType t);
// Bytes per gradient element at this precision: 4 or 2.
int precision_bytes(const std::string& text);

}  // namespace gradsync::plan
