// gradsync/models/zoo.cpp — the built-in models, built layer by layer with loops.
//
// Each builder mirrors the __init__ (registration order) and forward() of the PyTorch
// source it names, so the parameter tensors come out with PyTorch's names, shapes and
// order. The tests pin the published parameter counts; a builder that disagrees is wrong.
#include "models/zoo.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <sstream>
#include <utility>

#include "core/error.hpp"
#include "core/named.hpp"

namespace gradsync::models {

int64_t TensorSpec::numel() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
}

int64_t ModelSpec::num_tensors() const {
  int64_t n = 0;
  for (const auto& l : layers) n += static_cast<int64_t>(l.params.size());
  return n;
}

int64_t ModelSpec::num_parameters() const {
  int64_t n = 0;
  for (const auto& l : layers)
    for (const auto& t : l.params) n += t.numel();
  return n;
}

int64_t ModelSpec::grad_bytes(int bytes_per_elem) const {
  GS_USAGE_CHECK(bytes_per_elem > 0, "grad_bytes: bytes_per_elem must be > 0, got ",
                 bytes_per_elem);
  return num_parameters() * static_cast<int64_t>(bytes_per_elem);
}

double ModelSpec::fwd_flops() const {
  double f = 0;
  for (const auto& l : layers) f += l.fwd_flops;
  return f;
}

double ModelSpec::bwd_flops() const {
  double f = 0;
  for (const auto& l : layers) f += l.bwd_flops;
  return f;
}

std::vector<TensorSpec> ModelSpec::tensors() const {
  std::vector<TensorSpec> out;
  out.reserve(static_cast<size_t>(num_tensors()));
  for (const auto& l : layers) out.insert(out.end(), l.params.begin(), l.params.end());
  return out;
}

namespace {

// ---- element-wise costs (FLOPs per element, forward; backward is 2x like everything) ----
// These are rough operation counts, not measurements; they only matter at the ~1% level.
constexpr double kNormFlopsPerElem = 8;     // BN/LN training: mean, variance, normalize, affine
constexpr double kReluFlopsPerElem = 1;     // max(x, 0)
constexpr double kAddFlopsPerElem = 1;      // residual add, embedding sum
constexpr double kDropoutFlopsPerElem = 1;  // multiply by the mask (RNG not counted)
constexpr double kGeluFlopsPerElem = 8;     // tanh approximation
constexpr double kTanhFlopsPerElem = 4;     // BERT pooler activation
constexpr double kSoftmaxFlopsPerElem = 5;  // max, subtract, exp, sum, divide

// A feature map of one sample (channels, height, width).
struct Fmap {
  int64_t c, h, w;
  double elems() const {
    return static_cast<double>(c) * static_cast<double>(h) * static_cast<double>(w);
  }
};

// Output size of a convolution or pooling window along one dimension (PyTorch's formula).
int64_t out_dim(int64_t in, int64_t k, int64_t stride, int64_t pad) {
  return (in + 2 * pad - k) / stride + 1;
}

// Appends a layer with the given forward FLOPs; backward = bwd_factor x forward.
LayerSpec& add_layer(ModelSpec& m, std::string name, std::string kind, double fwd,
                     double bwd_factor = 2.0) {
  LayerSpec l;
  l.name = std::move(name);
  l.kind = std::move(kind);
  l.fwd_flops = fwd;
  l.bwd_flops = bwd_factor * fwd;
  m.layers.push_back(std::move(l));
  return m.layers.back();
}

void add_param(LayerSpec& l, const std::string& suffix, std::vector<int64_t> shape) {
  l.params.push_back(TensorSpec{l.name + "." + suffix, std::move(shape)});
}

// nn.Conv2d(in.c, cout, k, stride, pad, bias). `extra` = folded element-wise FLOPs.
Fmap conv(ModelSpec& m, const std::string& name, Fmap in, int64_t cout, int64_t k, int64_t stride,
          int64_t pad, bool bias, double extra = 0) {
  const Fmap out{cout, out_dim(in.h, k, stride, pad), out_dim(in.w, k, stride, pad)};
  const double macs = static_cast<double>(in.c) * static_cast<double>(k * k) * out.elems();
  auto& l = add_layer(m, name, "conv", 2 * macs + (bias ? out.elems() : 0) + extra);
  add_param(l, "weight", {cout, in.c, k, k});
  if (bias) add_param(l, "bias", {cout});
  return out;
}

// nn.BatchNorm2d(x.c): weight and bias are parameters; running stats are buffers.
void batch_norm(ModelSpec& m, const std::string& name, Fmap x, double extra = 0) {
  auto& l = add_layer(m, name, "bn", kNormFlopsPerElem * x.elems() + extra);
  add_param(l, "weight", {x.c});
  add_param(l, "bias", {x.c});
}

// nn.Linear(in, out, bias) applied to `tokens` vectors per sample. `weight_shape_io`
// selects HF GPT-2's Conv1D layout {in, out} instead of nn.Linear's {out, in}.
void linear(ModelSpec& m, const std::string& name, int64_t in, int64_t out, double tokens,
            bool bias, double extra = 0, bool weight_shape_io = false) {
  const double per_token = 2.0 * static_cast<double>(in) * static_cast<double>(out) +
                           (bias ? static_cast<double>(out) : 0);
  auto& l = add_layer(m, name, "linear", per_token * tokens + extra);
  add_param(l, "weight",
            weight_shape_io ? std::vector<int64_t>{in, out} : std::vector<int64_t>{out, in});
  if (bias) add_param(l, "bias", {out});
}

// nn.Embedding(num, dim): a gather (forward) and a scatter-add into the weight gradient
// (backward); there is no input gradient, so backward = forward.
void embedding(ModelSpec& m, const std::string& name, int64_t num, int64_t dim, double tokens,
               double extra = 0) {
  auto& l = add_layer(m, name, "embedding",
                      kAddFlopsPerElem * static_cast<double>(dim) * tokens + extra, 1.0);
  add_param(l, "weight", {num, dim});
}

// nn.LayerNorm(dim) over `tokens` vectors.
void layer_norm(ModelSpec& m, const std::string& name, int64_t dim, double tokens,
                double extra = 0) {
  auto& l = add_layer(m, name, "ln", kNormFlopsPerElem * static_cast<double>(dim) * tokens + extra);
  add_param(l, "weight", {dim});
  add_param(l, "bias", {dim});
}

// Scaled dot-product attention core (no parameters): S = Q K^T / sqrt(d_head), mask,
// softmax, dropout, O = P V, over all heads. Both matmuls cost 2*seq*seq*d; the
// element-wise steps act on heads*seq*seq scores. Full (not causal-halved) matrices, as
// the HF implementations compute them.
void attention(ModelSpec& m, const std::string& name, int64_t seq, int64_t d, int64_t heads) {
  const double s = static_cast<double>(seq);
  const double matmuls = 2 * (2.0 * s * s * static_cast<double>(d));
  const double scores = static_cast<double>(heads) * s * s;
  const double elementwise =
      (1 /*scale*/ + 1 /*mask*/ + kSoftmaxFlopsPerElem + kDropoutFlopsPerElem) * scores;
  add_layer(m, name, "attention", matmuls + elementwise);
}

// The first layer needs no gradient wrt its input (the data): backward = forward.
void finish(ModelSpec& m) {
  GS_CHECK(!m.layers.empty(), "model '", m.name, "' has no layers");
  m.layers.front().bwd_flops = m.layers.front().fwd_flops;
}

// ---- ResNet-18 for CIFAR-10 --------------------------------------------------------------
// Source: kuangliu/pytorch-cifar, models/resnet.py (ResNet18(): BasicBlock, [2,2,2,2] in
// current master; early revisions used PreActBlock);
// 3x3 stride-1 stem without bias, no max-pool, F.avg_pool2d(out, 4), self.linear 512->10.
// Module names as in that file (shortcut.0/1, linear). 11,173,962 parameters.
ModelSpec build_resnet18_cifar() {
  ModelSpec m;
  m.name = "resnet18-cifar";
  m.description = "ResNet-18, CIFAR-10 variant (kuangliu/pytorch-cifar models/resnet.py)";
  m.dataset = "cifar10 (50,000 training images, 32x32)";
  m.samples_per_epoch = 50000;
  m.input_shape = {3, 32, 32};

  Fmap x{3, 32, 32};
  x = conv(m, "conv1", x, 64, 3, 1, 1, false);
  batch_norm(m, "bn1", x, kReluFlopsPerElem * x.elems());

  const int64_t planes[] = {64, 128, 256, 512};
  const int64_t strides[] = {1, 2, 2, 2};
  for (int li = 0; li < 4; ++li) {
    for (int b = 0; b < 2; ++b) {
      const std::string p = "layer" + std::to_string(li + 1) + "." + std::to_string(b) + ".";
      const int64_t stride = b == 0 ? strides[li] : 1;
      const Fmap in = x;
      x = conv(m, p + "conv1", in, planes[li], 3, stride, 1, false);
      batch_norm(m, p + "bn1", x, kReluFlopsPerElem * x.elems());
      x = conv(m, p + "conv2", x, planes[li], 3, 1, 1, false);
      batch_norm(m, p + "bn2", x, (kAddFlopsPerElem + kReluFlopsPerElem) * x.elems());
      if (stride != 1 || in.c != planes[li]) {
        const Fmap s = conv(m, p + "shortcut.0", in, planes[li], 1, stride, 0, false);
        batch_norm(m, p + "shortcut.1", s);
      }
    }
  }
  // avg_pool2d(4) over the 4x4 map folded into the classifier.
  linear(m, "linear", 512, 10, 1, true, kAddFlopsPerElem * x.elems());
  finish(m);
  return m;
}

// ---- ResNet-50 -----------------------------------------------------------------------------
// Source: torchvision/models/resnet.py, resnet50(): Bottleneck, [3,4,6,3], stride on the
// 3x3 conv (ResNet v1.5), downsample = conv1x1 + BN in the first block of each stage.
// 25,557,032 parameters in 161 tensors; ~4.1 GMACs at 224x224.
ModelSpec build_resnet50() {
  ModelSpec m;
  m.name = "resnet50";
  m.description = "ResNet-50 v1.5 (torchvision.models.resnet50)";
  m.dataset = "imagenet (ILSVRC-2012, 1,281,167 training images, 224x224 crops)";
  m.samples_per_epoch = 1281167;
  m.input_shape = {3, 224, 224};

  Fmap x{3, 224, 224};
  x = conv(m, "conv1", x, 64, 7, 2, 3, false);
  // bn1 + relu + maxpool(3, stride 2, pad 1): 9 comparisons per pooled element.
  const Fmap pooled{x.c, out_dim(x.h, 3, 2, 1), out_dim(x.w, 3, 2, 1)};
  batch_norm(m, "bn1", x, kReluFlopsPerElem * x.elems() + 9 * pooled.elems());
  x = pooled;

  const int64_t planes[] = {64, 128, 256, 512};
  const int blocks[] = {3, 4, 6, 3};
  const int64_t expansion = 4;
  for (int li = 0; li < 4; ++li) {
    for (int b = 0; b < blocks[li]; ++b) {
      const std::string p = "layer" + std::to_string(li + 1) + "." + std::to_string(b) + ".";
      const int64_t stride = (b == 0 && li > 0) ? 2 : 1;
      const int64_t width = planes[li];
      const int64_t out_c = planes[li] * expansion;
      const Fmap in = x;
      x = conv(m, p + "conv1", in, width, 1, 1, 0, false);
      batch_norm(m, p + "bn1", x, kReluFlopsPerElem * x.elems());
      x = conv(m, p + "conv2", x, width, 3, stride, 1, false);
      batch_norm(m, p + "bn2", x, kReluFlopsPerElem * x.elems());
      x = conv(m, p + "conv3", x, out_c, 1, 1, 0, false);
      batch_norm(m, p + "bn3", x, (kAddFlopsPerElem + kReluFlopsPerElem) * x.elems());
      if (b == 0) {  // stride != 1 or inplanes != planes*4: true for every first block
        const Fmap s = conv(m, p + "downsample.0", in, out_c, 1, stride, 0, false);
        batch_norm(m, p + "downsample.1", s);
      }
    }
  }
  // AdaptiveAvgPool2d(1) over 7x7 folded into fc.
  linear(m, "fc", 2048, 1000, 1, true, kAddFlopsPerElem * x.elems());
  finish(m);
  return m;
}

// ---- VGG-16 --------------------------------------------------------------------------------
// Source: torchvision/models/vgg.py, vgg16(): cfgs["D"], no batch norm; features.N indices
// count every module (Conv2d, ReLU, MaxPool2d); classifier = Linear(25088,4096), ReLU,
// Dropout, Linear(4096,4096), ReLU, Dropout, Linear(4096,1000). 138,357,544 parameters.
ModelSpec build_vgg16() {
  ModelSpec m;
  m.name = "vgg16";
  m.description = "VGG-16 (torchvision.models.vgg16, configuration D, no batch norm)";
  m.dataset = "imagenet (ILSVRC-2012, 1,281,167 training images, 224x224 crops)";
  m.samples_per_epoch = 1281167;
  m.input_shape = {3, 224, 224};

  constexpr int64_t kPool = -1;  // "M" in torchvision's cfg
  const int64_t cfg[] = {64,    64,  kPool, 128, 128,   kPool, 256, 256, 256,
                         kPool, 512, 512,   512, kPool, 512,   512, 512, kPool};
  Fmap x{3, 224, 224};
  int index = 0;  // module index inside nn.Sequential `features`
  for (int64_t v : cfg) {
    if (v == kPool) {
      // MaxPool2d(2, 2), folded into the conv before it (4 comparisons per output).
      x = Fmap{x.c, x.h / 2, x.w / 2};
      m.layers.back().fwd_flops += 4 * x.elems();
      m.layers.back().bwd_flops += 2 * 4 * x.elems();
      index += 1;
    } else {
      // Conv2d(3x3, padding 1, bias) + ReLU (index + 1).
      const Fmap out{v, x.h, x.w};
      x = conv(m, "features." + std::to_string(index), x, v, 3, 1, 1, true,
               kReluFlopsPerElem * out.elems());
      index += 2;
    }
  }
  // AdaptiveAvgPool2d((7,7)) on a 7x7 map is the identity; flatten to 512*7*7 = 25088.
  const int64_t flat = x.c * x.h * x.w;
  const double act = kReluFlopsPerElem + kDropoutFlopsPerElem;
  linear(m, "classifier.0", flat, 4096, 1, true, act * 4096);
  linear(m, "classifier.3", 4096, 4096, 1, true, act * 4096);
  linear(m, "classifier.6", 4096, 1000, 1, true);
  finish(m);
  return m;
}

// ---- BERT-base -------------------------------------------------------------------------------
// Source: HF transformers models/bert/modeling_bert.py, BertModel with the
// bert-base-uncased config (vocab 30522, hidden 768, 12 layers, 12 heads, intermediate
// 3072, max positions 512, 2 token types), with the pooler. 109,482,240 parameters.
// A sample is one sequence of 128 tokens.
ModelSpec build_bert_base() {
  constexpr int64_t kVocab = 30522, kD = 768, kLayers = 12, kHeads = 12, kFf = 3072, kMaxPos = 512,
                    kTypes = 2, kSeq = 128;
  const double s = kSeq;
  ModelSpec m;
  m.name = "bert-base";
  m.description = "BERT-base uncased encoder + pooler (HF transformers BertModel), seq 128";
  m.dataset =
      "wikipedia+bookcorpus: ~3.3e9 words (BERT paper), taken as tokens, in 128-token "
      "sequences = 25,781,250 sequences";
  m.samples_per_epoch = 25781250;
  m.input_shape = {kSeq};

  // BertEmbeddings: word + position + token_type, LayerNorm, dropout.
  embedding(m, "embeddings.word_embeddings", kVocab, kD, s);
  embedding(m, "embeddings.position_embeddings", kMaxPos, kD, s);
  embedding(m, "embeddings.token_type_embeddings", kTypes, kD, s);
  layer_norm(m, "embeddings.LayerNorm", kD, s, kDropoutFlopsPerElem * kD * s);

  const double resid = (kDropoutFlopsPerElem + kAddFlopsPerElem) * kD * s;
  for (int64_t i = 0; i < kLayers; ++i) {
    const std::string p = "encoder.layer." + std::to_string(i) + ".";
    linear(m, p + "attention.self.query", kD, kD, s, true);
    linear(m, p + "attention.self.key", kD, kD, s, true);
    linear(m, p + "attention.self.value", kD, kD, s, true);
    attention(m, p + "attention.self", kSeq, kD, kHeads);
    linear(m, p + "attention.output.dense", kD, kD, s, true, resid);
    layer_norm(m, p + "attention.output.LayerNorm", kD, s);
    linear(m, p + "intermediate.dense", kD, kFf, s, true, kGeluFlopsPerElem * kFf * s);
    linear(m, p + "output.dense", kFf, kD, s, true, resid);
    layer_norm(m, p + "output.LayerNorm", kD, s);
  }
  // BertPooler: dense + tanh on the first token only.
  linear(m, "pooler.dense", kD, kD, 1, true, kTanhFlopsPerElem * kD);
  finish(m);
  return m;
}

// ---- GPT-2 -----------------------------------------------------------------------------------
// Source: HF transformers models/gpt2/modeling_gpt2.py, GPT2LMHeadModel (names carry the
// "transformer." prefix); Conv1D weights are stored {in, out}. The LM head is tied to
// transformer.wte.weight, so named_parameters() does not list it again: "lm_head" below is
// a layer with FLOPs (2*d*vocab per token) and no parameters. Configs: gpt2 (n_embd 768,
// 12 layers, 12 heads) 124,439,808 parameters; gpt2-medium (1024, 24, 16) 354,823,168.
// A sample is one sequence of n_ctx = 1024 tokens.
struct Gpt2Config {
  const char* name;
  const char* description;
  int64_t d, layers, heads;
};

ModelSpec build_gpt2(const Gpt2Config& c) {
  constexpr int64_t kVocab = 50257, kCtx = 1024, kSeq = 1024;
  const double s = kSeq;
  const int64_t d = c.d;
  ModelSpec m;
  m.name = c.name;
  m.description = c.description;
  m.dataset =
      "openwebtext: ~9.0e9 GPT-2 BPE tokens (nanoGPT's prepare.py), in 1024-token "
      "sequences = 8,789,062 sequences";
  m.samples_per_epoch = 8789062;
  m.input_shape = {kSeq};

  // wte + wpe summed, then dropout.
  embedding(m, "transformer.wte", kVocab, d, s);
  embedding(m, "transformer.wpe", kCtx, d, s, kDropoutFlopsPerElem * static_cast<double>(d) * s);

  const double resid = (kDropoutFlopsPerElem + kAddFlopsPerElem) * static_cast<double>(d) * s;
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    layer_norm(m, p + "ln_1", d, s);
    linear(m, p + "attn.c_attn", d, 3 * d, s, true, 0, /*weight_shape_io=*/true);
    attention(m, p + "attn", kSeq, d, c.heads);
    linear(m, p + "attn.c_proj", d, d, s, true, resid, true);
    layer_norm(m, p + "ln_2", d, s);
    linear(m, p + "mlp.c_fc", d, 4 * d, s, true,
           kGeluFlopsPerElem * 4.0 * static_cast<double>(d) * s, true);
    linear(m, p + "mlp.c_proj", 4 * d, d, s, true, resid, true);
  }
  layer_norm(m, "transformer.ln_f", d, s);
  // Tied LM head: logits = h @ wte^T. Its weight gradient accumulates into wte.weight.
  add_layer(m, "lm_head", "linear", 2.0 * static_cast<double>(d) * kVocab * s);
  finish(m);
  return m;
}

ModelSpec build_gpt2_small() {
  return build_gpt2({"gpt2", "GPT-2 124M (HF GPT2LMHeadModel, tied head), seq 1024", 768, 12, 12});
}

ModelSpec build_gpt2_medium() {
  return build_gpt2(
      {"gpt2-medium", "GPT-2 medium 355M (HF GPT2LMHeadModel, tied head), seq 1024", 1024, 24, 16});
}

// The registry: one row per model, in zoo_names() order.
const NamedBuilders<ModelSpec>& registry() {
  static const NamedBuilders<ModelSpec> r = {
      {"resnet18-cifar", build_resnet18_cifar},
      {"resnet50", build_resnet50},
      {"vgg16", build_vgg16},
      {"bert-base", build_bert_base},
      {"gpt2", build_gpt2_small},
      {"gpt2-medium", build_gpt2_medium},
  };
  return r;
}

}  // namespace

const std::vector<std::string>& zoo_names() { return registry().names(); }

ModelSpec zoo_model(const std::string& name) {
  if (auto m = registry().build(name)) return *m;
  throw UsageError("unknown model '" + name + "'; known models: " + registry().joined());
}

}  // namespace gradsync::models
