// GPU tests (label gpu): every CUDA kernel of runtime/kernels/ against the CPU kernels on
// fresh random data, with the outputs poisoned first (0xff bytes: NaN floats, 0xff codes)
// so a kernel that skips an element cannot pass. Where cudaGetDeviceCount fails (no driver,
// "driver version is insufficient") or finds no device, every test skips with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu_kernels.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cuda_kernels.hpp"

namespace gk = gradsync::kernels;
namespace gc = gradsync::kernels::cuda;
using gradsync::DeviceBuffer;
using gradsync::DType;

namespace {

class GpuKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!gradsync::cuda_device_available(&why)) GTEST_SKIP() << "no usable CUDA device (" << why << ")";
    GS_CUDA(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }

  // Device copy of a host vector.
  template <typename T>
  DeviceBuffer upload(const std::vector<T>& v) {
    DeviceBuffer d(std::max<std::size_t>(1, v.size() * sizeof(T)));
    GS_CUDA(cudaMemcpyAsync(d.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream_));
    return d;
  }
  // Poisoned device buffer of `count` T.
  template <typename T>
  DeviceBuffer poisoned(std::size_t count) {
    DeviceBuffer d(std::max<std::size_t>(1, count * sizeof(T)));
    GS_CUDA(cudaMemsetAsync(d.get(), 0xff, count * sizeof(T), stream_));
    return d;
  }
  template <typename T>
  std::vector<T> download(const DeviceBuffer& d, std::size_t count) {
    std::vector<T> v(count);
    GS_CUDA(cudaMemcpyAsync(v.data(), d.get(), count * sizeof(T), cudaMemcpyDeviceToHost, stream_));
    GS_CUDA(cudaStreamSynchronize(stream_));
    return v;
  }

  cudaStream_t stream_ = nullptr;
};

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, bool specials = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng) * std::ldexp(1.f, static_cast<int>(rng() % 20) - 10);
  if (specials && n > 8) {
    v[0] = INFINITY;
    v[1] = -INFINITY;
    v[2] = NAN;
    v[3] = -0.f;
    v[4] = 1e-40f;          // subnormal
    v[5] = 65520.f;         // fp16 overflow
    v[6] = 1.f + 0x1p-11f;  // fp16 tie
    v[7] = 1.f + 0x1p-8f;   // bf16 tie
  }
  return v;
}

template <typename T>
void expect_same_bytes(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(T)), 0) << what << " differs at " << i;
}

const std::vector<std::size_t> kSizes = {1, 31, 1000, 100003};

}  // namespace

TEST_F(GpuKernels, Casts) {
  for (std::size_t n : kSizes) {
    const auto x = random_floats(n, static_cast<std::uint32_t>(n), true);
    for (DType t : {DType::F16, DType::BF16}) {
      std::vector<std::uint16_t> want(n);
      gk::cast_to_half(t, x.data(), want.data(), n, 0.25f);
      auto dx = upload(x);
      auto dh = poisoned<std::uint16_t>(n);
      gc::cast_to_half(t, dx.as<float>(), dh.as<std::uint16_t>(), n, 0.25f, stream_);
      expect_same_bytes(download<std::uint16_t>(dh, n), want, "cast_to_half");

      std::vector<float> back(n);
      gk::cast_from_half(t, want.data(), back.data(), n, 2.f);
      auto dback = poisoned<float>(n);
      gc::cast_from_half(t, dh.as<std::uint16_t>(), dback.as<float>(), n, 2.f, stream_);
      expect_same_bytes(download<float>(dback, n), back, "cast_from_half");
    }
  }
}

TEST_F(GpuKernels, Qsgd) {
  const gk::RngKey key = gk::rng_key(7, 3, 11, 2);
  for (std::size_t n : kSizes) {
    for (std::size_t block : {std::size_t{64}, std::size_t{512}}) {
      const auto x = random_floats(n, static_cast<std::uint32_t>(n + block));
      const std::size_t nb = gk::qsgd_num_blocks(n, block);
      std::vector<float> norms(nb);
      gk::qsgd_norms(x.data(), n, block, norms.data());
      auto dx = upload(x);
      auto dnorms = poisoned<float>(nb);
      gc::qsgd_norms(dx.as<float>(), n, block, dnorms.as<float>(), stream_);
      const auto gnorms = download<float>(dnorms, nb);
      for (std::size_t b = 0; b < nb; ++b) ASSERT_NEAR(gnorms[b], norms[b], 1e-6f * norms[b]) << "block " << b;

      // Quantisation with the same (CPU) norms must give the same codes bit for bit.
      auto dn = upload(norms);
      std::vector<std::uint8_t> codes(n);
      gk::qsgd_quantize(x.data(), n, block, norms.data(), 15, key, codes.data());
      auto dcodes = poisoned<std::uint8_t>(n);
      gc::qsgd_quantize(dx.as<float>(), n, block, dn.as<float>(), 15, key, dcodes.as<std::uint8_t>(), stream_);
      expect_same_bytes(download<std::uint8_t>(dcodes, n), codes, "qsgd codes");

      std::vector<float> dec(n, 0.5f);
      gk::qsgd_dequantize(codes.data(), norms.data(), n, block, 15, dec.data(), true);
      auto dout = upload(std::vector<float>(n, 0.5f));
      gc::qsgd_dequantize(dcodes.as<std::uint8_t>(), dn.as<float>(), n, block, 15, dout.as<float>(), true, stream_);
      expect_same_bytes(download<float>(dout, n), dec, "qsgd dequantize");
    }
  }
}

TEST_F(GpuKernels, Sign) {
  for (std::size_t n : kSizes) {
    const auto x = random_floats(n, static_cast<std::uint32_t>(3 * n));
    std::vector<std::uint8_t> bits(gk::sign_bytes(n));
    std::vector<float> res(n);
    const float scale = gk::sign_compress(x.data(), n, bits.data(), res.data());
    auto dx = upload(x);
    auto dbits = poisoned<std::uint8_t>(bits.size());
    auto dres = poisoned<float>(n);
    auto dscale = poisoned<float>(1);
    DeviceBuffer scratch;
    gc::sign_compress(dx.as<float>(), n, dbits.as<std::uint8_t>(), dres.as<float>(), dscale.as<float>(), scratch,
                      stream_);
    const float gscale = download<float>(dscale, 1)[0];
    ASSERT_EQ(gscale, scale) << "n=" << n;  // double sums of exact squares round to the same fp32
    expect_same_bytes(download<std::uint8_t>(dbits, bits.size()), bits, "sign bits");
    expect_same_bytes(download<float>(dres, n), res, "sign residual");

    std::vector<float> dec(n, -1.f);
    gk::sign_decompress(bits.data(), scale, n, dec.data(), true);
    auto dout = upload(std::vector<float>(n, -1.f));
    gc::sign_decompress(dbits.as<std::uint8_t>(), dscale.as<float>(), n, dout.as<float>(), true, stream_);
    expect_same_bytes(download<float>(dout, n), dec, "sign decode");
  }
}

TEST_F(GpuKernels, SignWithDeferredMemory) {
  // Three steps of the one-pass error-feedback encoder against the CPU's: the same bits,
  // scale and memory (the scale read and written in device memory).
  for (std::size_t n : kSizes) {
    std::vector<float> last(n, 0.f);
    float scale = 0.f;
    auto dlast = upload(last);
    auto dscale = upload(std::vector<float>{0.f});
    DeviceBuffer scratch;
    for (std::uint32_t step = 0; step < 3; ++step) {
      const auto x = random_floats(n, static_cast<std::uint32_t>(7 * n + step));
      std::vector<std::uint8_t> bits(gk::sign_bytes(n));
      scale = gk::sign_compress_ef(x.data(), last.data(), scale, n, bits.data());
      auto dx = upload(x);
      auto dbits = poisoned<std::uint8_t>(bits.size());
      gc::sign_compress_ef(dx.as<float>(), dlast.as<float>(), dscale.as<float>(), n, dbits.as<std::uint8_t>(),
                           scratch, stream_);
      ASSERT_EQ(download<float>(dscale, 1)[0], scale) << "n=" << n << " step " << step;
      expect_same_bytes(download<std::uint8_t>(dbits, bits.size()), bits, "sign_compress_ef bits");
      expect_same_bytes(download<float>(dlast, n), last, "sign_compress_ef memory");
    }
  }
}

TEST_F(GpuKernels, OrthogonalizeGivesOrthonormalColumns) {
  // Modified Gram-Schmidt against a double reference of the same steps; a zero column stays zero.
  for (std::int64_t rows : {7, 1000, 4099}) {  // rows >= cols: no column cancels to rounding noise
    for (int cols : {1, 2, 4}) {
      auto p = random_floats(static_cast<std::size_t>(rows) * cols, static_cast<std::uint32_t>(rows + cols));
      if (cols == 4) std::fill(p.begin() + rows, p.begin() + 2 * rows, 0.f);  // column 1 is zero
      std::vector<double> want(p.begin(), p.end());
      const auto ur = static_cast<std::size_t>(rows);
      for (int i = 0; i < cols; ++i) {
        double nn = 0;
        for (std::size_t r = 0; r < ur; ++r) nn += want[i * ur + r] * want[i * ur + r];
        const double norm = std::sqrt(nn);
        for (std::size_t r = 0; r < ur; ++r) want[i * ur + r] = norm > 0 ? want[i * ur + r] / norm : 0.0;
        for (int j = i + 1; j < cols; ++j) {
          double d = 0;
          for (std::size_t r = 0; r < ur; ++r) d += want[i * ur + r] * want[j * ur + r];
          for (std::size_t r = 0; r < ur; ++r) want[j * ur + r] -= d * want[i * ur + r];
        }
      }
      auto dp = upload(p);
      gc::orthogonalize(dp.as<float>(), rows, cols, stream_);
      const auto got = download<float>(dp, p.size());
      for (std::size_t k = 0; k < got.size(); ++k)
        ASSERT_NEAR(got[k], want[k], 1e-4 * std::max(1.0, std::abs(want[k]) * std::sqrt(static_cast<double>(rows))))
            << "rows " << rows << " cols " << cols << " element " << k;
      if (cols == 4) {
        for (std::size_t r = 0; r < ur; ++r) ASSERT_EQ(got[ur + r], 0.f) << "zero column, row " << r;
      }
    }
  }
}

TEST_F(GpuKernels, DivideAndAverageWithErrorFeedback) {
  // Divisions (not reciprocal products), bit for bit with the scalar forms.
  for (std::size_t n : kSizes) {
    const auto x = random_floats(n, 11), sum = random_floats(n, 12);
    auto want = x;
    for (auto& v : want) v /= 3.f;
    auto dx = upload(x);
    gc::divide_inplace(dx.as<float>(), n, 3.f, stream_);
    expect_same_bytes(download<float>(dx, n), want, "divide_inplace");

    std::vector<float> avg(n), mem(n);
    for (std::size_t i = 0; i < n; ++i) {
      avg[i] = sum[i] / 3.f;
      mem[i] = gk::ef_residual(x[i], avg[i]);
    }
    auto dy = upload(x), dsum = upload(sum);
    auto dmem = poisoned<float>(n);
    gc::average_ef(dy.as<float>(), dmem.as<float>(), dsum.as<float>(), n, 3.f, stream_);
    expect_same_bytes(download<float>(dy, n), avg, "average_ef value");
    expect_same_bytes(download<float>(dmem, n), mem, "average_ef memory");
  }
}

TEST_F(GpuKernels, Topk) {
  std::mt19937 rng(1);
  for (std::size_t n : kSizes) {
    auto x = random_floats(n, static_cast<std::uint32_t>(5 * n));
    for (std::size_t i = 0; i < n; i += 3) x[i] = static_cast<float>(static_cast<int>(rng() % 5) - 2);  // ties
    for (std::size_t k : {std::size_t{1}, n / 10 + 1, n}) {
      std::vector<std::int32_t> idx(k);
      std::vector<float> vals(k);
      gk::topk_select(x.data(), n, k, idx.data(), vals.data());
      auto dx = upload(x);
      auto didx = poisoned<std::int32_t>(k);
      auto dvals = poisoned<float>(k);
      DeviceBuffer scratch;
      gc::topk_select(dx.as<float>(), n, k, didx.as<std::int32_t>(), dvals.as<float>(), scratch, stream_);
      expect_same_bytes(download<std::int32_t>(didx, k), idx, "topk indices");
      expect_same_bytes(download<float>(dvals, k), vals, "topk values");

      std::vector<float> out(n, 1.f);
      gk::scatter_add(idx.data(), vals.data(), k, 0.5f, out.data());
      auto dout = upload(std::vector<float>(n, 1.f));
      gc::scatter_add(didx.as<std::int32_t>(), dvals.as<float>(), k, 0.5f, dout.as<float>(), stream_);
      expect_same_bytes(download<float>(dout, n), out, "scatter_add");
    }
  }
}

TEST_F(GpuKernels, ErrorFeedbackAndScaling) {
  for (std::size_t n : kSizes) {
    const auto a = random_floats(n, 1), b = random_floats(n, 2);
    auto da = upload(a), db = upload(b);
    auto dr = poisoned<float>(n);
    std::vector<float> r(n);
    gk::ef_residual(a.data(), b.data(), r.data(), n);
    gc::ef_residual(da.as<float>(), db.as<float>(), dr.as<float>(), n, stream_);
    expect_same_bytes(download<float>(dr, n), r, "ef_residual");

    auto x = a;
    gk::add_inplace(x.data(), b.data(), n);
    gc::add_inplace(da.as<float>(), db.as<float>(), n, stream_);
    expect_same_bytes(download<float>(da, n), x, "add_inplace");

    gk::scale_inplace(x.data(), n, 0.75f);
    gc::scale_inplace(da.as<float>(), n, 0.75f, stream_);
    expect_same_bytes(download<float>(da, n), x, "scale_inplace");
  }
}

TEST_F(GpuKernels, UnscaleFindsInfAndNan) {
  for (std::size_t n : kSizes) {
    for (float bad : {1.f, INFINITY, NAN}) {
      auto x = random_floats(n, 4);
      x[n / 2] = bad;
      auto want = x;
      const bool finite = gk::unscale_check_finite(want.data(), n, 1.f / 1024);
      auto dx = upload(x);
      auto dflag = upload(std::vector<int>{0});
      gc::unscale_check_finite(dx.as<float>(), n, 1.f / 1024, dflag.as<int>(), stream_);
      EXPECT_EQ(download<int>(dflag, 1)[0] != 0, !finite) << "n=" << n << " bad=" << bad;
      expect_same_bytes(download<float>(dx, n), want, "unscale");
    }
  }
}

TEST_F(GpuKernels, ErrorsThrowWithTheCallAndLocation) {
  try {
    GS_CUDA(cudaSetDevice(1 << 20));
    FAIL() << "cudaSetDevice of a missing device did not fail";
  } catch (const gradsync::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaSetDevice"), std::string::npos) << what;
    EXPECT_NE(what.find("test_kernels_gpu.cpp"), std::string::npos) << what;
  }
  cudaGetLastError();
}

// Runs without a device too: the check macro's message names the call, CUDA's own string
// and file:line (the failure here is whatever this machine gives, or none on a GPU host).
TEST(GpuCheckMacro, MessageFormat) {
  try {
    GS_CUDA(cudaErrorInvalidValue);
    FAIL();
  } catch (const gradsync::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaErrorInvalidValue"), std::string::npos) << what;
    EXPECT_NE(what.find("invalid argument"), std::string::npos) << what;
    EXPECT_NE(what.find(__FILE__), std::string::npos) << what;
  }
}
