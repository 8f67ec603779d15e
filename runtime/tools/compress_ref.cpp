// gradsync-compress-ref: our PowerSGD and fp16/bf16 compressors at world size 1 on given
// (or generated) gradients, written to HDF5 for comparison with PyTorch's DDP hooks
// (scripts/gpu/compare_torch.py: powerSGD_hook, fp16_compress_hook, bf16_compress_hook).
//
//   gradsync-compress-ref --out FILE [--in FILE] [--ranks 1,2,4] [--steps 3] [--seed 1]
//                         [--min-rate 2]
//
// Runs on the CPU, with no MPI: Compressor::reduce() over a one-rank in-process
// communicator (tools/self_comm.hpp), i.e. exactly the code path of the reducer.
//
// The file (also a valid --in; written atomically by h5::Writer):
//   /                 attrs tool, format_version, world_size = 1, steps, seed, min_rate,
//                     git_revision
//   /input/names      [T] strings            one bucket of T tensors, in bucket order
//   /input/ndim       [T] int64              their shapes: ndim, then the dims concatenated
//   /input/dims       [sum ndim] int64
//   /input/offsets    [T] int64              element offset of each tensor in the bucket
//   /input/grads      [S, N] float32         the bucket's gradients at steps 0..S-1
//   /powersgd/rank<R>/                       attrs rank, start = 0, warm_start = 1,
//                                            error_feedback = 1, min_rate
//       compressed    [T] int64              1 where the tensor is compressed (our plan)
//       q0            [Qn] float32           initial Q: per compressed tensor (bucket order)
//                                            its m x r matrix, row-major (PyTorch's layout)
//       out           [S, N] float32         the bucket after reduce() at each step
//       memory        [S, N] float32         error-feedback memory after each step
//                                            (input + previous memory - out, as the hook)
//       q             [S, Qn] float32        Q after each step (layout of q0)
//   /fp16/out, /bf16/out  [S, N] float32     the cast compressors' reduce() at each step
//
// With --in, /input is read from that file, and /powersgd/rank<R>/q0 too when present
// (injected as our initial Q); otherwise q0 is our own random Q (seeded by --seed). The
// generated gradients are low-rank plus noise (well conditioned for the comparison) and the
// last tensor ("edges") holds fp16/bf16 rounding edge cases (ties, subnormals, overflow).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "compress/cast.hpp"
#include "compress/powersgd.hpp"
#include "core/error.hpp"
#include "core/h5io.hpp"
#include "core/provenance.hpp"
#include "kernels/elementwise.hpp"
#include "tools/self_comm.hpp"

namespace gs = gradsync;
using gs::compress_detail::CastCompressor;
using gs::compress_detail::PowerSgdCompressor;
using gs::compress_detail::PowerSgdOptions;

namespace {

constexpr const char* kProgram = "gradsync-compress-ref";

struct Options {
  std::string in, out;
  std::vector<int> ranks{1, 2, 4};
  int steps = 3;
  std::uint64_t seed = 1;
  double min_rate = 2.0;
};

const char* kUsage =
    "usage: gradsync-compress-ref --out FILE [--in FILE] [--ranks 1,2,4] [--steps 3] [--seed 1] [--min-rate 2]\n"
    "Runs gradsync's PowerSGD (one group per rank R) and fp16/bf16 compressors at world size 1\n"
    "on the gradients of --in (or generated ones) and writes inputs and outputs to --out.\n";

Options parse(int argc, char** argv) {
  Options o;
  auto value = [&](int& i) -> std::string {
    GS_USAGE_CHECK(i + 1 < argc, "option ", argv[i], " needs a value");
    return argv[++i];
  };
  auto to_int = [](const std::string& s, const std::string& opt) {
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    GS_USAGE_CHECK(end && *end == '\0' && !s.empty(), "option ", opt, ": '", s, "' is not an integer");
    return v;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else if (a == "--in") {
      o.in = value(i);
    } else if (a == "--out") {
      o.out = value(i);
    } else if (a == "--steps") {
      o.steps = static_cast<int>(to_int(value(i), a));
      GS_USAGE_CHECK(o.steps >= 1 && o.steps <= 100, "option --steps: must be in 1..100, got ", o.steps);
    } else if (a == "--seed") {
      o.seed = static_cast<std::uint64_t>(to_int(value(i), a));
    } else if (a == "--min-rate") {
      const std::string s = value(i);
      char* end = nullptr;
      o.min_rate = std::strtod(s.c_str(), &end);
      GS_USAGE_CHECK(end && *end == '\0' && o.min_rate > 0, "option --min-rate: must be a positive number, got '", s,
                     "'");
    } else if (a == "--ranks") {
      o.ranks.clear();
      std::stringstream ss(value(i));
      std::string item;
      while (std::getline(ss, item, ',')) {
        const long long r = to_int(item, a);
        GS_USAGE_CHECK(r >= 1 && r <= 64, "option --ranks: each rank must be in 1..64, got ", r);
        o.ranks.push_back(static_cast<int>(r));
      }
      GS_USAGE_CHECK(!o.ranks.empty(), "option --ranks: give at least one rank");
    } else {
      throw gs::UsageError("unknown argument '" + a + "' (see --help)");
    }
  }
  GS_USAGE_CHECK(!o.out.empty(), "option --out is required");
  return o;
}

struct Tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::size_t offset = 0, count = 0;
};

struct Input {
  std::vector<Tensor> tensors;
  std::size_t n = 0;                     // bucket elements
  int steps = 0;
  std::vector<std::vector<float>> grads;  // [steps][n]
};

// Standard normal numbers from the project's counter-based stream (deterministic per seed).
class Normal {
 public:
  Normal(std::uint64_t seed, std::uint64_t stream) : key_(gs::kernels::rng_key(seed, 0x43525546u, stream, 0)) {}
  float next() {
    const double u1 = (static_cast<double>(gs::kernels::rng_bits(key_, i_++) >> 8) + 1.0) * 0x1p-24;
    const double u2 = static_cast<double>(gs::kernels::rng_bits(key_, i_++) >> 8) * 0x1p-24;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

 private:
  gs::kernels::RngKey key_;
  std::uint64_t i_ = 0;
};

// fp16/bf16 rounding edge cases: exact halves, ties to even, the largest finite values and
// just past them (overflow to inf), subnormals, values that underflow to zero, signed zeros.
std::vector<float> edge_values() {
  std::vector<float> v = {0.f, -0.f, 1.f, -1.f, 65504.f, -65504.f, 65519.f, 65520.f, -65520.f,
                          6.1035156e-05f /* min normal f16 */, 5.9604645e-08f /* min subnormal */,
                          2.9802322e-08f /* half of it: ties to 0 */, 4.4703484e-08f /* 0.75 of it */,
                          1e-10f, -1e-10f, 1.00048828125f /* 1 + 2^-11: tie, even -> 1 */,
                          1.00146484375f /* 1 + 3*2^-11: tie, even -> 1 + 2^-9 */, 3.3895314e+38f /* bf16 max */,
                          3.3961776e+38f /* rounds past bf16 max */, 1.0078125f /* 1 + 2^-7 */,
                          1.00390625f /* 1 + 2^-8: bf16 tie */, 1.01171875f /* 1 + 3*2^-8: bf16 tie */,
                          0.1f, -0.3f, 3.14159265f, 1e-5f, -7e-6f, 1234.5678f};
  // a sweep of magnitudes
  for (int e = -30; e <= 16; e += 2) v.push_back(std::ldexp(1.337f, e));
  return v;
}

Input generate(const Options& o) {
  Input in;
  in.steps = o.steps;
  // One bucket, in bucket order. Compressed shapes are all distinct, so PyTorch's grouping
  // of same-shaped tensors cannot reorder its P/Q memory against ours.
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> layout = {
      {"fc3.weight", {128, 256}}, {"fc3.bias", {128}},       {"fc2.weight", {10, 64}},
      {"fc2.bias", {10}},         {"conv1.weight", {16, 3, 3, 3}}, {"conv1.bias", {16}},
      {"tiny.weight", {4, 4}},    {"fc1.weight", {64, 144}},  {"fc1.bias", {64}},
      {"edges", {static_cast<std::int64_t>(edge_values().size())}}};
  for (const auto& [name, shape] : layout) {
    Tensor t;
    t.name = name;
    t.shape = shape;
    t.count = 1;
    for (auto d : shape) t.count *= static_cast<std::size_t>(d);
    t.offset = in.n;
    in.n += t.count;
    in.tensors.push_back(t);
  }
  Normal rnd(o.seed, 1);
  for (int s = 0; s < o.steps; ++s) {
    std::vector<float> g(in.n, 0.f);
    for (const Tensor& t : in.tensors) {
      float* x = g.data() + t.offset;
      if (t.name == "edges") {
        const std::vector<float> e = edge_values();
        std::copy(e.begin(), e.end(), x);
        continue;
      }
      if (t.shape.size() >= 2) {
        // rank-3 signal with decaying strength + noise: the leading singular values are
        // well separated, so the comparison is not sensitive to rounding.
        const std::size_t rows = static_cast<std::size_t>(t.shape[0]), cols = t.count / rows;
        std::fill(x, x + t.count, 0.f);
        for (int k = 0; k < 3; ++k) {
          std::vector<float> a(rows), b(cols);
          for (auto& v : a) v = rnd.next();
          for (auto& v : b) v = rnd.next();
          const float w = 1.f / static_cast<float>(1 << (2 * k));
          for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < cols; ++j) x[i * cols + j] += w * a[i] * b[j] / std::sqrt(float(cols));
        }
        for (std::size_t i = 0; i < t.count; ++i) x[i] += 0.05f * rnd.next();
      } else {
        for (std::size_t i = 0; i < t.count; ++i) x[i] = 0.1f * rnd.next();
      }
    }
    in.grads.push_back(std::move(g));
  }
  return in;
}

std::vector<float> to_float(const std::vector<double>& d) { return std::vector<float>(d.begin(), d.end()); }

Input read_input(const std::string& path, int steps_wanted) {
  gs::h5::Reader r(path);
  Input in;
  const auto names = r.read_strings("/input/names");
  const auto ndim = r.read_int("/input/ndim");
  const auto dims = r.read_int("/input/dims");
  const auto offsets = r.read_int("/input/offsets");
  GS_USAGE_CHECK(ndim.size() == names.size() && offsets.size() == names.size(), path,
                 ": /input/names, /input/ndim and /input/offsets differ in length");
  std::size_t d = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    Tensor t;
    t.name = names[i];
    GS_USAGE_CHECK(ndim[i] >= 1 && d + static_cast<std::size_t>(ndim[i]) <= dims.size(), path,
                   ": bad /input/ndim for tensor ", t.name);
    t.count = 1;
    for (std::int64_t k = 0; k < ndim[i]; ++k) {
      t.shape.push_back(dims[d]);
      GS_USAGE_CHECK(dims[d] >= 1, path, ": tensor ", t.name, " has a dimension ", dims[d]);
      t.count *= static_cast<std::size_t>(dims[d++]);
    }
    t.offset = static_cast<std::size_t>(offsets[i]);
    in.tensors.push_back(t);
  }
  const auto gdims = r.dims("/input/grads");
  GS_USAGE_CHECK(gdims.size() == 2, path, ": /input/grads must be [steps, elements]");
  in.steps = static_cast<int>(gdims[0]);
  in.n = gdims[1];
  for (const Tensor& t : in.tensors)
    GS_USAGE_CHECK(t.offset + t.count <= in.n, path, ": tensor ", t.name, " lies outside the bucket");
  const std::vector<float> all = to_float(r.read_double("/input/grads"));
  if (steps_wanted > 0) in.steps = std::min(in.steps, steps_wanted);
  for (int s = 0; s < in.steps; ++s)
    in.grads.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(s * in.n),
                          all.begin() + static_cast<std::ptrdiff_t>((s + 1) * in.n));
  return in;
}

gs::BucketView bucket_of(const Input& in, std::vector<float>& data) {
  gs::BucketView b;
  b.index = 0;
  b.data = data.data();
  b.count = data.size();
  for (const Tensor& t : in.tensors) b.tensors.push_back({t.name, t.shape, t.offset, t.count});
  return b;
}

// Our batched Q (per matrix: cols x rank, column-major) <-> PyTorch's (m x r, row-major).
std::vector<float> q_to_rowmajor(const PowerSgdCompressor::Plan& plan, std::span<const float> q) {
  std::vector<float> out(q.size());
  for (const auto& m : plan.matrices)
    for (std::int64_t i = 0; i < m.cols; ++i)
      for (int j = 0; j < m.rank; ++j)
        out[m.q_offset + static_cast<std::size_t>(i * m.rank + j)] =
            q[m.q_offset + static_cast<std::size_t>(j * m.cols + i)];
  return out;
}
void q_from_rowmajor(const PowerSgdCompressor::Plan& plan, const std::vector<float>& rm, std::span<float> q) {
  for (const auto& m : plan.matrices)
    for (std::int64_t i = 0; i < m.cols; ++i)
      for (int j = 0; j < m.rank; ++j)
        q[m.q_offset + static_cast<std::size_t>(j * m.cols + i)] =
            rm[m.q_offset + static_cast<std::size_t>(i * m.rank + j)];
}

std::vector<float> flatten(const std::vector<std::vector<float>>& rows) {
  std::vector<float> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

int run(const Options& o, int argc, char** argv) {
  const Input in = o.in.empty() ? generate(o) : read_input(o.in, o.steps);
  const int S = in.steps;
  const std::size_t N = in.n;
  gs::tools::SelfCommunicator comm;
  gs::tools::SelfAllreduce allreduce;

  gs::h5::Writer w(o.out);
  gs::Provenance prov;
  prov.program = kProgram;
  for (int i = 0; i < argc; ++i) prov.argv.push_back(argv[i]);
  prov.hostnames = {comm.hostname()};
  gs::write_provenance(w, prov);
  w.attr("/", "tool", std::string(kProgram));
  w.attr("/", "format_version", std::int64_t{1});
  w.attr("/", "world_size", std::int64_t{1});
  w.attr("/", "steps", std::int64_t{S});
  w.attr("/", "seed", static_cast<std::int64_t>(o.seed));
  w.attr("/", "min_rate", o.min_rate);

  {
    std::vector<std::string> names;
    std::vector<std::int64_t> ndim, dims, offsets;
    for (const Tensor& t : in.tensors) {
      names.push_back(t.name);
      ndim.push_back(static_cast<std::int64_t>(t.shape.size()));
      dims.insert(dims.end(), t.shape.begin(), t.shape.end());
      offsets.push_back(static_cast<std::int64_t>(t.offset));
    }
    w.write("/input/names", names);
    w.write("/input/ndim", ndim);
    w.write("/input/dims", dims);
    w.write("/input/offsets", offsets);
    w.write("/input/grads", flatten(in.grads), {static_cast<std::uint64_t>(S), N});
  }

  std::unique_ptr<gs::h5::Reader> src;
  if (!o.in.empty()) src = std::make_unique<gs::h5::Reader>(o.in);

  for (int R : o.ranks) {
    PowerSgdOptions po;
    po.rank = R;
    po.start = 0;
    po.min_rate = o.min_rate;
    po.warm_start = true;
    po.error_feedback = true;
    PowerSgdCompressor psgd(po, o.seed);
    const std::string g = "/powersgd/rank" + std::to_string(R);

    std::vector<float> scratch = in.grads[0];
    gs::BucketView sb = bucket_of(in, scratch);
    const PowerSgdCompressor::Plan plan = PowerSgdCompressor::make_plan(sb, R, o.min_rate);
    // Create the bucket's state and its Q (ours, from the seed) on a scratch copy: the
    // error-feedback memory is still zero afterwards, so the real step 0 starts from the
    // same state, with the Q we leave in q_buffer (warm start keeps it).
    psgd.compute_p(sb, 0);
    const std::span<float> q = psgd.q_buffer(sb.index);
    std::vector<float> q0;
    if (src && src->exists(g + "/q0")) {
      q0 = to_float(src->read_double(g + "/q0"));
      GS_USAGE_CHECK(q0.size() == q.size(), o.in, ": ", g, "/q0 has ", q0.size(), " values, our plan needs ", q.size());
      q_from_rowmajor(plan, q0, q);
    } else {
      q0 = q_to_rowmajor(plan, q);
    }

    std::vector<std::int64_t> compressed(in.tensors.size(), 0);
    for (const auto& m : plan.matrices)
      for (std::size_t i = 0; i < in.tensors.size(); ++i)
        if (in.tensors[i].offset == m.offset) compressed[i] = 1;

    std::vector<std::vector<float>> outs, mems, qs;
    std::vector<float> memory(N, 0.f);
    for (int s = 0; s < S; ++s) {
      std::vector<float> data = in.grads[static_cast<std::size_t>(s)];
      std::vector<float> input = data;
      for (std::size_t i = 0; i < N; ++i) input[i] += memory[i];  // what the compressor sees (fp32 add)
      gs::BucketView b = bucket_of(in, data);
      gs::CompressStats st;
      psgd.reduce(comm, allreduce, b, s, st);
      GS_CHECK(st.compressed, "PowerSGD step ", s, " was not compressed");
      for (std::size_t i = 0; i < N; ++i) memory[i] = input[i] - data[i];
      outs.push_back(data);
      mems.push_back(memory);
      qs.push_back(q_to_rowmajor(plan, psgd.q_buffer(b.index)));
    }
    w.group(g);
    w.attr(g, "rank", std::int64_t{R});
    w.attr(g, "start", std::int64_t{0});
    w.attr(g, "warm_start", std::int64_t{1});
    w.attr(g, "error_feedback", std::int64_t{1});
    w.attr(g, "min_rate", o.min_rate);
    w.attr(g, "spec", psgd.spec());
    w.attr(g, "q0_source", std::string(src && src->exists(g + "/q0") ? "input file" : "gradsync random_q"));
    w.write(g + "/compressed", compressed);
    w.write(g + "/q0", q0);
    w.write(g + "/out", flatten(outs), {static_cast<std::uint64_t>(S), N});
    w.write(g + "/memory", flatten(mems), {static_cast<std::uint64_t>(S), N});
    w.write(g + "/q", flatten(qs), {static_cast<std::uint64_t>(S), static_cast<std::uint64_t>(q0.size())});
    std::printf("powersgd rank %d: %zu of %zu tensors compressed, |Q| = %zu, %d steps\n", R, plan.matrices.size(),
                in.tensors.size(), q0.size(), S);
  }

  for (gs::DType t : {gs::DType::F16, gs::DType::BF16}) {
    CastCompressor cast(t);
    std::vector<std::vector<float>> outs;
    for (int s = 0; s < S; ++s) {
      std::vector<float> data = in.grads[static_cast<std::size_t>(s)];
      gs::BucketView b = bucket_of(in, data);
      gs::CompressStats st;
      cast.reduce(comm, allreduce, b, s, st);
      outs.push_back(data);
    }
    w.write("/" + cast.spec() + "/out", flatten(outs), {static_cast<std::uint64_t>(S), N});
    std::printf("%s: %d steps of %zu values\n", cast.spec().c_str(), S, N);
  }
  w.commit();
  std::printf("wrote %s\n", o.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv), argc, argv);
  } catch (const gs::UsageError& e) {
    std::fprintf(stderr, "%s: error: %s\n", kProgram, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", kProgram, e.what());
    return 1;
  }
}
