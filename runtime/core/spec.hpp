// gradsync/core/spec.hpp — "name:key=value,key=value" specs, as --compress takes them
// ("powersgd:rank=4,start=10", "qsgd:levels=16", "fp16", "none"). One parser so the runtime
// and the cost model read the same strings the same way.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace gradsync {

struct Spec {
  std::string name;
  std::map<std::string, std::string> params;

  // Typed access; a missing key gives the default, a malformed value a UsageError naming
  // the spec and the key.
  double get_double(const std::string& key, double def) const;
  long long get_int(const std::string& key, long long def) const;
  bool has(const std::string& key) const { return params.count(key) != 0; }
  // UsageError if a key outside `allowed` is present (names the unknown key and the allowed ones).
  void allow_only(const std::vector<std::string>& allowed) const;
  std::string str() const;  // canonical text: name[:k=v,...] with keys sorted
};

// Parses "name[:k=v[,k=v...]]". UsageError for empty names, missing '=', duplicate keys.
Spec parse_spec(const std::string& text, const std::string& option);

}  // namespace gradsync
