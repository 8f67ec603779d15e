// gradsync/kernels/powersgd_gemm.hpp — PowerSGD's three products as column-major BLAS calls.
//
// Purpose: the device path of PowerSGD (device/cuda.cpp) runs P = A Q, Q = A^T P and
// D = P Q^T on cuBLAS, which is column-major; the bucket holds each matrix A row-major
// (rows x cols), P (rows x rank) and Q (cols x rank) are column-major as on the host
// (kernels::powersgd_*). The layout arithmetic lives here, free of CUDA, so that the CPU
// tests run exactly these calls through a reference GEMM against the CPU kernels
// (tests/kernels/test_kernels_cpu.cpp) and a layout mistake cannot wait for a GPU.
// Approach: a row-major rows x cols matrix is the column-major cols x rows matrix A^T with
// leading dimension cols, so
//   P = A Q      = op_T(A^T) Q        m = rows, n = rank, k = cols
//   Q = A^T P    = (A^T) P            m = cols, n = rank, k = rows
//   D = P Q^T    stored row-major is D^T = Q P^T (column-major, ld cols):
//                 m = cols, n = rows, k = rank
#pragma once

#include <cstdint>

namespace gradsync::kernels {

// C = alpha op(A) op(B) + beta C, column-major (BLAS sgemm's arguments).
struct GemmCall {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  float alpha = 1.f;
  const float* a = nullptr;
  std::int64_t lda = 0;
  const float* b = nullptr;
  std::int64_t ldb = 0;
  float beta = 0.f;
  float* c = nullptr;
  std::int64_t ldc = 0;
};

// P = A Q.
inline GemmCall powersgd_p_gemm(const float* a, std::int64_t rows, std::int64_t cols, const float* q, int rank,
                                float* p) {
  return {true, false, rows, rank, cols, 1.f, a, cols, q, cols, 0.f, p, rows};
}

// Q = A^T P.
inline GemmCall powersgd_q_gemm(const float* a, std::int64_t rows, std::int64_t cols, const float* p, int rank,
                                float* q) {
  return {false, false, cols, rank, rows, 1.f, a, cols, p, rows, 0.f, q, cols};
}

// D = alpha P Q^T + beta D, D row-major rows x cols (the bucket's layout).
inline GemmCall powersgd_d_gemm(const float* p, const float* q, std::int64_t rows, std::int64_t cols, int rank,
                                float alpha, float beta, float* d) {
  return {false, true, cols, rows, rank, alpha, q, cols, p, rows, beta, d, cols};
}

}  // namespace gradsync::kernels
