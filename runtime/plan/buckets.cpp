// gradsync/plan/buckets.cpp — see buckets.hpp.
#include "plan/buckets.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace gradsync::plan {

std::int64_t bucket_limit_bytes(double mib) {
  GS_USAGE_CHECK(std::isfinite(mib) && mib > 0, "bucket size must be a positive number of MiB, got ", mib);
  return std::max<std::int64_t>(4, std::llround(mib * 1048576.0));
}

std::vector<std::vector<std::size_t>> assign_buckets(const std::vector<std::int64_t>& tensor_bytes,
                                                     std::int64_t bucket_bytes, std::int64_t first_bucket_bytes) {
  GS_USAGE_CHECK(bucket_bytes > 0, "bucket size must be positive, got ", bucket_bytes, " bytes");
  GS_USAGE_CHECK(first_bucket_bytes > 0, "first bucket size must be positive, got ", first_bucket_bytes, " bytes");
  std::vector<std::vector<std::size_t>> buckets;
  std::vector<std::size_t> current;
  std::int64_t size = 0;
  std::int64_t limit = first_bucket_bytes;  // the first bucket formed; every later one: bucket_bytes
  for (std::size_t k = tensor_bytes.size(); k-- > 0;) {  // gradient-ready order
    current.push_back(k);
    size += tensor_bytes[k];
    if (size >= limit) {  // the tensor that crosses the limit stays in this bucket
      buckets.push_back(std::move(current));
      current.clear();
      size = 0;
      limit = bucket_bytes;
    }
  }
  if (!current.empty()) buckets.push_back(std::move(current));
  return buckets;
}

}  // namespace gradsync::plan
