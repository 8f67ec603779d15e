// gradsync/compress/registry.cpp — the one table of compressors: name -> (allowed spec
// keys, factory). make_compressor / check_compressor_spec / compressor_names read only it.
//
// To add a compressor: write <name>.cpp defining compress_detail::make_<name>(spec, seed,
// rank) (it validates value ranges and throws UsageError naming the key), declare it
// below, and add one row to kCompressors. Aliases are rows with the same factory.
#include <memory>
#include <string>
#include <vector>

#include "compress/compressor.hpp"
#include "core/error.hpp"
#include "core/spec.hpp"

namespace gradsync {

namespace compress_detail {
// Factories, one per compressor file.
std::unique_ptr<Compressor> make_none(const Spec& spec, std::uint64_t seed, int rank);
std::unique_ptr<Compressor> make_fp16(const Spec& spec, std::uint64_t seed, int rank);      // cast.cpp
std::unique_ptr<Compressor> make_bf16(const Spec& spec, std::uint64_t seed, int rank);      // cast.cpp
std::unique_ptr<Compressor> make_powersgd(const Spec& spec, std::uint64_t seed, int rank);  // powersgd.cpp
std::unique_ptr<Compressor> make_qsgd(const Spec& spec, std::uint64_t seed, int rank);      // qsgd.cpp
std::unique_ptr<Compressor> make_onebit(const Spec& spec, std::uint64_t seed, int rank);    // onebit.cpp
std::unique_ptr<Compressor> make_topk(const Spec& spec, std::uint64_t seed, int rank);      // topk.cpp
}  // namespace compress_detail

namespace {

using Factory = std::unique_ptr<Compressor> (*)(const Spec&, std::uint64_t, int);

struct Entry {
  const char* name;
  std::vector<std::string> keys;  // the spec parameters it takes
  Factory make;
};

const std::vector<Entry>& table() {
  static const std::vector<Entry> kCompressors = {
      {"none", {}, &compress_detail::make_none},
      {"fp16", {}, &compress_detail::make_fp16},
      {"bf16", {}, &compress_detail::make_bf16},
      {"powersgd", {"rank", "start", "min_rate", "warm_start", "error_feedback"}, &compress_detail::make_powersgd},
      {"qsgd", {"levels", "bucket"}, &compress_detail::make_qsgd},
      {"onebit", {}, &compress_detail::make_onebit},
      {"sign", {}, &compress_detail::make_onebit},
      {"topk", {"ratio"}, &compress_detail::make_topk},
  };
  return kCompressors;
}

std::string known_names() {
  std::string s;
  for (const auto& e : table()) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

const Entry& find(const Spec& spec) {
  for (const auto& e : table())
    if (spec.name == e.name) return e;
  throw UsageError("option --compress: unknown compressor '" + spec.name + "' (known: " + known_names() + ")");
}

}  // namespace

const std::vector<std::string>& compressor_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& e : table()) n.emplace_back(e.name);
    return n;
  }();
  return names;
}

std::unique_ptr<Compressor> make_compressor(const std::string& text, std::uint64_t seed, int rank) {
  const Spec spec = parse_spec(text, "--compress");
  const Entry& e = find(spec);
  try {
    spec.allow_only(e.keys);
  } catch (const UsageError& err) {
    throw UsageError(std::string("option --compress: ") + err.what());
  }
  return e.make(spec, seed, rank);
}

// Building a compressor touches no communicator, so validation is construction (the
// factories check value ranges) without keeping the result.
void check_compressor_spec(const std::string& text) { (void)make_compressor(text, 0, 0); }

}  // namespace gradsync
