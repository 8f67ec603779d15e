// gradsync/compress/registry.cpp — the compressors' factories: kind -> factory.
// Names, keys, aliases and value checks live in the shared table (runtime/plan/compress.hpp,
// used by the model too): make_compressor parses the spec there and hands the validated
// CompressorSpec to the factory of its kind.
//
// To add a compressor: one row in plan/compress.cpp (name, keys, checks, wire plan), its
// <name>.cpp defining compress_detail::make_<name>(spec, seed, rank), one row below.
#include <memory>
#include <string>
#include <vector>

#include "compress/compressor.hpp"
#include "core/error.hpp"
#include "plan/compress.hpp"

namespace gradsync {

namespace compress_detail {
// Factories, one per compressor file.
std::unique_ptr<Compressor> make_none(const plan::CompressorSpec& spec, std::uint64_t seed, int rank);
std::unique_ptr<Compressor> make_fp16(const plan::CompressorSpec& spec, std::uint64_t seed, int rank);      // cast.cpp
std::unique_ptr<Compressor> make_bf16(const plan::CompressorSpec& spec, std::uint64_t seed, int rank);      // cast.cpp
std::unique_ptr<Compressor> make_powersgd(const plan::CompressorSpec& spec, std::uint64_t seed, int rank);  // powersgd.cpp
std::unique_ptr<Compressor> make_qsgd(const plan::CompressorSpec& spec, std::uint64_t seed, int rank);      // qsgd.cpp
std::unique_ptr<Compressor> make_onebit(const plan::CompressorSpec& spec, std::uint64_t seed, int rank);    // onebit.cpp
std::unique_ptr<Compressor> make_topk(const plan::CompressorSpec& spec, std::uint64_t seed, int rank);      // topk.cpp
}  // namespace compress_detail

namespace {

using Factory = std::unique_ptr<Compressor> (*)(const plan::CompressorSpec&, std::uint64_t, int);

struct Entry {
  plan::CompressKind kind;
  Factory make;
};

const std::vector<Entry>& table() {
  static const std::vector<Entry> kFactories = {
      {plan::CompressKind::None, &compress_detail::make_none},
      {plan::CompressKind::Fp16, &compress_detail::make_fp16},
      {plan::CompressKind::Bf16, &compress_detail::make_bf16},
      {plan::CompressKind::PowerSgd, &compress_detail::make_powersgd},
      {plan::CompressKind::Qsgd, &compress_detail::make_qsgd},
      {plan::CompressKind::Onebit, &compress_detail::make_onebit},
      {plan::CompressKind::Topk, &compress_detail::make_topk},
  };
  return kFactories;
}

}  // namespace

const std::vector<std::string>& compressor_names() { return plan::compressor_names(); }

std::unique_ptr<Compressor> make_compressor(const std::string& text, std::uint64_t seed, int rank) {
  const plan::CompressorSpec spec = plan::parse_compressor(text);
  for (const auto& e : table())
    if (e.kind == spec.kind) return e.make(spec, seed, rank);
  throw Error("compressor '" + spec.kind_name + "' is in the shared table but has no factory");
}

// Building a compressor touches no communicator, so validation is construction without
// keeping the result.
void check_compressor_spec(const std::string& text) { (void)make_compressor(text, 0, 0); }

}  // namespace gradsync
