// CPU kernels of PowerSGD (compress/powersgd.cpp): the three products of one compressed
// matrix, each fused with the element-wise work around it so a step streams the bucket
// about 7 times instead of 11 (powersgd.cpp's header has the schedule and its figures).
//
// Purpose: A (rows x cols, row-major, in the bucket), P (rows x rank) and Q (cols x rank),
// column-major as they travel in the batched P / Q messages:
//   powersgd_project       A += mem (error feedback, written back), P = A Q   one read + one write of A
//   powersgd_back_project  Q = A^T P                                            one read of A
//   powersgd_expand        D = P Q^T; mem = A - D; A = D                        one read, two writes
// Approach: each kernel walks A row by row (back_project: 4 rows at a time, so every load of
// Q from cache serves 4 rows), with Q's columns (cols x rank floats: 72 KiB for ResNet-50's
// widest conv at rank 4) staying in L1/L2; A is touched once per kernel. The bodies are
// written once over a 16-lane GCC vector type (V16) and compiled three times (plain x86-64,
// AVX2, AVX-512 wrappers, as cpu_misc.cpp): the lane operations are IEEE fp32 mul and add
// with no contraction (-ffp-contract=off), so every path gives the same bits.
// Summation orders (fixed, documented so a reference can repeat them):
//   P[i,k] = sum over j: 16 partial sums, lane l takes j = l, l+16, ... in increasing j
//            (the last partial block zero-padded), then added pairwise: l + (l+8), + (l+4),
//            + (l+2), + (l+1).
//   Q[j,k] = sum over i in increasing i, from 0.
//   D[i,j] = P[i,0] Q[j,0] + P[i,1] Q[j,1] + ... in increasing k.
// Use case: one call per matrix per phase; the compressor splits the matrices of a bucket
// over its threads (threads=T), the kernels themselves are single-threaded.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu_target.hpp"

// The 16-lane vector type is only ever used inside always-inline bodies; its ABI does not matter.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace gradsync::kernels {
namespace {

typedef float V16 __attribute__((vector_size(64)));
constexpr std::int64_t kLanes = 16;

GS_ALWAYS_INLINE V16 load16(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
GS_ALWAYS_INLINE void store16(float* p, V16 v) { std::memcpy(p, &v, sizeof v); }
// The first n (< 16) elements, the rest zero.
GS_ALWAYS_INLINE V16 load_part(const float* p, std::int64_t n) {
  float t[kLanes] = {};
  std::memcpy(t, p, static_cast<std::size_t>(n) * sizeof(float));
  return load16(t);
}
GS_ALWAYS_INLINE V16 splat(float x) { return V16{} + x; }
// Pairwise: l + (l+8), then + (l+4), + (l+2), + (l+1).
GS_ALWAYS_INLINE float hsum(V16 s) {
  float t[8];
  for (int l = 0; l < 8; ++l) t[l] = s[l] + s[l + 8];
  const float u0 = t[0] + t[4], u1 = t[1] + t[5], u2 = t[2] + t[6], u3 = t[3] + t[7];
  return (u0 + u2) + (u1 + u3);
}

// ---- P = A Q (after A += mem) ---------------------------------------------------------------

// K columns of P for row `a`: p[k * ldp] = a . q[k * cols ...], k < K.
template <int K>
GS_ALWAYS_INLINE void dot_row(const float* a, std::int64_t cols, const float* q, float* p, std::int64_t ldp) {
  V16 s[K];
  for (int k = 0; k < K; ++k) s[k] = V16{};
  const std::int64_t full = cols / kLanes * kLanes;
  for (std::int64_t j = 0; j < full; j += kLanes) {
    const V16 x = load16(a + j);
    for (int k = 0; k < K; ++k) s[k] = s[k] + x * load16(q + k * cols + j);
  }
  if (full < cols) {
    const V16 x = load_part(a + full, cols - full);
    for (int k = 0; k < K; ++k) s[k] = s[k] + x * load_part(q + k * cols + full, cols - full);
  }
  for (int k = 0; k < K; ++k) p[k * ldp] = hsum(s[k]);
}

GS_ALWAYS_INLINE void project_body(float* a, const float* mem, std::int64_t rows, std::int64_t cols, const float* q,
                                   int rank, float* p) {
  for (std::int64_t i = 0; i < rows; ++i) {
    float* row = a + i * cols;
    if (mem != nullptr) {
      const float* m = mem + i * cols;
      for (std::int64_t j = 0; j < cols; ++j) row[j] = row[j] + m[j];
    }
    for (int k0 = 0; k0 < rank; k0 += 4) {
      const float* qk = q + static_cast<std::int64_t>(k0) * cols;
      float* pk = p + static_cast<std::int64_t>(k0) * rows + i;
      switch (std::min(4, rank - k0)) {
        case 4: dot_row<4>(row, cols, qk, pk, rows); break;
        case 3: dot_row<3>(row, cols, qk, pk, rows); break;
        case 2: dot_row<2>(row, cols, qk, pk, rows); break;
        default: dot_row<1>(row, cols, qk, pk, rows); break;
      }
    }
  }
}

// ---- Q = A^T P --------------------------------------------------------------------------------

// Rows i0 .. i0+R-1 added into every column of Q: q[k][j] += a_r[j] * P[i0+r, k], r increasing.
template <int R>
GS_ALWAYS_INLINE void back_rows(const float* a, std::int64_t cols, const float* pr, int rank, float* q) {
  const std::int64_t full = cols / kLanes * kLanes;
  for (std::int64_t j = 0; j < full; j += kLanes) {
    V16 x[R];
    for (int r = 0; r < R; ++r) x[r] = load16(a + r * cols + j);
    for (int k = 0; k < rank; ++k) {
      float* qk = q + static_cast<std::int64_t>(k) * cols + j;
      V16 v = load16(qk);
      for (int r = 0; r < R; ++r) v = v + x[r] * splat(pr[r * rank + k]);
      store16(qk, v);
    }
  }
  for (std::int64_t j = full; j < cols; ++j)
    for (int k = 0; k < rank; ++k) {
      float v = q[static_cast<std::int64_t>(k) * cols + j];
      for (int r = 0; r < R; ++r) v = v + a[r * cols + j] * pr[r * rank + k];
      q[static_cast<std::int64_t>(k) * cols + j] = v;
    }
}

GS_ALWAYS_INLINE void back_project_body(const float* a, std::int64_t rows, std::int64_t cols, const float* p, int rank,
                                        float* q, float* pr /* 4 * rank scratch */) {
  std::fill(q, q + static_cast<std::int64_t>(rank) * cols, 0.f);
  for (std::int64_t i0 = 0; i0 < rows; i0 += 4) {
    const int nr = static_cast<int>(std::min<std::int64_t>(4, rows - i0));
    for (int r = 0; r < nr; ++r)
      for (int k = 0; k < rank; ++k) pr[r * rank + k] = p[static_cast<std::int64_t>(k) * rows + i0 + r];
    const float* ar = a + i0 * cols;
    switch (nr) {
      case 4: back_rows<4>(ar, cols, pr, rank, q); break;
      case 3: back_rows<3>(ar, cols, pr, rank, q); break;
      case 2: back_rows<2>(ar, cols, pr, rank, q); break;
      default: back_rows<1>(ar, cols, pr, rank, q); break;
    }
  }
}

// ---- D = P Q^T; mem = A - D; A = D ---------------------------------------------------------------

GS_ALWAYS_INLINE void expand_body(float* a, float* mem, std::int64_t rows, std::int64_t cols, const float* p,
                                  const float* q, int rank, float* pi /* rank scratch */) {
  const std::int64_t full = cols / kLanes * kLanes;
  for (std::int64_t i = 0; i < rows; ++i) {
    for (int k = 0; k < rank; ++k) pi[k] = p[static_cast<std::int64_t>(k) * rows + i];
    float* row = a + i * cols;
    float* m = mem != nullptr ? mem + i * cols : nullptr;
    for (std::int64_t j = 0; j < full; j += kLanes) {
      V16 d = load16(q + j) * splat(pi[0]);
      for (int k = 1; k < rank; ++k) d = d + load16(q + static_cast<std::int64_t>(k) * cols + j) * splat(pi[k]);
      if (m != nullptr) store16(m + j, load16(row + j) - d);
      store16(row + j, d);
    }
    for (std::int64_t j = full; j < cols; ++j) {
      float d = q[j] * pi[0];
      for (int k = 1; k < rank; ++k) d = d + q[static_cast<std::int64_t>(k) * cols + j] * pi[k];
      if (m != nullptr) m[j] = row[j] - d;
      row[j] = d;
    }
  }
}

// ---- one wrapper per ISA --------------------------------------------------------------------

GS_DEFINE_VARIANTS(void, project,
                   (float* a, const float* mem, std::int64_t rows, std::int64_t cols, const float* q, int rank,
                    float* p),
                   (a, mem, rows, cols, q, rank, p), project_body)
GS_DEFINE_VARIANTS(void, back_project,
                   (const float* a, std::int64_t rows, std::int64_t cols, const float* p, int rank, float* q,
                    float* pr),
                   (a, rows, cols, p, rank, q, pr), back_project_body)
GS_DEFINE_VARIANTS(void, expand,
                   (float* a, float* mem, std::int64_t rows, std::int64_t cols, const float* p, const float* q,
                    int rank, float* pi),
                   (a, mem, rows, cols, p, q, rank, pi), expand_body)

}  // namespace

void powersgd_project(float* a, const float* mem, std::int64_t rows, std::int64_t cols, const float* q, int rank,
                      float* p, Isa isa) {
  GS_DISPATCH(project, a, mem, rows, cols, q, rank, p);
}

void powersgd_back_project(const float* a, std::int64_t rows, std::int64_t cols, const float* p, int rank, float* q,
                           Isa isa) {
  std::vector<float> pr(static_cast<std::size_t>(4 * rank));
  GS_DISPATCH(back_project, a, rows, cols, p, rank, q, pr.data());
}

void powersgd_expand(float* a, float* mem, std::int64_t rows, std::int64_t cols, const float* p, const float* q,
                     int rank, Isa isa) {
  std::vector<float> pi(static_cast<std::size_t>(rank));
  GS_DISPATCH(expand, a, mem, rows, cols, p, q, rank, pi.data());
}

}  // namespace gradsync::kernels
