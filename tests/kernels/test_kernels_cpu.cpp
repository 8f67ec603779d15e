// Tests of the CPU kernels (runtime/kernels/): every vector path this CPU runs (scalar,
// AVX2, AVX-512) gives the same bits as the scalar functions of elementwise.hpp, on odd
// sizes (tails) and on special values (inf, nan payloads, subnormals, -0, rounding ties,
// overflow); top-k selects the true k largest; the reductions agree with long double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/cpu_kernels.hpp"
#include "kernels/powersgd_gemm.hpp"
#include "kernels/elementwise.hpp"

namespace gk = gradsync::kernels;
using gradsync::DType;

namespace {

const std::vector<std::size_t> kSizes = {0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 100, 1000, 4099};

std::vector<gk::Isa> isas() {
  std::vector<gk::Isa> v = {gk::Isa::Scalar};
  if (gk::cpu_isa() >= gk::Isa::Avx2) v.push_back(gk::Isa::Avx2);
  if (gk::cpu_isa() >= gk::Isa::Avx512) v.push_back(gk::Isa::Avx512);
  return v;
}

std::uint32_t bits(float f) { return gradsync::f32_bits(f); }

// Random floats of every kind: normal values over many binades, subnormals, zeros of both
// signs, infinities, NaNs with payloads, values at fp16/bf16 rounding ties and overflow.
std::vector<float> special_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (std::size_t i = 0; i < n; ++i) {
    switch (rng() % 12) {
      case 0:
        v[i] = gradsync::bits_f32(rng());
        break;  // any bit pattern
      case 1:
        v[i] = gradsync::bits_f32(rng() & 0x807fffffu);
        break;  // subnormal / zero
      case 2:
        v[i] = (rng() & 1) ? 0.f : -0.f;
        break;
      case 3:
        v[i] = (rng() & 1) ? INFINITY : -INFINITY;
        break;
      case 4:
        v[i] = gradsync::bits_f32(0x7f800001u | (rng() & 0x807fffffu));
        break;  // nan payloads
      case 5:
        v[i] = gradsync::bits_f32((rng() & 0xffffe000u) | 0x1000u);
        break;  // fp16 ties
      case 6:
        v[i] = gradsync::bits_f32((rng() & 0xffff0000u) | 0x8000u);
        break;  // bf16 ties
      case 7:
        v[i] = normal(rng) * 70000.f;
        break;  // fp16 overflow
      case 8:
        v[i] = normal(rng) * 1e-6f;
        break;  // fp16 subnormal range
      default:
        v[i] = normal(rng) * std::ldexp(1.f, static_cast<int>(rng() % 40) - 20);
        break;
    }
  }
  return v;
}

std::vector<float> gaussian(std::size_t n, std::uint32_t seed, float sigma = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(bits(got[i]), bits(want[i])) << what << " at " << i << ": " << got[i] << " vs " << want[i];
}

// The same bits, or both NaN: which NaN a sum of several NaNs keeps (payload, sign) is the
// compiler's choice of operand order in every kernel, not part of any contract here.
bool same_or_nan(float a, float b) { return bits(a) == bits(b) || (std::isnan(a) && std::isnan(b)); }
void expect_same_or_nan(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(same_or_nan(got[i], want[i])) << what << " at " << i << ": " << got[i] << " vs " << want[i];
}

}  // namespace

TEST(KernelsCpu, ReportsIsa) {
  RecordProperty("isa", gk::isa_name(gk::cpu_isa()));
  RecordProperty("features", gk::cpu_features());
  EXPECT_STRNE(gk::isa_name(gk::cpu_isa()), "?");
  EXPECT_FALSE(gk::cpu_features().empty());
}

TEST(KernelsCpu, CastToHalfMatchesScalarBitForBit) {
  for (DType t : {DType::F16, DType::BF16}) {
    for (float scale : {1.f, 0.25f, 1.f / 3.f, 4096.f}) {
      for (std::size_t n : kSizes) {
        const auto x = special_values(n, static_cast<std::uint32_t>(n * 7 + 1));
        std::vector<std::uint16_t> want(n);
        for (std::size_t i = 0; i < n; ++i)
          want[i] = t == DType::F16 ? gk::scaled_f16(x[i], scale) : gk::scaled_bf16(x[i], scale);
        for (gk::Isa isa : isas()) {
          std::vector<std::uint16_t> got(n + 1, 0xdead);  // one guard element
          gk::cast_to_half(t, x.data(), got.data(), n, scale, isa);
          for (std::size_t i = 0; i < n; ++i)
            ASSERT_EQ(got[i], want[i]) << gradsync::dtype_name(t) << " " << gk::isa_name(isa) << " n=" << n
                                       << " i=" << i << " x=" << x[i] << " scale=" << scale;
          EXPECT_EQ(got[n], 0xdead) << "wrote past the end";
        }
      }
    }
  }
}

TEST(KernelsCpu, CastReferenceIsRoundToNearestEven) {
  // Independent checks of the scalar reference on hand-picked values.
  EXPECT_EQ(gk::scaled_f16(1.f, 1.f), 0x3c00);
  EXPECT_EQ(gk::scaled_f16(65504.f, 1.f), 0x7bff);
  EXPECT_EQ(gk::scaled_f16(65520.f, 1.f), 0x7c00);             // rounds up to inf
  EXPECT_EQ(gk::scaled_f16(1.f + 0x1p-11f, 1.f), 0x3c00);      // tie -> even
  EXPECT_EQ(gk::scaled_f16(1.f + 3 * 0x1p-11f, 1.f), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(gk::scaled_f16(0x1p-24f, 1.f), 0x0001);            // smallest subnormal
  EXPECT_EQ(gk::scaled_f16(3.f, 0.5f), 0x3e00);                // 1.5
  EXPECT_EQ(gk::scaled_bf16(1.f + 0x1p-8f, 1.f), 0x3f80);      // tie -> even
  EXPECT_EQ(gk::scaled_bf16(1.f + 3 * 0x1p-8f, 1.f), 0x3f82);
  EXPECT_EQ(gk::scaled_bf16(std::numeric_limits<float>::max(), 1.f), 0x7f80);  // overflow -> inf
}

TEST(KernelsCpu, CastFromHalfAllPatterns) {
  std::vector<std::uint16_t> in(65536 + 5);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint16_t>(i);
  for (DType t : {DType::F16, DType::BF16}) {
    for (float scale : {1.f, 0.5f, 3.f}) {
      std::vector<float> want(in.size());
      for (std::size_t i = 0; i < in.size(); ++i)
        want[i] = t == DType::F16 ? gk::f16_scaled(in[i], scale) : gk::bf16_scaled(in[i], scale);
      for (gk::Isa isa : isas()) {
        std::vector<float> got(in.size());
        gk::cast_from_half(t, in.data(), got.data(), in.size(), scale, isa);
        expect_same_bits(got, want, std::string(gradsync::dtype_name(t)) + " " + gk::isa_name(isa));
      }
    }
  }
}

TEST(KernelsCpu, CastRoundTripOfRepresentableValues) {
  const auto x = gaussian(1000, 5);
  for (DType t : {DType::F16, DType::BF16}) {
    std::vector<std::uint16_t> h(x.size());
    gk::cast_to_half(t, x.data(), h.data(), x.size(), 1.f);
    std::vector<float> y(x.size()), h2f(x.size());
    gk::cast_from_half(t, h.data(), y.data(), y.size(), 1.f);
    // y is representable: a second round trip is exact
    std::vector<std::uint16_t> h2(x.size());
    gk::cast_to_half(t, y.data(), h2.data(), y.size(), 1.f);
    EXPECT_EQ(h, h2);
    const float rel = t == DType::F16 ? 0x1p-11f : 0x1p-8f;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (std::fabs(x[i]) > 1e-4f) {
        EXPECT_LE(std::fabs(y[i] - x[i]), rel * std::fabs(x[i])) << i;
      }
  }
}

TEST(KernelsCpu, SumSquaresMatchesLongDouble) {
  for (std::size_t n : kSizes) {
    const auto x = gaussian(n, 11, 3.f);
    long double ref = 0;
    for (float v : x) ref += static_cast<long double>(v) * v;
    for (gk::Isa isa : isas()) {
      const double got = gk::sum_squares(x.data(), n, isa);
      EXPECT_NEAR(got, static_cast<double>(ref), 1e-13 * static_cast<double>(ref) + 1e-300) << gk::isa_name(isa);
    }
  }
}

TEST(KernelsCpu, QsgdMatchesScalarBitForBit) {
  const gk::RngKey key = gk::rng_key(42, 1, 2, 3);
  for (std::uint32_t levels : {1u, 4u, 15u, 127u}) {
    // 3000: blocks of several 1024-element chunks of the fp32-lane norms (and a ragged tail)
    for (std::size_t block : {std::size_t{1}, std::size_t{16}, std::size_t{100}, std::size_t{512}, std::size_t{3000}}) {
      std::vector<std::size_t> sizes = kSizes;
      sizes.push_back(20011);  // several groups of the fused encoder
      for (std::size_t n : sizes) {
        auto x = gaussian(n, static_cast<std::uint32_t>(n + levels), 0.1f);
        if (n > 5) {
          x[3] = 0.f;
          x[4] = -0.f;
        }
        const std::size_t nb = gk::qsgd_num_blocks(n, block);
        // norms against long double
        std::vector<float> norms(nb);
        gk::qsgd_norms(x.data(), n, block, norms.data());
        for (gk::Isa isa : isas()) {  // every path sums in the same order: the same norms
          std::vector<float> isa_norms(nb, -1.f);
          gk::qsgd_norms(x.data(), n, block, isa_norms.data(), isa);
          expect_same_bits(isa_norms, norms, std::string("norms ") + gk::isa_name(isa));
        }
        for (std::size_t b = 0; b < nb; ++b) {
          long double s = 0;
          for (std::size_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
            s += static_cast<long double>(x[i]) * x[i];
          ASSERT_NEAR(norms[b], static_cast<float>(std::sqrt(s)), 1e-6f * norms[b]);
        }
        std::vector<std::uint8_t> want(n);
        std::vector<float> want_dec(n), want_acc(n, 1.5f);
        for (std::size_t i = 0; i < n; ++i) {
          const float nb_norm = norms[i / block];
          want[i] =
              gk::qsgd_encode(x[i], gk::qsgd_scale(nb_norm, levels), gk::bits_to_unit(gk::rng_bits(key, i)), levels);
          want_dec[i] = gk::qsgd_decode(want[i], gk::qsgd_unit(nb_norm, levels));
          want_acc[i] = 1.5f + want_dec[i];
          ASSERT_LE(want[i] & 0x7fu, levels);
        }
        for (gk::Isa isa : isas()) {
          std::vector<std::uint8_t> got(n + 1, 0xee);
          gk::qsgd_quantize(x.data(), n, block, norms.data(), levels, key, got.data(), isa);
          for (std::size_t i = 0; i < n; ++i)
            ASSERT_EQ(got[i], want[i]) << gk::isa_name(isa) << " n=" << n << " S=" << levels << " block=" << block
                                       << " i=" << i;
          EXPECT_EQ(got[n], 0xee);
          // the fused encoder (norms + codes in one pass) gives the same message
          std::vector<float> fused_norms(nb, -1.f);
          std::vector<std::uint8_t> fused(n + 1, 0xee);
          gk::qsgd_encode(x.data(), n, block, levels, key, fused_norms.data(), fused.data(), isa);
          expect_same_bits(fused_norms, norms, std::string("fused norms ") + gk::isa_name(isa));
          for (std::size_t i = 0; i < n; ++i)
            ASSERT_EQ(fused[i], want[i]) << "fused " << gk::isa_name(isa) << " i=" << i;
          EXPECT_EQ(fused[n], 0xee);
          std::vector<float> dec(n, -7.f), acc(n, 1.5f);
          gk::qsgd_dequantize(want.data(), norms.data(), n, block, levels, dec.data(), false, isa);
          gk::qsgd_dequantize(want.data(), norms.data(), n, block, levels, acc.data(), true, isa);
          expect_same_bits(dec, want_dec, std::string("dequantize ") + gk::isa_name(isa));
          expect_same_bits(acc, want_acc, std::string("dequantize+acc ") + gk::isa_name(isa));
        }
      }
    }
  }
}

TEST(KernelsCpu, QsgdCodesOfZeroAndTinyBuckets) {
  std::vector<float> zero(40, 0.f), tiny(40, 1e-39f);
  std::vector<float> norms(1);
  std::vector<std::uint8_t> codes(40, 0xff);
  for (auto* x : {&zero, &tiny}) {
    gk::qsgd_norms(x->data(), 40, 64, norms.data());
    gk::qsgd_quantize(x->data(), 40, 64, norms.data(), 8, gk::rng_key(1, 2, 3, 4), codes.data());
    for (auto c : codes) EXPECT_EQ(c, 0);  // nothing finite to encode: all zero, no NaN
  }
}

TEST(KernelsCpu, RandomStreamIsUniformAndKeyed) {
  const gk::RngKey a = gk::rng_key(1, 0, 0, 0), b = gk::rng_key(1, 1, 0, 0);
  double sum = 0, sumsq = 0;
  const int n = 200000;
  int same = 0;
  std::vector<int> hist(16, 0);
  for (int i = 0; i < n; ++i) {
    const float u = gk::bits_to_unit(gk::rng_bits(a, static_cast<std::uint64_t>(i)));
    ASSERT_GE(u, 0.f);
    ASSERT_LT(u, 1.f);
    sum += u;
    sumsq += static_cast<double>(u) * u;
    ++hist[static_cast<int>(u * 16)];
    same += gk::rng_bits(a, static_cast<std::uint64_t>(i)) == gk::rng_bits(b, static_cast<std::uint64_t>(i));
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(sumsq / n - (sum / n) * (sum / n), 1.0 / 12, 0.002);
  for (int h : hist) EXPECT_NEAR(h, n / 16, 5 * std::sqrt(n / 16.0));
  EXPECT_LT(same, 5);
}

TEST(KernelsCpu, SignMatchesScalarBitForBit) {
  for (std::size_t n : kSizes) {
    auto x = special_values(n, static_cast<std::uint32_t>(n + 99));
    for (auto& v : x)
      if (!std::isfinite(v)) v = 1.f;  // a scale from inf/nan is meaningless; signs of nan are tested below
    if (n > 3) {
      x[0] = 0.f;
      x[1] = -0.f;
    }
    long double ss = 0;
    for (float v : x) ss += static_cast<long double>(v) * v;
    const float ref_scale = n ? static_cast<float>(std::sqrt(static_cast<double>(ss) / static_cast<double>(n))) : 0.f;
    std::vector<std::uint8_t> want(gk::sign_bytes(n), 0);
    std::vector<float> want_res(n), want_dec(n), want_acc(n, 2.f);
    for (std::size_t i = 0; i < n; ++i) {
      const bool bit = gk::sign_bit(x[i]);
      want[i / 8] = static_cast<std::uint8_t>(want[i / 8] | (bit << (i % 8)));
      want_res[i] = gk::ef_residual(x[i], gk::sign_decode(bit, ref_scale));
      want_dec[i] = gk::sign_decode(bit, ref_scale);
      want_acc[i] = 2.f + want_dec[i];
    }
    for (gk::Isa isa : isas()) {
      std::vector<std::uint8_t> got(gk::sign_bytes(n) + 1, 0xab);
      std::vector<float> res(n);
      const float scale = gk::sign_compress(x.data(), n, got.data(), res.data(), isa);
      ASSERT_EQ(bits(scale), bits(ref_scale)) << gk::isa_name(isa) << " n=" << n;
      for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << gk::isa_name(isa) << " byte " << i;
      EXPECT_EQ(got[want.size()], 0xab);
      expect_same_bits(res, want_res, std::string("residual ") + gk::isa_name(isa));
      // in place: residual aliasing x
      auto y = x;
      std::vector<std::uint8_t> got2(gk::sign_bytes(n));
      gk::sign_compress(y.data(), n, got2.data(), y.data(), isa);
      expect_same_bits(y, want_res, std::string("residual in place ") + gk::isa_name(isa));
      std::vector<float> dec(n, 9.f), acc(n, 2.f);
      gk::sign_decompress(want.data(), ref_scale, n, dec.data(), false, isa);
      gk::sign_decompress(want.data(), ref_scale, n, acc.data(), true, isa);
      expect_same_bits(dec, want_dec, std::string("sign decode ") + gk::isa_name(isa));
      expect_same_bits(acc, want_acc, std::string("sign decode+acc ") + gk::isa_name(isa));
    }
  }
}

TEST(KernelsCpu, SignOfSpecialValues) {
  EXPECT_TRUE(gk::sign_bit(0.f));
  EXPECT_TRUE(gk::sign_bit(-0.f));
  EXPECT_FALSE(gk::sign_bit(NAN));
  EXPECT_FALSE(gk::sign_bit(-1e-30f));
  std::vector<float> x = {NAN, -0.f, 1.f, -1.f, INFINITY, -INFINITY, 0.f, -NAN,
                          3.f, -3.f, 0.f, 0.f,  0.f,      0.f,       0.f, 0.f};
  for (gk::Isa isa : isas()) {
    std::vector<std::uint8_t> b(2);
    gk::sign_compress(x.data(), x.size(), b.data(), nullptr, isa);
    EXPECT_EQ(b[0], 0b01010110) << gk::isa_name(isa);
    EXPECT_EQ(b[1], 0b11111101) << gk::isa_name(isa);
  }
}

TEST(KernelsCpu, ElementwiseHelpersMatchScalar) {
  for (std::size_t n : kSizes) {
    const auto a = gaussian(n, 3), b = gaussian(n, 4);
    for (gk::Isa isa : isas()) {
      auto x = a;
      gk::add_inplace(x.data(), b.data(), n, isa);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bits(x[i]), bits(a[i] + b[i]));
      std::vector<float> r(n);
      gk::ef_residual(a.data(), b.data(), r.data(), n, isa);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bits(r[i]), bits(a[i] - b[i]));
      x = a;
      gk::scale_inplace(x.data(), n, 0.3f, isa);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bits(x[i]), bits(a[i] * 0.3f));
    }
  }
}

TEST(KernelsCpu, FiniteChecksFindEveryInfAndNan) {
  for (std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{1000}, std::size_t{9000}}) {
    for (gk::Isa isa : isas()) {
      auto x = gaussian(n, 8);
      EXPECT_TRUE(gk::all_finite(x.data(), n, isa));
      auto y = x;
      EXPECT_TRUE(gk::unscale_check_finite(y.data(), n, 0.5f, isa));
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bits(y[i]), bits(x[i] * 0.5f));
      for (std::size_t pos : {std::size_t{0}, n / 2, n - 1}) {
        for (float bad : {INFINITY, -INFINITY, NAN}) {
          auto z = x;
          z[pos] = bad;
          EXPECT_FALSE(gk::all_finite(z.data(), n, isa)) << gk::isa_name(isa) << " n=" << n << " pos=" << pos;
          EXPECT_FALSE(gk::unscale_check_finite(z.data(), n, 0.5f, isa)) << gk::isa_name(isa);
        }
      }
      // finite input whose unscaled value overflows is still "finite input" (GradScaler checks inputs)
      std::vector<float> big(n, 3e38f);
      EXPECT_TRUE(gk::unscale_check_finite(big.data(), n, 2.f, isa));
    }
  }
  EXPECT_TRUE(gk::all_finite(nullptr, 0));
}

namespace {

// Reference top-k: stable sort of indices by |x| descending (ties: lower index first).
std::vector<std::int32_t> topk_reference(const std::vector<float>& x, std::size_t k) {
  std::vector<std::int32_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](std::int32_t a, std::int32_t b) {
    return gk::magnitude_key(x[static_cast<std::size_t>(a)]) > gk::magnitude_key(x[static_cast<std::size_t>(b)]);
  });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace

TEST(KernelsCpu, TopkSelectsTheTrueLargest) {
  std::mt19937 rng(5);
  for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{10}, std::size_t{1000}, std::size_t{50000}}) {
    for (int kind = 0; kind < 4; ++kind) {
      std::vector<float> x = gaussian(n, static_cast<std::uint32_t>(n + kind));
      if (kind == 1)  // many ties: few distinct magnitudes, both signs
        for (auto& v : x) v = static_cast<float>(static_cast<int>(rng() % 7) - 3);
      if (kind == 2) std::fill(x.begin(), x.end(), -2.5f);  // all equal
      if (kind == 3)                                        // concentrated in one histogram bin
        for (auto& v : x) v = 1.f + static_cast<float>(rng() % 1000) * 1e-7f;
      for (std::size_t k : {std::size_t{1}, n / 100 + 1, n / 3 + 1, n}) {
        if (k > n) continue;
        std::vector<std::int32_t> idx(k);
        std::vector<float> vals(k);
        gk::topk_select(x.data(), n, k, idx.data(), vals.data());
        const auto want = topk_reference(x, k);
        ASSERT_EQ(idx, want) << "n=" << n << " k=" << k << " kind=" << kind;
        for (std::size_t j = 0; j < k; ++j) ASSERT_EQ(bits(vals[j]), bits(x[static_cast<std::size_t>(idx[j])]));
      }
    }
  }
}

TEST(KernelsCpu, ScatterAdd) {
  std::vector<float> out(10, 1.f);
  const std::vector<std::int32_t> idx = {0, 3, 9};
  const std::vector<float> vals = {2.f, -4.f, 8.f};
  gk::scatter_add(idx.data(), vals.data(), 3, 0.5f, out.data());
  EXPECT_EQ(out, (std::vector<float>{2.f, 1.f, 1.f, -1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 5.f}));
}

namespace {

// The unfused top-k encoder that topk_encode_ef must equal bit for bit.
void topk_encode_reference(std::vector<float>& x, std::vector<float>& memory, std::size_t k,
                           std::vector<std::int32_t>& idx, std::vector<float>& vals) {
  const std::size_t n = x.size();
  gk::add_inplace(x.data(), memory.data(), n, gk::Isa::Scalar);
  gk::topk_select(x.data(), n, k, idx.data(), vals.data());
  memory = x;
  gk::scatter_add(idx.data(), vals.data(), k, -1.f, memory.data());
}

// Inputs that stress the sampled bound: ties, all equal, zeros, inf/NaN, one spike.
std::vector<float> topk_input(std::size_t n, int kind, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x = gaussian(n, seed);
  switch (kind) {
    case 1:  // few distinct magnitudes, both signs
      for (auto& v : x) v = static_cast<float>(static_cast<int>(rng() % 7) - 3);
      break;
    case 2:  // all equal
      std::fill(x.begin(), x.end(), -2.5f);
      break;
    case 3:  // all zero, both signs
      for (auto& v : x) v = (rng() & 1) ? 0.f : -0.f;
      break;
    case 4:  // every kind of float, inf and NaN payloads included
      x = special_values(n, seed);
      break;
    case 5:  // concentrated in one radix bin
      for (auto& v : x) v = 1.f + static_cast<float>(rng() % 1000) * 1e-7f;
      break;
    case 6:  // mostly zero, a few large values (fewer than k of them when k is large)
      for (std::size_t i = 0; i < n; ++i)
        if (rng() % 500 != 0) x[i] = 0.f;
      break;
    default:
      break;
  }
  return x;
}

}  // namespace

TEST(KernelsCpu, TopkEncodeEfMatchesTheUnfusedEncoder) {
  std::size_t sampled = 0, exact = 0;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{17}, std::size_t{1000}, std::size_t{4099},
                        std::size_t{5000}, std::size_t{20011}, std::size_t{100003}}) {
    for (int kind = 0; kind < 7; ++kind) {
      const auto x0 = topk_input(n, kind, static_cast<std::uint32_t>(n * 7 + static_cast<std::size_t>(kind)));
      const auto m0 = gaussian(n, static_cast<std::uint32_t>(n + 3), kind == 3 ? 0.f : 0.1f);
      for (std::size_t k : {std::size_t{0}, std::size_t{1}, n / 100 + 1, n / 9 + 1, n / 3 + 1, n}) {
        if (k > n) continue;
        auto want_x = x0, want_m = m0;
        std::vector<std::int32_t> want_idx(k);
        std::vector<float> want_vals(k);
        topk_encode_reference(want_x, want_m, k, want_idx, want_vals);
        for (gk::Isa isa : isas()) {
          auto x = x0, m = m0;
          std::vector<std::int32_t> idx(k);
          std::vector<float> vals(k);
          const gk::TopkPath path = gk::topk_encode_ef(x.data(), m.data(), n, k, idx.data(), vals.data(), isa);
          (path == gk::TopkPath::Sampled ? sampled : exact)++;
          const std::string what = std::string(gk::isa_name(isa)) + " n=" + std::to_string(n) +
                                   " k=" + std::to_string(k) + " kind=" + std::to_string(kind);
          ASSERT_EQ(idx, want_idx) << what;
          expect_same_bits(vals, want_vals, "vals " + what);
          expect_same_bits(x, want_x, "x " + what);
          expect_same_bits(m, want_m, "memory " + what);
        }
      }
    }
  }
  // both paths ran (Gaussian inputs with small k sample; all-equal inputs cannot)
  EXPECT_GT(sampled, 0u);
  EXPECT_GT(exact, 0u);
}

TEST(KernelsCpu, TopkEncodeEfTakesTheSampledPathOnGradients) {
  const std::size_t n = 1 << 18;
  const auto x0 = gaussian(n, 21), m0 = gaussian(n, 22, 0.1f);
  for (gk::Isa isa : isas()) {
    auto x = x0, m = m0;
    std::vector<std::int32_t> idx(n / 100);
    std::vector<float> vals(n / 100);
    EXPECT_EQ(gk::topk_encode_ef(x.data(), m.data(), n, n / 100, idx.data(), vals.data(), isa),
              gk::TopkPath::Sampled)
        << gk::isa_name(isa);
    std::vector<float> y(n, 1.f), zero(n, 0.f);
    EXPECT_EQ(gk::topk_encode_ef(y.data(), zero.data(), n, n / 100, idx.data(), vals.data(), isa), gk::TopkPath::Exact)
        << "all equal: " << gk::isa_name(isa);
  }
}

TEST(KernelsCpu, TopkEncodeEfIsExactForAnyBound) {
  // The bound only steers the speed: too low (list overflows), exact, too high (fewer than
  // k candidates) and "collect nothing" all give the unfused encoder's bits.
  for (std::size_t n : {std::size_t{33}, std::size_t{4096}, std::size_t{30001}}) {
    for (int kind : {0, 1, 4, 6}) {
      const auto x0 = topk_input(n, kind, static_cast<std::uint32_t>(n + 100 + static_cast<std::size_t>(kind)));
      const auto m0 = gaussian(n, 77, 0.01f);
      for (std::size_t k : {std::size_t{1}, n / 50 + 1, n / 2}) {
        auto want_x = x0, want_m = m0;
        std::vector<std::int32_t> want_idx(k);
        std::vector<float> want_vals(k);
        topk_encode_reference(want_x, want_m, k, want_idx, want_vals);
        std::vector<std::uint32_t> keys(n);
        for (std::size_t i = 0; i < n; ++i) keys[i] = gk::magnitude_key(want_x[i]);
        std::sort(keys.begin(), keys.end(), std::greater<std::uint32_t>());
        const std::uint32_t kth = keys[k - 1];
        // the path: the candidates (keys >= bound) decide when there are k to cap of them
        const auto cap = static_cast<std::ptrdiff_t>(std::min(n, 2 * k + 4096));
        for (const std::uint32_t bound : {0u, kth, kth + 1, 0xffffffffu}) {
          const auto count = std::count_if(keys.begin(), keys.end(), [&](std::uint32_t c) { return c >= bound; });
          const gk::TopkPath path = bound != 0xffffffffu && count >= static_cast<std::ptrdiff_t>(k) && count <= cap
                                        ? gk::TopkPath::Sampled
                                        : gk::TopkPath::Exact;
          if (bound == kth + 1) {
            ASSERT_EQ(path, gk::TopkPath::Exact);  // fewer than k: the fallback
          }
          for (gk::Isa isa : isas()) {
            auto x = x0, m = m0;
            std::vector<std::int32_t> idx(k);
            std::vector<float> vals(k);
            const std::string what = std::string(gk::isa_name(isa)) + " n=" + std::to_string(n) +
                                     " k=" + std::to_string(k) + " kind=" + std::to_string(kind) +
                                     " bound=" + std::to_string(bound);
            EXPECT_EQ(gk::detail::topk_encode_ef_bound(x.data(), m.data(), n, k, idx.data(), vals.data(), bound, isa),
                      path)
                << what;
            ASSERT_EQ(idx, want_idx) << what;
            expect_same_bits(vals, want_vals, "vals " + what);
            expect_same_bits(x, want_x, "x " + what);
            expect_same_bits(m, want_m, "memory " + what);
          }
        }
      }
    }
  }
}

TEST(KernelsCpu, SignCompressEfMatchesTheEagerCompositionOverSteps) {
  // The one-pass encoder keeps its memory deferred (the last input r and its scale). Over
  // several steps its codes, scales, memory (= the eager x) and resolved residual
  // sign_residual(r, scale) must be the bits of the eager form
  //   x = g; add_inplace(x, e); scale = sign_compress(x, n, bits, e)
  // on every ISA: from a nonzero first residual (last = e, last_scale = 0), then gradients
  // with exact zeros of both signs and cancellations (x = 0), an all-zero one, one with
  // NaN / inf / subnormals (which poison the scale and the memory, as they always did), and
  // a plain one after that; sizes not multiple of 8, 16 or 32, and larger than 32. Where
  // several NaNs meet, which one survives is the compiler's operand order in both forms.
  std::vector<std::size_t> sizes = kSizes;
  sizes.push_back(100003);
  for (std::size_t n : sizes) {
    const auto seed = static_cast<std::uint32_t>(n + 5);
    for (gk::Isa isa : isas()) {
      std::vector<float> e = gaussian(n, seed + 1, 0.5f);  // the eager memory
      std::vector<float> last = e;                         // the deferred one: residual e
      float last_scale = 0.f;
      for (int step = 0; step < 5; ++step) {
        const std::string what = std::string(gk::isa_name(isa)) + " n=" + std::to_string(n) +
                                 " step=" + std::to_string(step);
        std::vector<float> g = gaussian(n, seed + 10 + static_cast<std::uint32_t>(step));
        if (step == 1)
          for (std::size_t i = 0; i < n; i += 3) g[i] = (i % 2) ? -0.f : -e[i];  // -0, and x = e - e = 0
        if (step == 2) std::fill(g.begin(), g.end(), 0.f);
        if (step == 3) g = special_values(n, seed + 3);
        // eager
        auto x = g;
        std::vector<std::uint8_t> want(gk::sign_bytes(n) + 1, 0xab), got(gk::sign_bytes(n) + 1, 0xab);
        gk::add_inplace(x.data(), e.data(), n, isa);
        const float want_scale = gk::sign_compress(x.data(), n, want.data(), e.data(), isa);
        // one pass
        const auto g_in = g;
        const float scale = gk::sign_compress_ef(g.data(), last.data(), last_scale, n, got.data(), isa);
        last_scale = scale;
        ASSERT_TRUE(same_or_nan(scale, want_scale)) << what << ": " << scale << " vs " << want_scale;
        ASSERT_EQ(got, want) << what;
        expect_same_bits(g, g_in, "sign_compress_ef left the gradient " + what);
        expect_same_or_nan(last, x, "sign_compress_ef memory = x " + what);
        std::vector<float> res(n);
        gk::sign_residual(last.data(), last_scale, n, res.data());
        expect_same_or_nan(res, e, "sign_compress_ef residual " + what);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(KernelsCpu, QsgdOfSpecialValuesMatchesScalar) {
  // The vector paths compute floor and min(level, S) in integers: check them where that is
  // delicate (NaN and inf inputs and norms, |x| * scale far above S, -0, subnormals), with
  // norms from the data, tiny norms (huge scales) and NaN norms, on the 64-element packing
  // path (block 512) and the 16-element one (block 48).
  const gk::RngKey key = gk::rng_key(9, 8, 7, 6);
  for (std::size_t n : {std::size_t{1000}, std::size_t{4099}}) {
    const auto x = special_values(n, static_cast<std::uint32_t>(n + 17));
    for (std::size_t block : {std::size_t{48}, std::size_t{512}}) {
      const std::size_t nb = gk::qsgd_num_blocks(n, block);
      for (int norm_kind = 0; norm_kind < 3; ++norm_kind) {
        std::vector<float> norms(nb);
        gk::qsgd_norms(x.data(), n, block, norms.data());
        for (std::size_t b = 0; b < nb; ++b) {
          if (norm_kind == 1) norms[b] = 1e-30f * static_cast<float>(b + 1);
          if (norm_kind == 2 && b % 2 == 0) norms[b] = NAN;
        }
        for (std::uint32_t levels : {1u, 16u, 127u}) {
          std::vector<std::uint8_t> want(n);
          for (std::size_t i = 0; i < n; ++i)
            want[i] = gk::qsgd_encode(x[i], gk::qsgd_scale(norms[i / block], levels),
                                      gk::bits_to_unit(gk::rng_bits(key, i)), levels);
          for (gk::Isa isa : isas()) {
            std::vector<std::uint8_t> got(n, 0xee);
            gk::qsgd_quantize(x.data(), n, block, norms.data(), levels, key, got.data(), isa);
            ASSERT_EQ(got, want) << gk::isa_name(isa) << " n=" << n << " block=" << block
                                 << " norms=" << norm_kind << " S=" << levels;
          }
        }
      }
    }
  }
}

namespace {

// BLAS sgemm's semantics in double: C = alpha op(A) op(B) + beta C, column-major (C is not
// read when beta is 0). The reference the GPU's calls are checked with below.
void gemm_reference(const gk::GemmCall& g) {
  for (std::int64_t j = 0; j < g.n; ++j)
    for (std::int64_t i = 0; i < g.m; ++i) {
      double s = 0;
      for (std::int64_t l = 0; l < g.k; ++l) {
        const double a = g.trans_a ? g.a[l + i * g.lda] : g.a[i + l * g.lda];
        const double b = g.trans_b ? g.b[j + l * g.ldb] : g.b[l + j * g.ldb];
        s += a * b;
      }
      float& c = g.c[i + j * g.ldc];
      c = static_cast<float>(g.alpha * s + (g.beta != 0.f ? g.beta * static_cast<double>(c) : 0.0));
    }
}

// n standard normal floats.
std::vector<float> normals(std::mt19937& rng, std::size_t n) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST(KernelsCpu, PowerSgdGemmLayoutsGiveTheCpuKernelsProducts) {
  // The column-major calls the CUDA path hands to cuBLAS (kernels/powersgd_gemm.hpp), run
  // through a reference GEMM, against the CPU kernels on the bucket's row-major matrices:
  // P = A Q, Q = A^T P, and D = P Q^T with memory = A - D.
  std::mt19937 rng(21);
  auto fill = [&](std::size_t n) { return normals(rng, n); };
  auto expect_near = [](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4f * (1.f + std::fabs(want[i]))) << what << " element " << i;
  };
  for (const auto& [rows, cols, rank] : std::vector<std::tuple<std::int64_t, std::int64_t, int>>{
           {1, 9, 1}, {7, 5, 1}, {33, 17, 2}, {64, 300, 4}, {300, 64, 3}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols) + ", rank " + std::to_string(rank));
    const auto n = static_cast<std::size_t>(rows * cols);
    const std::vector<float> a = fill(n), q0 = fill(static_cast<std::size_t>(cols * rank));
    const auto np = static_cast<std::size_t>(rows * rank);

    std::vector<float> a_cpu = a, p_cpu(np);
    gk::powersgd_project(a_cpu.data(), nullptr, rows, cols, q0.data(), rank, p_cpu.data());
    std::vector<float> p_gemm(np, NAN);
    gemm_reference(gk::powersgd_p_gemm(a.data(), rows, cols, q0.data(), rank, p_gemm.data()));
    expect_near(p_gemm, p_cpu, "P = A Q");

    std::vector<float> q_cpu(q0.size()), q_gemm(q0.size(), NAN);
    gk::powersgd_back_project(a.data(), rows, cols, p_cpu.data(), rank, q_cpu.data());
    gemm_reference(gk::powersgd_q_gemm(a.data(), rows, cols, p_cpu.data(), rank, q_gemm.data()));
    expect_near(q_gemm, q_cpu, "Q = A^T P");

    std::vector<float> d_cpu = a, m_cpu(n);
    gk::powersgd_expand(d_cpu.data(), m_cpu.data(), rows, cols, p_cpu.data(), q_cpu.data(), rank);
    std::vector<float> m_gemm = a, d_gemm(n, NAN);  // as the CUDA path: mem = copy of A, then -= D; A = D
    gemm_reference(gk::powersgd_d_gemm(p_cpu.data(), q_cpu.data(), rows, cols, rank, -1.f, 1.f, m_gemm.data()));
    gemm_reference(gk::powersgd_d_gemm(p_cpu.data(), q_cpu.data(), rows, cols, rank, 1.f, 0.f, d_gemm.data()));
    expect_near(d_gemm, d_cpu, "D = P Q^T");
    expect_near(m_gemm, m_cpu, "memory = A - D");
  }
}

TEST(KernelsCpu, PowerSgdProductsMatchScalarBitForBitAndDouble) {
  // Odd shapes (row blocks of 4 and 16-lane blocks with tails) and ranks around the
  // 4-column blocking; every ISA against the scalar path and a double-precision product.
  std::mt19937 rng(11);
  auto fill = [&](std::size_t n) { return normals(rng, n); };
  for (std::int64_t rows : {1, 3, 5, 17})
    for (std::int64_t cols : {1, 7, 16, 17, 33, 100})
      for (int rank : {1, 3, 4, 5, 9}) {
        const auto n = static_cast<std::size_t>(rows * cols);
        const std::vector<float> a0 = fill(n), mem = fill(n), q0 = fill(static_cast<std::size_t>(cols * rank));
        std::vector<float> a_ref, p_ref, q_ref, d_ref, m_ref;
        for (gk::Isa isa : isas()) {
          std::vector<float> a = a0, p(static_cast<std::size_t>(rows * rank)), q(q0.size()), m(n);
          gk::powersgd_project(a.data(), mem.data(), rows, cols, q0.data(), rank, p.data(), isa);
          gk::powersgd_back_project(a.data(), rows, cols, p.data(), rank, q.data(), isa);
          std::vector<float> dd = a;
          gk::powersgd_expand(dd.data(), m.data(), rows, cols, p.data(), q.data(), rank, isa);
          if (isa == gk::Isa::Scalar) {
            a_ref = a, p_ref = p, q_ref = q, d_ref = dd, m_ref = m;
            // against double products of the same inputs
            for (std::int64_t i = 0; i < rows; ++i)
              for (std::int64_t j = 0; j < cols; ++j)
                ASSERT_EQ(a[static_cast<std::size_t>(i * cols + j)],
                          a0[static_cast<std::size_t>(i * cols + j)] + mem[static_cast<std::size_t>(i * cols + j)]);
            // got == the double sum of term(0..count-1), within 1e-6 of the sum of |terms|
            auto near_sum = [](float got, std::int64_t count, const auto& term) {
              double s = 0, sa = 0;
              for (std::int64_t t = 0; t < count; ++t) {
                const double v = term(t);
                s += v;
                sa += std::fabs(v);
              }
              EXPECT_NEAR(got, s, 1e-6 * sa + 1e-30);
            };
            auto at = [](const std::vector<float>& v, std::int64_t i) {
              return static_cast<double>(v[static_cast<std::size_t>(i)]);
            };
            for (int k = 0; k < rank; ++k) {
              for (std::int64_t i = 0; i < rows; ++i)
                near_sum(p[static_cast<std::size_t>(k * rows + i)], cols,
                         [&](std::int64_t j) { return at(a, i * cols + j) * at(q0, k * cols + j); });
              for (std::int64_t j = 0; j < cols; ++j)
                near_sum(q[static_cast<std::size_t>(k * cols + j)], rows,
                         [&](std::int64_t i) { return at(a, i * cols + j) * at(p, k * rows + i); });
            }
            for (std::int64_t i = 0; i < rows; ++i)
              for (std::int64_t j = 0; j < cols; ++j) {
                const auto e = static_cast<std::size_t>(i * cols + j);
                near_sum(dd[e], rank, [&](std::int64_t k) { return at(p, k * rows + i) * at(q, k * cols + j); });
                EXPECT_EQ(m[e], gk::ef_residual(a[e], dd[e]));  // memory = input - approximation, one rounding
              }
            continue;
          }
          EXPECT_EQ(a, a_ref) << gk::isa_name(isa) << " " << rows << "x" << cols << " r" << rank;
          EXPECT_EQ(p, p_ref) << gk::isa_name(isa) << " " << rows << "x" << cols << " r" << rank;
          EXPECT_EQ(q, q_ref) << gk::isa_name(isa) << " " << rows << "x" << cols << " r" << rank;
          EXPECT_EQ(dd, d_ref) << gk::isa_name(isa) << " " << rows << "x" << cols << " r" << rank;
          EXPECT_EQ(m, m_ref) << gk::isa_name(isa) << " " << rows << "x" << cols << " r" << rank;
        }
        // mem = nullptr: no error feedback in project, no memory written by expand.
        std::vector<float> a = a0, p(static_cast<std::size_t>(rows * rank));
        gk::powersgd_project(a.data(), nullptr, rows, cols, q0.data(), rank, p.data());
        EXPECT_EQ(a, a0);
        gk::powersgd_expand(a.data(), nullptr, rows, cols, p.data(), q0.data(), rank);
      }
}
