// gradsync/plan/buckets.hpp — PyTorch DDP's bucket assignment, for the reducer and the model.
//
// Purpose: gradsync-train's reducer and the model's step simulator must put the same
//   tensors into the same buckets, and both must match DDP's steady-state layout.
// Approach: DDP's compute_bucket_assignment_by_size over the parameters in gradient-ready
//   order (reverse forward order) with limits {first_bucket_bytes, bucket_bytes}, as DDP
//   uses after its first-iteration rebuild: walk the tensors, add each to the current
//   bucket, close the bucket as soon as its size reaches its limit (the tensor that crosses
//   the limit stays in it); the first bucket formed uses first_bucket_bytes, every later
//   one bucket_bytes; a last partial bucket holds what is left. Buckets come out in launch
//   (ready) order, as DDP's when tensor indices are given (no re-sort).
// Cost: O(tensors).
// Use case: train::Reducer, the GPU reducer, netmodel::make_buckets, parity tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gradsync::plan {

// MiB (DDP's bucket_cap_mb, 1 MiB = 2^20 B) -> bytes, rounded, at least 4 (one fp32).
std::int64_t bucket_limit_bytes(double mib);

// tensor_bytes in forward order; the result lists buckets in launch order, each with its
// tensors' forward indices in gradient-ready (descending) order. UsageError for limits <= 0.
std::vector<std::vector<std::size_t>> assign_buckets(const std::vector<std::int64_t>& tensor_bytes,
                                                     std::int64_t bucket_bytes, std::int64_t first_bucket_bytes);

}  // namespace gradsync::plan
