// gradsync/train/nn_ops.cpp — layer kernels (see nn_ops.hpp), instantiated for float
// (training) and double (gradient checks).
#include "train/nn_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "train/precision.hpp"

namespace gradsync::train::ops {

namespace {

// dst (=|+=) src rounded to t (src is scratch and is rounded in place).
template <typename T>
void store_grad(DType t, T* src, T* dst, std::int64_t n, bool accumulate) {
  train::round_to(t, src, static_cast<std::size_t>(n));
  if (accumulate)
    for (std::int64_t i = 0; i < n; ++i) dst[i] += src[i];
  else
    std::copy(src, src + n, dst);
}

}  // namespace

template <typename T>
void round_to(DType t, MatR<T>& x) {
  train::round_to(t, x.data(), static_cast<std::size_t>(x.size()));
}

template <typename T>
void linear_forward(const MatR<T>& x, const T* w, const T* b, std::int64_t out, MatR<T>& y) {
  const std::int64_t in = x.cols();
  CMapR<T> W(w, out, in);
  y.resize(x.rows(), out);
  y.noalias() = x * W.transpose();
  y.rowwise() += Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(b, out);
}

template <typename T>
void linear_backward(const MatR<T>& x, const MatR<T>& dy, const T* w, T* dw, T* db, bool accumulate, MatR<T>* dx,
                     DType grad_type) {
  const std::int64_t in = x.cols(), out = dy.cols();
  MapR<T> dW(dw, out, in);
  Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>> dB(db, out);
  if (grad_type != DType::F32) {
    MatR<T> gw = dy.transpose() * x;  // fp32 accumulation, then one rounding
    Eigen::Matrix<T, 1, Eigen::Dynamic> gb = dy.colwise().sum();
    store_grad(grad_type, gw.data(), dw, out * in, accumulate);
    store_grad(grad_type, gb.data(), db, out, accumulate);
  } else if (accumulate) {
    dW.noalias() += dy.transpose() * x;
    dB += dy.colwise().sum();
  } else {
    dW.noalias() = dy.transpose() * x;
    dB = dy.colwise().sum();
  }
  if (dx) {
    CMapR<T> W(w, out, in);
    dx->resize(dy.rows(), in);
    dx->noalias() = dy * W;
  }
}

template <typename T>
void relu_forward(MatR<T>& x) {
  x = x.cwiseMax(T(0));
}

template <typename T>
void relu_backward(const MatR<T>& y, MatR<T>& dy) {
  dy.array() = (y.array() > T(0)).select(dy.array(), T(0));
}

template <typename T>
T softmax_xent(const MatR<T>& logits, const std::int32_t* labels, MatR<T>& probs) {
  const std::int64_t B = logits.rows();
  probs.resize(logits.rows(), logits.cols());
  T loss = 0;
  for (std::int64_t i = 0; i < B; ++i) {
    const T m = logits.row(i).maxCoeff();
    probs.row(i) = (logits.row(i).array() - m).exp();
    const T z = probs.row(i).sum();
    probs.row(i) /= z;
    // -log softmax_y = log z + m - logit_y   (stable form)
    loss += std::log(z) + m - logits(i, labels[i]);
  }
  return loss / static_cast<T>(B);
}

template <typename T>
void softmax_xent_backward(const MatR<T>& probs, const std::int32_t* labels, T scale, MatR<T>& dlogits) {
  const std::int64_t B = probs.rows();
  dlogits = probs;
  for (std::int64_t i = 0; i < B; ++i) dlogits(i, labels[i]) -= T(1);
  dlogits *= scale / static_cast<T>(B);
}

template <typename T>
void im2col(const T* img, const ConvShape& s, T* cols) {
  const std::int64_t pad = s.k / 2, P = s.pixels();
  for (std::int64_t c = 0; c < s.cin; ++c)
    for (std::int64_t ky = 0; ky < s.k; ++ky)
      for (std::int64_t kx = 0; kx < s.k; ++kx) {
        T* row = cols + ((c * s.k + ky) * s.k + kx) * P;
        for (std::int64_t y = 0; y < s.h; ++y) {
          const std::int64_t iy = y + ky - pad;
          for (std::int64_t x = 0; x < s.w; ++x) {
            const std::int64_t ix = x + kx - pad;
            row[y * s.w + x] = (iy >= 0 && iy < s.h && ix >= 0 && ix < s.w) ? img[(c * s.h + iy) * s.w + ix] : T(0);
          }
        }
      }
}

template <typename T>
void col2im(const T* cols, const ConvShape& s, T* img) {
  const std::int64_t pad = s.k / 2, P = s.pixels();
  for (std::int64_t c = 0; c < s.cin; ++c)
    for (std::int64_t ky = 0; ky < s.k; ++ky)
      for (std::int64_t kx = 0; kx < s.k; ++kx) {
        const T* row = cols + ((c * s.k + ky) * s.k + kx) * P;
        for (std::int64_t y = 0; y < s.h; ++y) {
          const std::int64_t iy = y + ky - pad;
          if (iy < 0 || iy >= s.h) continue;
          for (std::int64_t x = 0; x < s.w; ++x) {
            const std::int64_t ix = x + kx - pad;
            if (ix >= 0 && ix < s.w) img[(c * s.h + iy) * s.w + ix] += row[y * s.w + x];
          }
        }
      }
}

template <typename T>
void conv_forward(const MatR<T>& x, const ConvShape& s, const T* w, const T* b, std::vector<T>& cols, MatR<T>& y) {
  const std::int64_t B = x.rows(), R = s.col_rows(), P = s.pixels();
  cols.resize(static_cast<std::size_t>(B * R * P));
  y.resize(B, s.cout * P);
  CMapR<T> W(w, s.cout, R);
  for (std::int64_t i = 0; i < B; ++i) {
    T* ci = cols.data() + i * R * P;
    im2col(x.row(i).data(), s, ci);
    MapR<T> yi(y.row(i).data(), s.cout, P);
    yi.noalias() = W * CMapR<T>(ci, R, P);
    yi.colwise() += Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(b, s.cout);
  }
}

template <typename T>
void conv_backward(const std::vector<T>& cols, const MatR<T>& dy, const ConvShape& s, const T* w, T* dw, T* db,
                   bool accumulate, MatR<T>* dx, DType grad_type) {
  const std::int64_t B = dy.rows(), R = s.col_rows(), P = s.pixels();
  const bool half = grad_type != DType::F32;
  // Half: sum the batch in fp32 scratch, round once at the end (below).
  MatR<T> gw;
  Eigen::Matrix<T, Eigen::Dynamic, 1> gb;
  if (half) {
    gw.setZero(s.cout, R);
    gb.setZero(s.cout);
  }
  MapR<T> dW(half ? gw.data() : dw, s.cout, R);
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>> dB(half ? gb.data() : db, s.cout);
  if (!accumulate && !half) {
    dW.setZero();
    dB.setZero();
  }
  CMapR<T> W(w, s.cout, R);
  MatR<T> dcols;
  if (dx) {
    dx->resize(B, s.cin * P);
    dx->setZero();
  }
  for (std::int64_t i = 0; i < B; ++i) {
    CMapR<T> dyi(dy.row(i).data(), s.cout, P);
    CMapR<T> ci(cols.data() + i * R * P, R, P);
    dW.noalias() += dyi * ci.transpose();
    dB += dyi.rowwise().sum();
    if (dx) {
      dcols.noalias() = W.transpose() * dyi;
      col2im(dcols.data(), s, dx->row(i).data());
    }
  }
  if (half) {
    store_grad(grad_type, gw.data(), dw, s.cout * R, accumulate);
    store_grad(grad_type, gb.data(), db, s.cout, accumulate);
  }
}

template <typename T>
void maxpool2_forward(const MatR<T>& x, std::int64_t c, std::int64_t h, std::int64_t w, MatR<T>& y,
                      std::vector<std::int32_t>& argmax) {
  const std::int64_t B = x.rows(), oh = h / 2, ow = w / 2, out = c * oh * ow;
  y.resize(B, out);
  argmax.resize(static_cast<std::size_t>(B * out));
  for (std::int64_t i = 0; i < B; ++i) {
    const T* in = x.row(i).data();
    T* o = y.row(i).data();
    std::int32_t* am = argmax.data() + i * out;
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t py = 0; py < oh; ++py)
        for (std::int64_t px = 0; px < ow; ++px) {
          T best = -std::numeric_limits<T>::infinity();
          std::int64_t arg = 0;
          for (std::int64_t dy = 0; dy < 2; ++dy)
            for (std::int64_t dxx = 0; dxx < 2; ++dxx) {
              const std::int64_t idx = (ch * h + 2 * py + dy) * w + 2 * px + dxx;
              if (in[idx] > best) {  // first maximum wins on ties (deterministic)
                best = in[idx];
                arg = idx;
              }
            }
          const std::int64_t oi = (ch * oh + py) * ow + px;
          o[oi] = best;
          am[oi] = static_cast<std::int32_t>(arg);
        }
  }
}

template <typename T>
void maxpool2_backward(const MatR<T>& dy, const std::vector<std::int32_t>& argmax, std::int64_t in_features,
                       MatR<T>& dx) {
  const std::int64_t B = dy.rows(), out = dy.cols();
  dx.setZero(B, in_features);
  for (std::int64_t i = 0; i < B; ++i) {
    const std::int32_t* am = argmax.data() + i * out;
    for (std::int64_t j = 0; j < out; ++j) dx(i, am[j]) += dy(i, j);
  }
}

#define GS_INSTANTIATE_OPS(T)                                                                                  \
  template void linear_forward<T>(const MatR<T>&, const T*, const T*, std::int64_t, MatR<T>&);                 \
  template void linear_backward<T>(const MatR<T>&, const MatR<T>&, const T*, T*, T*, bool, MatR<T>*, DType);   \
  template void relu_forward<T>(MatR<T>&);                                                                     \
  template void relu_backward<T>(const MatR<T>&, MatR<T>&);                                                    \
  template T softmax_xent<T>(const MatR<T>&, const std::int32_t*, MatR<T>&);                                   \
  template void softmax_xent_backward<T>(const MatR<T>&, const std::int32_t*, T, MatR<T>&);                    \
  template void im2col<T>(const T*, const ConvShape&, T*);                                                     \
  template void col2im<T>(const T*, const ConvShape&, T*);                                                     \
  template void conv_forward<T>(const MatR<T>&, const ConvShape&, const T*, const T*, std::vector<T>&,         \
                                MatR<T>&);                                                                     \
  template void conv_backward<T>(const std::vector<T>&, const MatR<T>&, const ConvShape&, const T*, T*, T*,    \
                                 bool, MatR<T>*, DType);                                                       \
  template void round_to<T>(DType, MatR<T>&);                                                                  \
  template void maxpool2_forward<T>(const MatR<T>&, std::int64_t, std::int64_t, std::int64_t, MatR<T>&,        \
                                    std::vector<std::int32_t>&);                                               \
  template void maxpool2_backward<T>(const MatR<T>&, const std::vector<std::int32_t>&, std::int64_t, MatR<T>&);

GS_INSTANTIATE_OPS(float)
GS_INSTANTIATE_OPS(double)

}  // namespace gradsync::train::ops
