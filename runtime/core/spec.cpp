#include "core/spec.hpp"

#include "core/error.hpp"
#include "core/units.hpp"

namespace gradsync {

Spec parse_spec(const std::string& text, const std::string& option) {
  Spec s;
  const std::size_t colon = text.find(':');
  s.name = text.substr(0, colon);
  GS_USAGE_CHECK(!s.name.empty(), "option ", option, ": empty name in '", text, "'");
  if (colon == std::string::npos) return s;
  std::size_t pos = colon + 1;
  while (pos <= text.size()) {
    const std::size_t comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const std::size_t eq = item.find('=');
    GS_USAGE_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < item.size(), "option ", option, ": '", item,
                   "' in '", text, "' is not key=value");
    const std::string key = item.substr(0, eq);
    GS_USAGE_CHECK(!s.params.count(key), "option ", option, ": key '", key, "' given twice in '", text, "'");
    s.params[key] = item.substr(eq + 1);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return s;
}

double Spec::get_double(const std::string& key, double def) const {
  auto it = params.find(key);
  return it == params.end() ? def : parse_double(it->second, name + ":" + key);
}

long long Spec::get_int(const std::string& key, long long def) const {
  auto it = params.find(key);
  return it == params.end() ? def : parse_int(it->second, name + ":" + key);
}

void Spec::allow_only(const std::vector<std::string>& allowed) const {
  for (const auto& [k, v] : params) {
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == k;
    if (!ok) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw UsageError("'" + name + "' has no parameter '" + k + "'" +
                       (list.empty() ? std::string(" (it takes none)") : " (known: " + list + ")"));
    }
  }
}

std::string Spec::str() const {
  std::string out = name;
  char sep = ':';
  for (const auto& [k, v] : params) {
    out += sep;
    out += k + "=" + v;
    sep = ',';
  }
  return out;
}

}  // namespace gradsync
