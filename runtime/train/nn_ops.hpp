// gradsync/train/nn_ops.hpp — the layer kernels the trainable networks are made of, on
// row-major Eigen maps. Activations are [batch x features] row-major; a sample's image is
// laid out C x H x W (NCHW), as in PyTorch. Weights are PyTorch-shaped and row-major:
// Linear {out, in}, Conv2d {Cout, Cin, k, k}.
//
// Backward kernels take `accumulate`: false writes the parameter gradient (=), true adds
// to it (+=) — see network.hpp — and `grad_type`: the type the parameter gradient is
// produced in. For DType::F32 it is computed straight into dw/db; for a half type (mixed
// precision, see precision.hpp) it is computed with fp32 accumulation into scratch, rounded
// to the half type, then written or added: the gradient of a half weight is a half tensor,
// and gradient accumulation adds those half tensors in fp32, as PyTorch's fp32 .grad does.
// Activations are rounded by the networks, between kernels.
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "core/dtype.hpp"

namespace gradsync::train::ops {

template <typename T>
using MatR = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MapR = Eigen::Map<MatR<T>>;
template <typename T>
using CMapR = Eigen::Map<const MatR<T>>;
template <typename T>
using VecMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>;

// y[B x out] = x[B x in] * W^T + b
template <typename T>
void linear_forward(const MatR<T>& x, const T* w, const T* b, std::int64_t out, MatR<T>& y);
// dW (=|+=) dy^T x ; db (=|+=) colsum(dy) ; dx = dy W (skipped when dx == nullptr).
template <typename T>
void linear_backward(const MatR<T>& x, const MatR<T>& dy, const T* w, T* dw, T* db, bool accumulate, MatR<T>* dx,
                     DType grad_type = DType::F32);

// In place: x = max(x, 0).
template <typename T>
void relu_forward(MatR<T>& x);
// dy *= (y > 0), y being the ReLU's output.
template <typename T>
void relu_backward(const MatR<T>& y, MatR<T>& dy);

// Mean cross-entropy of softmax(logits) vs labels; dlogits = scale * (softmax - onehot) / B.
template <typename T>
T softmax_xent(const MatR<T>& logits, const std::int32_t* labels, MatR<T>& probs);
template <typename T>
void softmax_xent_backward(const MatR<T>& probs, const std::int32_t* labels, T scale, MatR<T>& dlogits);

// Shape of a square-kernel, stride-1, "same"-padded convolution over C x H x W.
struct ConvShape {
  std::int64_t cin, cout, h, w, k;  // pad = k / 2
  std::int64_t col_rows() const { return cin * k * k; }
  std::int64_t pixels() const { return h * w; }
};

// cols[(cin*k*k) x (h*w)] of one sample (zeros where the window leaves the image).
template <typename T>
void im2col(const T* img, const ConvShape& s, T* cols);
// img (+)= the scatter of cols back to the image (the adjoint of im2col); img must be zeroed.
template <typename T>
void col2im(const T* cols, const ConvShape& s, T* img);

// Per sample: y_b[cout x hw] = W[cout x cin*k*k] * cols_b + bias. `cols` keeps all samples'
// im2col matrices (B x col_rows x pixels) for backward.
template <typename T>
void conv_forward(const MatR<T>& x, const ConvShape& s, const T* w, const T* b, std::vector<T>& cols, MatR<T>& y);
// dW (=|+=) sum_b dy_b cols_b^T ; db (=|+=) sum over pixels ; dx via col2im (skipped if nullptr).
template <typename T>
void conv_backward(const std::vector<T>& cols, const MatR<T>& dy, const ConvShape& s, const T* w, T* dw, T* db,
                   bool accumulate, MatR<T>* dx, DType grad_type = DType::F32);

// Mixed precision: round a buffer / matrix to `t` in place (no-op for F32; precision.hpp).
template <typename T>
void round_to(DType t, MatR<T>& x);

// 2x2 max pooling, stride 2, per channel of C x H x W (H, W even). argmax keeps the winner
// (index into the input sample) for backward.
template <typename T>
void maxpool2_forward(const MatR<T>& x, std::int64_t c, std::int64_t h, std::int64_t w, MatR<T>& y,
                      std::vector<std::int32_t>& argmax);
template <typename T>
void maxpool2_backward(const MatR<T>& dy, const std::vector<std::int32_t>& argmax, std::int64_t in_features,
                       MatR<T>& dx);

}  // namespace gradsync::train::ops
