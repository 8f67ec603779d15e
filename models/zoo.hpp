// gradsync/models/zoo.hpp — exact parameter-tensor tables of real networks, with FLOPs.
//
// Purpose: the workloads that the runtime (gradsync-train in profile-replay mode) and the
// step simulator (netmodel/) synchronize. What matters for gradient synchronization is
// *which* gradient tensors exist, their shapes, the order in which backward produces them
// (reverse of forward order) and how long the computation between them takes. So each
// model here is a list of layers in forward order, each layer owning the parameter tensors
// that PyTorch registers for it (same names, same shapes, same order as
// `model.named_parameters()`), plus forward/backward FLOPs per sample.
//
// Conventions (the same for every model; see models/README.md):
//   * FLOPs count 2 per multiply-add. Per *sample*: an image, or a whole sequence for the
//     language models (seq_len tokens: 128 for bert-base, 1024 for the GPT-2 models).
//   * conv:   2*Cin*Cout*kh*kw*Hout*Wout/groups (+ Hout*Wout*Cout for a bias).
//   * linear: (2*in*out + out if bias) per token.
//   * Element-wise work (activations, pooling, residual adds, dropout, softmax) has no
//     layer of its own: it is folded into the parameterized layer it follows, with the
//     per-element costs in zoo.cpp (kNormFlopsPerElem etc.). It is < 1% of the total for
//     the CNNs and ~1-3% for the transformers.
//   * The attention score and value matmuls (Q K^T and P V) of a transformer block are a
//     layer of kind "attention" without parameters, named after the module that computes
//     them (BertSelfAttention "....attention.self", GPT2Attention "....attn").
//   * Backward = 2 x forward (gradient wrt the input + gradient wrt the weights), except
//     the first layer and embeddings, which have no input gradient: backward = forward.
//   * Tied weights are listed once, where PyTorch's named_parameters() lists them (GPT-2's
//     LM head uses transformer.wte.weight: "lm_head" is a layer with FLOPs and no params;
//     DDP marks the shared gradient ready after its *last* contribution, the embedding
//     backward, which is where the tensor sits).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradsync::models {

// One parameter tensor (one gradient the reducer has to synchronize).
struct TensorSpec {
  std::string name;            // PyTorch name, e.g. "layer1.0.conv1.weight"
  std::vector<int64_t> shape;  // PyTorch shape, e.g. {64, 64, 3, 3}
  int64_t numel() const;       // product of shape (1 for a scalar, i.e. empty shape)
};

// One module of the network, in forward order.
struct LayerSpec {
  std::string name;                // module name, e.g. "layer1.0.conv1"
  std::string kind;                // "conv", "linear", "bn", "ln", "embedding", "attention"
  std::vector<TensorSpec> params;  // in registration order, PyTorch names; may be empty
  double fwd_flops = 0;            // per sample, 2 FLOPs per multiply-add
  double bwd_flops = 0;            // per sample: grad wrt input + grad wrt weights
};

struct ModelSpec {
  std::string name, description;
  std::vector<LayerSpec> layers;     // forward order
  std::string dataset;               // what an epoch is, with the assumption stated
  int64_t samples_per_epoch = 0;     // images, or sequences for the language models
  std::vector<int64_t> input_shape;  // per sample, e.g. {3,224,224} or {seq_len}

  int64_t num_tensors() const;                       // parameter tensors
  int64_t num_parameters() const;                    // elements over all tensors
  int64_t grad_bytes(int bytes_per_elem = 4) const;  // num_parameters() * bytes_per_elem
  double fwd_flops() const;                          // per sample, all layers
  double bwd_flops() const;                          // per sample, all layers
  std::vector<TensorSpec> tensors() const;           // all parameter tensors, forward order
};

// Names of the built-in models, in a fixed order:
// resnet18-cifar, resnet50, vgg16, bert-base, gpt2, gpt2-medium.
const std::vector<std::string>& zoo_names();

// Builds the named model. Throws gradsync::UsageError listing the known names on unknown.
ModelSpec zoo_model(const std::string& name);

}  // namespace gradsync::models
