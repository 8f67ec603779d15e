#include "core/units.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.hpp"

namespace gradsync {

std::int64_t parse_size(const std::string& text, const std::string& option) {
  auto bad = [&](const std::string& why) {
    return UsageError("option " + option + ": invalid size '" + text + "' (" + why +
                      "; expected e.g. 8, 64K, 4M, 1G)");
  };
  std::size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i < text.size() && text[i] == '-') throw bad("negative");
  const std::size_t num_begin = i;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == num_begin) throw bad("no number");
  const std::string num = text.substr(num_begin, i - num_begin);
  std::string suffix = text.substr(i);
  while (!suffix.empty() && std::isspace(static_cast<unsigned char>(suffix.back()))) suffix.pop_back();
  for (auto& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix.size() >= 2 && suffix.substr(suffix.size() - 2) == "IB") suffix.resize(suffix.size() - 2);
  else if (!suffix.empty() && suffix.back() == 'B') suffix.pop_back();
  double mult = 1;
  if (suffix.empty()) mult = 1;
  else if (suffix == "K") mult = 1024.0;
  else if (suffix == "M") mult = 1024.0 * 1024;
  else if (suffix == "G") mult = 1024.0 * 1024 * 1024;
  else if (suffix == "T") mult = 1024.0 * 1024 * 1024 * 1024;
  else throw bad("unknown suffix '" + text.substr(i) + "'");
  char* end = nullptr;
  const double v = std::strtod(num.c_str(), &end);
  if (end != num.c_str() + num.size()) throw bad("unparsable number");
  const double bytes = v * mult;
  if (bytes > static_cast<double>(std::numeric_limits<std::int64_t>::max() / 2)) throw bad("too large");
  if (bytes != std::floor(bytes)) throw bad("not a whole number of bytes");
  return static_cast<std::int64_t>(bytes);
}

std::int64_t parse_int(const std::string& text, const std::string& option) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE)
    throw UsageError("option " + option + ": '" + text + "' is not an integer");
  return v;
}

double parse_double(const std::string& text, const std::string& option) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
    throw UsageError("option " + option + ": '" + text + "' is not a number");
  return v;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[64];
  if (bytes == std::floor(bytes)) std::snprintf(buf, sizeof buf, "%.0f %s", bytes, units[u]);
  else std::snprintf(buf, sizeof buf, "%.2f %s", bytes, units[u]);
  return buf;
}

}  // namespace gradsync
