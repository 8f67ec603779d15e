// gradsync/train/gpu_mlp.hpp — real forward/backward of "mlp" on the GPU (cuBLAS), for
// gradsync-train --device cuda --compute real (the CUDA device's real workload,
// device/cuda.hpp). CUDA builds only.
//
// The network is mlp.hpp's (fc1 64->256, ReLU, fc2 256->256, ReLU, fc3 256->10, softmax
// cross-entropy), taken from its ModelSpec as a chain of (weight {out, in}, bias {out})
// Linear layers. Parameters are fp32 master weights in device memory and gradients are the
// reducer's bucket views in device memory; both are bound from outside (as Network::bind).
//
// GEMMs: cublasGemmEx with CUBLAS_COMPUTE_32F (fp32 accumulation) and fp32 output; the
// inputs are fp32 (F32) or half copies (F16/BF16: the weights are cast at each forward, the
// activations and activation gradients as they are produced). Row-major Y[B, out] =
// X[B, in] W^T is the column-major Y^T = op_T(W) X^T, so no transposes are materialised:
//   forward   Y^T  = gemm(T, N, m=out, n=B, k=in,  A=W  (lda in),  B=X  (ldb in))
//   weight    dW^T = gemm(N, T, m=in,  n=out, k=B, A=X  (lda in),  B=dY (ldb out))  beta 1 when accumulating
//   input     dX^T = gemm(N, N, m=in,  n=B, k=out, A=W  (lda in),  B=dY (ldb out))
// Small kernels (gpu_kernels.hpp) do bias + ReLU (+ rounding to the compute type: the
// tensor-core contract the CPU emulates), softmax cross-entropy in fp32, its gradient times
// the loss scale / (B x micro-steps), ReLU backward and bias gradients.
// Differences from the CPU reference (precision.hpp): parameter gradients are the GEMM's fp32
// output (not rounded to the half type), and summation orders differ, so runs agree with
// the CPU to rounding, not bit for bit.
//
// forward() copies the batch through pinned host memory to the device on the compute
// stream and synchronises it to return the loss (as PyTorch's loss.item()); backward() only
// launches: ready(i) is called after the kernels writing tensor i's gradient were launched
// (the reducer records its CUDA event then), bias before weight, last layer first.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/dtype.hpp"
#include "cuda/memory.hpp"
#include "models/zoo.hpp"
#include "train/loader.hpp"
#include "train/network.hpp"
#include "train/workload.hpp"

namespace gradsync::train {

// Throws gradsync::Error naming the call, cuBLAS's status name and string, file:line.
[[noreturn]] void cublas_fail(cublasStatus_t st, const char* call, const char* file, int line);
#define GS_CUBLAS(call)                                                                                 \
  do {                                                                                                  \
    const cublasStatus_t gs_cublas_st_ = (call);                                                        \
    if (gs_cublas_st_ != CUBLAS_STATUS_SUCCESS) ::gradsync::train::cublas_fail(gs_cublas_st_, #call, __FILE__, __LINE__); \
  } while (0)

class GpuMlp {
 public:
  // `tensors`: the model's (forward order), pairs of Linear weight {out, in} and bias {out}.
  // `batch`: the most samples a forward gets. Uses the current device; all work on `stream`.
  GpuMlp(const std::vector<models::TensorSpec>& tensors, std::int64_t batch, DType compute, cudaStream_t stream);
  ~GpuMlp();
  GpuMlp(const GpuMlp&) = delete;
  GpuMlp& operator=(const GpuMlp&) = delete;

  // Device pointers, one per tensor, tensors[i].numel() floats each.
  void bind(std::vector<float*> params, std::vector<float*> grads);
  // Mean cross-entropy of the batch (x: samples x in, y: labels).
  double forward(const Batch& batch);
  // grad (=|+=) scale x d(mean loss)/d(param); ready(i) after tensor i's kernels were launched.
  void backward(float scale, bool accumulate, const GradReadyFn& ready);

 private:
  struct Layer {
    std::int64_t in = 0, out = 0;
    std::size_t weight = 0, bias = 0;  // tensor indices
  };
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* a, int lda, const void* b,
            int ldb, float* c, int ldc, float beta);
  // The GEMM input for an fp32 buffer: itself (F32) or its half copy `half`, refreshed.
  const void* gemm_input(const float* x, DeviceBuffer& half, std::size_t n);

  std::vector<Layer> layers_;
  std::int64_t max_batch_ = 0, batch_ = 0, classes_ = 0;
  DType compute_;
  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
  std::vector<float*> params_, grads_;
  std::vector<DeviceBuffer> act_;       // act_[l]: input of layer l (fp32); act_.back(): logits
  std::vector<DeviceBuffer> act_half_;  // half copies of act_[l] (F16/BF16)
  std::vector<DeviceBuffer> w_half_;    // half copies of the weights (F16/BF16)
  DeviceBuffer probs_, dz_, da_, dz_half_, labels_, loss_;
  PinnedBuffer host_x_, host_y_, host_loss_;
};

// Real compute on the GPU behind the Workload seam (workload.hpp): forward/backward are
// GpuMlp's on `stream`; init_params and evaluate are the host network's (make_real_workload)
// on a host copy of the parameters: init there, then upload (the CPU run's initial
// weights); evaluate downloads the device weights first. Only "mlp" (else UsageError).
std::unique_ptr<Workload> make_gpu_real_workload(const std::string& model, const SyntheticDataset& dataset,
                                                 std::int64_t batch, DType precision, cudaStream_t stream);

}  // namespace gradsync::train
