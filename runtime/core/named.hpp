// gradsync/core/named.hpp — a fixed table of named builders: the built-in fabrics
// (netmodel/fabric.cpp), compute profiles (models/compute_profile.cpp) and zoo models
// (models/zoo.cpp). Names in table order, a lookup that builds, the names for messages.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gradsync {

template <class T>
class NamedBuilders {
 public:
  using Entry = std::pair<std::string, std::function<T()>>;
  NamedBuilders(std::initializer_list<Entry> entries) : entries_(entries) {
    for (const auto& e : entries_) names_.push_back(e.first);
  }
  const std::vector<std::string>& names() const { return names_; }
  // The object built for `name`, or nothing when the table has no such name.
  std::optional<T> build(const std::string& name) const {
    for (const auto& [n, make] : entries_)
      if (n == name) return make();
    return std::nullopt;
  }
  // "a, b, c": the names for an error message.
  std::string joined() const {
    std::string s;
    for (const auto& n : names_) s += (s.empty() ? "" : ", ") + n;
    return s;
  }

 private:
  std::vector<Entry> entries_;
  std::vector<std::string> names_;
};

}  // namespace gradsync
