// gradsync/core/units.hpp — sizes as users type them ("4M", "1G", "8", "512K"; powers of
// 1024 as nccl-tests) and numbers as reports print them.
#pragma once

#include <cstdint>
#include <string>

namespace gradsync {

// Parse a byte size with an optional K/M/G/T suffix (case-insensitive, optional trailing
// "B" or "iB"). Throws UsageError naming `option` for negative, empty, fractional-byte or
// unparsable input, and for values that overflow int64.
std::int64_t parse_size(const std::string& text, const std::string& option);

// Parse an integer / a finite double, naming the option on failure (range checks are the caller's).
std::int64_t parse_int(const std::string& text, const std::string& option);
double parse_double(const std::string& text, const std::string& option);

// "4 MiB", "1.5 GiB", "512 B".
std::string format_bytes(double bytes);

}  // namespace gradsync
