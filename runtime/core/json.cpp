#include "core/json.hpp"

#include <cmath>
#include <cstdio>

#include "core/error.hpp"

namespace gradsync {

Json& Json::set(const std::string& key, Json value) {
  auto* obj = std::get_if<Object>(&v_);
  GS_CHECK(obj, "Json::set on a non-object");
  for (auto& kv : *obj) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return *this;
    }
  }
  obj->emplace_back(key, std::move(value));
  return *this;
}

Json& Json::push(Json value) {
  auto* arr = std::get_if<Array>(&v_);
  GS_CHECK(arr, "Json::push on a non-array");
  arr->push_back(std::move(value));
  return *this;
}

namespace {
void escape(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}
void newline(std::string& out, int indent, int depth) {
  if (indent < 0) return;
  out += '\n';
  out.append(static_cast<std::size_t>(indent * depth), ' ');
}
}  // namespace

void Json::dump_to(std::string& out, int indent, int depth) const {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::nullptr_t>) {
          out += "null";
        } else if constexpr (std::is_same_v<T, bool>) {
          out += v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          out += std::to_string(v);
        } else if constexpr (std::is_same_v<T, double>) {
          if (!std::isfinite(v)) {
            out += "null";
          } else {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.10g", v);
            out += buf;
          }
        } else if constexpr (std::is_same_v<T, std::string>) {
          escape(out, v);
        } else if constexpr (std::is_same_v<T, Array>) {
          out += '[';
          for (std::size_t i = 0; i < v.size(); ++i) {
            if (i) out += ',';
            newline(out, indent, depth + 1);
            v[i].dump_to(out, indent, depth + 1);
          }
          if (!v.empty()) newline(out, indent, depth);
          out += ']';
        } else {
          out += '{';
          for (std::size_t i = 0; i < v.size(); ++i) {
            if (i) out += ',';
            newline(out, indent, depth + 1);
            escape(out, v[i].first);
            out += indent < 0 ? ":" : ": ";
            v[i].second.dump_to(out, indent, depth + 1);
          }
          if (!v.empty()) newline(out, indent, depth);
          out += '}';
        }
      },
      v_);
}

std::string Json::dump(int indent) const {
  std::string out;
  dump_to(out, indent, 0);
  return out;
}

}  // namespace gradsync
