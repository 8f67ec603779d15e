// gradsync/compress/stats.cpp — accumulation of CompressStats over buckets and steps.
#include "compress/compressor.hpp"

namespace gradsync {

// Sums bytes and times. `collective` keeps the first non-empty name it sees (a run uses
// one compressor, so every bucket names the same collective); `compressed` stays true
// only if every added reduce() was compressed.
void CompressStats::add(const CompressStats& o) {
  uncompressed_bytes += o.uncompressed_bytes;
  compressed_bytes += o.compressed_bytes;
  wire_bytes += o.wire_bytes;
  encode_s += o.encode_s;
  decode_s += o.decode_s;
  if (collective.empty()) collective = o.collective;
  compressed = compressed && o.compressed;  // a fresh CompressStats starts true
}

}  // namespace gradsync
