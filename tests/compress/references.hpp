// Serial reference implementations of the compressors' *definitions*, for the tests: p
// ranks simulated in one process with plain loops and naive dense Eigen, sharing no code
// with runtime/compress/ beyond the documented layouts (Q's initial values come from
// PowerSgdCompressor::random_q, which the definition names).
#pragma once

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "compress/compressor.hpp"
#include "compress/powersgd.hpp"

namespace gradsync::reference {

using Grads = std::vector<std::vector<float>>;  // one gradient per rank

// ---- PowerSGD (DDP hook semantics), in double ----------------------------------------------
class PowerSgdReference {
 public:
  PowerSgdReference(int p, int rank, std::int64_t start, double min_rate, std::uint64_t seed, BucketView layout)
      : p_(p), start_(start), layout_(std::move(layout)) {
    std::size_t q_total = 0;
    for (const TensorView& t : layout_.tensors) {
      if (t.shape.size() < 2) continue;
      const std::int64_t n = t.shape[0];
      const std::int64_t m = static_cast<std::int64_t>(t.count) / n;
      const std::int64_t r = std::min<std::int64_t>({n, m, rank});
      if (static_cast<double>((n + m) * r) * min_rate >= static_cast<double>(n * m)) continue;
      mats_.push_back({t.offset, n, m, r, Eigen::MatrixXd()});
      q_total += static_cast<std::size_t>(m * r);
    }
    std::sort(mats_.begin(), mats_.end(), [](const Mat& a, const Mat& b) { return a.offset < b.offset; });
    std::vector<float> q(q_total);
    compress_detail::PowerSgdCompressor::random_q(seed, layout_.index, 0, q.data(), q_total);
    std::size_t pos = 0;
    for (Mat& mat : mats_) {
      mat.q = Eigen::MatrixXd(mat.cols, mat.r);
      for (std::int64_t c = 0; c < mat.r; ++c)
        for (std::int64_t i = 0; i < mat.cols; ++i) mat.q(i, c) = q[pos++];  // column-major
    }
    memory.assign(static_cast<std::size_t>(p), std::vector<double>(layout_.count, 0.0));
  }

  // The average every rank ends with, for one step.
  std::vector<double> step(const Grads& grads, std::int64_t step) {
    const std::size_t n = layout_.count;
    std::vector<double> out(n, 0.0);
    if (step < start_) {
      for (int r = 0; r < p_; ++r)
        for (std::size_t i = 0; i < n; ++i) out[i] += grads[static_cast<std::size_t>(r)][i] / p_;
      return out;
    }
    std::vector<std::vector<double>> in(static_cast<std::size_t>(p_), std::vector<double>(n));
    for (std::size_t r = 0; r < in.size(); ++r)
      for (std::size_t i = 0; i < n; ++i) in[r][i] = grads[r][i] + memory[r][i];
    std::vector<bool> covered(n, false);
    for (Mat& mat : mats_) {
      auto M = [&](std::size_t r) {
        Eigen::MatrixXd m(mat.rows, mat.cols);
        for (std::int64_t i = 0; i < mat.rows; ++i)
          for (std::int64_t j = 0; j < mat.cols; ++j)
            m(i, j) = in[r][mat.offset + static_cast<std::size_t>(i * mat.cols + j)];
        return m;
      };
      Eigen::MatrixXd P = Eigen::MatrixXd::Zero(mat.rows, mat.r);
      for (std::size_t r = 0; r < in.size(); ++r) P += M(r) * mat.q;
      // Gram-Schmidt on the columns, written out
      for (std::int64_t c = 0; c < mat.r; ++c) {
        double norm = 0;
        for (std::int64_t i = 0; i < mat.rows; ++i) norm += P(i, c) * P(i, c);
        norm = std::sqrt(norm);
        for (std::int64_t i = 0; i < mat.rows; ++i) P(i, c) = norm > 0 ? P(i, c) / norm : 0.0;
        for (std::int64_t d = c + 1; d < mat.r; ++d) {
          double dot = 0;
          for (std::int64_t i = 0; i < mat.rows; ++i) dot += P(i, c) * P(i, d);
          for (std::int64_t i = 0; i < mat.rows; ++i) P(i, d) -= dot * P(i, c);
        }
      }
      Eigen::MatrixXd Q = Eigen::MatrixXd::Zero(mat.cols, mat.r);
      for (std::size_t r = 0; r < in.size(); ++r) Q += M(r).transpose() * P;
      Q /= p_;
      const Eigen::MatrixXd approx = P * Q.transpose();
      for (std::int64_t i = 0; i < mat.rows; ++i)
        for (std::int64_t j = 0; j < mat.cols; ++j) {
          const std::size_t k = mat.offset + static_cast<std::size_t>(i * mat.cols + j);
          out[k] = approx(i, j);
          covered[k] = true;
        }
      mat.q = Q;  // warm start
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (covered[i]) continue;
      for (std::size_t r = 0; r < in.size(); ++r) out[i] += in[r][i];
      out[i] /= p_;
    }
    for (std::size_t r = 0; r < in.size(); ++r)
      for (std::size_t i = 0; i < n; ++i) memory[r][i] = in[r][i] - out[i];
    return out;
  }

  std::size_t compressed_matrices() const { return mats_.size(); }
  std::vector<std::vector<double>> memory;  // per rank

 private:
  struct Mat {
    std::size_t offset;
    std::int64_t rows, cols, r;
    Eigen::MatrixXd q;
  };
  int p_;
  std::int64_t start_;
  BucketView layout_;
  std::vector<Mat> mats_;
};

// ---- onebit (1-bit Adam's compressed all-reduce), in float as defined -----------------------
class OnebitReference {
 public:
  OnebitReference(int p, std::size_t n) : p_(p), n_(n) {
    const std::size_t per = (n + static_cast<std::size_t>(p) - 1) / static_cast<std::size_t>(p);
    chunk_ = (per + 31) / 32 * 32;
    worker_error.assign(static_cast<std::size_t>(p), std::vector<float>(n, 0.f));
    for (int j = 0; j < p; ++j) server_error.emplace_back(len(j), 0.f);
  }

  std::vector<float> step(const Grads& grads) {
    const std::size_t up = static_cast<std::size_t>(p_);
    // worker phase: decoded[r][i] = +-scale of rank r's chunk holding i
    std::vector<std::vector<float>> decoded(up, std::vector<float>(n_));
    for (std::size_t r = 0; r < up; ++r) {
      std::vector<float> x(n_);
      for (std::size_t i = 0; i < n_; ++i) x[i] = grads[r][i] + worker_error[r][i];
      for (int j = 0; j < p_; ++j) {
        const float s = scale_of(x.data() + begin(j), len(j));
        for (std::size_t i = begin(j); i < begin(j) + len(j); ++i) {
          decoded[r][i] = x[i] >= 0.f ? s : -s;
          worker_error[r][i] = x[i] - decoded[r][i];
        }
      }
    }
    // server phase, chunk j
    std::vector<float> out(n_);
    for (int j = 0; j < p_; ++j) {
      std::vector<float> y(len(j));
      for (std::size_t k = 0; k < y.size(); ++k) {
        float acc = decoded[0][begin(j) + k];
        for (std::size_t r = 1; r < up; ++r) acc = acc + decoded[r][begin(j) + k];
        y[k] = acc * (1.f / static_cast<float>(p_)) + server_error[static_cast<std::size_t>(j)][k];
      }
      const float s = scale_of(y.data(), y.size());
      for (std::size_t k = 0; k < y.size(); ++k) {
        const float d = y[k] >= 0.f ? s : -s;
        server_error[static_cast<std::size_t>(j)][k] = y[k] - d;
        out[begin(j) + k] = d;
      }
    }
    return out;
  }

  std::vector<std::vector<float>> worker_error, server_error;

 private:
  static float scale_of(const float* v, std::size_t len) {
    if (len == 0) return 0.f;
    long double ss = 0;
    for (std::size_t i = 0; i < len; ++i) ss += static_cast<long double>(v[i]) * v[i];
    return static_cast<float>(std::sqrt(static_cast<double>(ss) / static_cast<double>(len)));
  }
  std::size_t begin(int j) const { return std::min(n_, chunk_ * static_cast<std::size_t>(j)); }
  std::size_t len(int j) const { return std::min(n_, chunk_ * static_cast<std::size_t>(j + 1)) - begin(j); }
  int p_;
  std::size_t n_, chunk_;
};

}  // namespace gradsync::reference
