// gradsync/compress/powersgd.cpp — PowerSGD with DDP hook semantics (protocol in powersgd.hpp).
#include "compress/powersgd.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>

#include "compress/collectives.hpp"
#include "core/spec.hpp"
#include "core/timer.hpp"
#include "kernels/cpu_kernels.hpp"
#include "plan/compress.hpp"

namespace gradsync::compress_detail {

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ColMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;

constexpr std::uint64_t kQStream = 0x50534744u;  // "PSGD": keeps Q's stream apart from others

}  // namespace

PowerSgdCompressor::PowerSgdCompressor(const PowerSgdOptions& opts, std::uint64_t seed) : opts_(opts), seed_(seed) {
  GS_CHECK(opts.rank >= 1 && opts.min_rate > 0 && opts.start >= 0, "bad PowerSGD options");
}

std::string PowerSgdCompressor::spec() const {
  std::ostringstream rate;
  rate << opts_.min_rate;
  return Spec{"powersgd",
              {{"rank", std::to_string(opts_.rank)},
               {"start", std::to_string(opts_.start)},
               {"min_rate", rate.str()},
               {"warm_start", opts_.warm_start ? "1" : "0"},
               {"error_feedback", opts_.error_feedback ? "1" : "0"}}}
      .str();
}

PowerSgdCompressor::Plan PowerSgdCompressor::make_plan(const BucketView& bucket, int rank, double min_rate) {
  Plan plan;
  for (const TensorView& t : bucket.tensors) {
    GS_CHECK(t.offset + t.count <= bucket.count, "tensor ", t.name, " lies outside bucket ", bucket.index);
    if (t.shape.size() < 2 || t.count == 0) continue;
    const std::int64_t n = t.shape[0];
    GS_CHECK(n > 0 && t.count % static_cast<std::size_t>(n) == 0, "tensor ", t.name, " has ", t.count,
             " elements, not a multiple of shape[0] = ", n);
    const std::int64_t m = static_cast<std::int64_t>(t.count) / n;
    // The hook's _should_compress, shared with the model: 0 = stays uncompressed.
    const int r = plan::powersgd_rank(n, m, rank, min_rate);
    if (r == 0) continue;
    Matrix mat;
    mat.offset = t.offset;
    mat.rows = n;
    mat.cols = m;
    mat.rank = r;
    plan.matrices.push_back(mat);
  }
  std::sort(plan.matrices.begin(), plan.matrices.end(),
            [](const Matrix& a, const Matrix& b) { return a.offset < b.offset; });
  // Batched P and Q offsets, and the uncompressed rest (the complement of the matrices).
  std::size_t pos = 0;
  for (Matrix& mat : plan.matrices) {
    GS_CHECK(mat.offset >= pos, "tensors of bucket ", bucket.index, " overlap");
    if (mat.offset > pos) plan.plain.push_back({pos, mat.offset - pos});
    mat.p_offset = plan.p_size;
    mat.q_offset = plan.q_size;
    plan.p_size += static_cast<std::size_t>(mat.rows) * static_cast<std::size_t>(mat.rank);
    plan.q_size += static_cast<std::size_t>(mat.cols) * static_cast<std::size_t>(mat.rank);
    pos = mat.offset + static_cast<std::size_t>(mat.rows * mat.cols);
  }
  if (pos < bucket.count) plan.plain.push_back({pos, bucket.count - pos});
  for (const Span& s : plan.plain) plan.plain_size += s.count;
  return plan;
}

PowerSgdCompressor::State& PowerSgdCompressor::state(int bucket) {
  auto it = states_.find(bucket);
  GS_CHECK(it != states_.end(), "PowerSGD has no state for bucket ", bucket, " (compute_p first)");
  return it->second;
}

PowerSgdCompressor::State& PowerSgdCompressor::state_for(const BucketView& bucket) {
  auto [it, fresh] = states_.try_emplace(bucket.index);
  State& s = it->second;
  if (fresh) {
    s.plan = make_plan(bucket, opts_.rank, opts_.min_rate);
    s.count = bucket.count;
    s.p.assign(s.plan.p_size, 0.f);
    s.q.assign(s.plan.q_size, 0.f);
    s.plain.assign(s.plan.plain_size, 0.f);
  }
  GS_CHECK_EQ(s.count, bucket.count, "PowerSGD bucket ", bucket.index, " changed size");
  return s;
}

void PowerSgdCompressor::random_q(std::uint64_t seed, int bucket, std::int64_t epoch, float* q, std::size_t count) {
  const kernels::RngKey key =
      kernels::rng_key(seed, kQStream, static_cast<std::uint64_t>(bucket), static_cast<std::uint64_t>(epoch));
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (std::size_t e = 0; e < count; ++e) {
    // u1 in (0, 1] (log is finite), u2 in [0, 1)
    const double u1 = (static_cast<double>(kernels::rng_bits(key, 2 * e) >> 8) + 1.0) * 0x1p-24;
    const double u2 = static_cast<double>(kernels::rng_bits(key, 2 * e + 1) >> 8) * 0x1p-24;
    q[e] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
  }
}

void PowerSgdCompressor::orthogonalize(float* p, std::int64_t rows, int cols) {
  Eigen::Map<ColMat> P(p, rows, cols);
  for (int i = 0; i < cols; ++i) {
    const float norm = P.col(i).norm();
    if (norm > 0.f) {
      P.col(i) /= norm;
    } else {
      P.col(i).setZero();  // the hook would divide by zero (NaN); a zero column stays zero
    }
    for (int j = i + 1; j < cols; ++j) P.col(j) -= P.col(i).dot(P.col(j)) * P.col(i);
  }
}

void PowerSgdCompressor::compute_p(BucketView& bucket, std::int64_t step) {
  State& s = state_for(bucket);
  const std::size_t n = bucket.count;
  if (opts_.error_feedback) {
    if (s.memory.empty()) s.memory.assign(n, 0.f);
    kernels::add_inplace(bucket.data, s.memory.data(), n);
    s.input.assign(bucket.data, bucket.data + n);
  }
  if (!s.q_ready || !opts_.warm_start) {
    random_q(seed_, bucket.index, opts_.warm_start ? 0 : step, s.q.data(), s.q.size());
    s.q_ready = true;
  }
  for (const Matrix& mat : s.plan.matrices) {
    Eigen::Map<const RowMat> M(bucket.data + mat.offset, mat.rows, mat.cols);
    Eigen::Map<const ColMat> Q(s.q.data() + mat.q_offset, mat.cols, mat.rank);
    Eigen::Map<ColMat> P(s.p.data() + mat.p_offset, mat.rows, mat.rank);
    P.noalias() = M * Q;
  }
  std::size_t pos = 0;
  for (const Span& sp : s.plan.plain) {
    std::memcpy(s.plain.data() + pos, bucket.data + sp.offset, sp.count * sizeof(float));
    pos += sp.count;
  }
}

void PowerSgdCompressor::compute_q(BucketView& bucket) {
  State& s = state(bucket.index);
  for (const Matrix& mat : s.plan.matrices) {
    orthogonalize(s.p.data() + mat.p_offset, mat.rows, mat.rank);
    Eigen::Map<const RowMat> M(bucket.data + mat.offset, mat.rows, mat.cols);
    Eigen::Map<const ColMat> P(s.p.data() + mat.p_offset, mat.rows, mat.rank);
    Eigen::Map<ColMat> Q(s.q.data() + mat.q_offset, mat.cols, mat.rank);
    Q.noalias() = M.transpose() * P;
  }
}

void PowerSgdCompressor::decompress(BucketView& bucket, int world) {
  State& s = state(bucket.index);
  const float fw = static_cast<float>(world);
  for (float& v : s.q) v /= fw;  // the hook's fut.value().div_(world_size)
  for (const Matrix& mat : s.plan.matrices) {
    Eigen::Map<const ColMat> P(s.p.data() + mat.p_offset, mat.rows, mat.rank);
    Eigen::Map<const ColMat> Q(s.q.data() + mat.q_offset, mat.cols, mat.rank);
    Eigen::Map<RowMat> M(bucket.data + mat.offset, mat.rows, mat.cols);
    M.noalias() = P * Q.transpose();
  }
  std::size_t pos = 0;
  for (const Span& sp : s.plan.plain) {
    float* dst = bucket.data + sp.offset;
    for (std::size_t i = 0; i < sp.count; ++i) dst[i] = s.plain[pos + i] / fw;
    pos += sp.count;
  }
  if (opts_.error_feedback) kernels::ef_residual(s.input.data(), bucket.data, s.memory.data(), bucket.count);
}

void PowerSgdCompressor::reduce(Communicator& comm, AllreduceAlgorithm& allreduce, BucketView& bucket,
                                std::int64_t step, CompressStats& stats) {
  const std::size_t n = bucket.count;
  const int p = comm.size();
  stats.uncompressed_bytes += static_cast<std::uint64_t>(n) * 4;
  if (stats.collective.empty()) stats.collective = "allreduce";

  if (step < opts_.start) {  // the hook's vanilla all-reduce before start_powerSGD_iter
    if (n > 0) allreduce.run(bucket.data, bucket.data, n, DType::F32, RedOp::Avg);
    stats.compressed_bytes += static_cast<std::uint64_t>(n) * 4;
    stats.wire_bytes += allreduce_wire_bytes(allreduce, static_cast<std::uint64_t>(n) * 4, p);
    stats.compressed = false;
    return;
  }

  const double t0 = now_s();
  compute_p(bucket, step);
  State& s = state(bucket.index);
  const double t1 = now_s();
  auto sum = [&](std::vector<float>& v) {
    if (!v.empty()) allreduce.run(v.data(), v.data(), v.size(), DType::F32, RedOp::Sum);
    stats.wire_bytes += allreduce_wire_bytes(allreduce, v.size() * 4, p);
  };
  sum(s.plain);
  sum(s.p);
  const double t2 = now_s();
  compute_q(bucket);
  const double t3 = now_s();
  sum(s.q);
  const double t4 = now_s();
  decompress(bucket, p);
  const double t5 = now_s();

  stats.compressed_bytes += 4 * static_cast<std::uint64_t>(s.p.size() + s.q.size() + s.plain.size());
  stats.encode_s += (t1 - t0) + (t3 - t2);
  stats.decode_s += t5 - t4;
}

std::unique_ptr<Compressor> make_powersgd(const plan::CompressorSpec& spec, std::uint64_t seed, int /*rank*/) {
  // Validated by plan::parse_compressor.
  PowerSgdOptions o;
  o.rank = spec.rank;
  o.start = spec.start;
  o.min_rate = spec.min_rate;
  o.warm_start = spec.warm_start;
  o.error_feedback = spec.error_feedback;
  return std::make_unique<PowerSgdCompressor>(o, seed);
}

}  // namespace gradsync::compress_detail
