// CPU feature detection for the kernels (one answer per process, computed on first use).
#include "kernels/cpu_target.hpp"

namespace gradsync::kernels {

namespace {

struct Features {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512bf16 = false, avx512fp16 = false;
  Features() {
    __builtin_cpu_init();
    avx2 = __builtin_cpu_supports("avx2");
    fma = __builtin_cpu_supports("fma");
    f16c = __builtin_cpu_supports("f16c");
    avx512f = __builtin_cpu_supports("avx512f");
    avx512bw = __builtin_cpu_supports("avx512bw");
    avx512vl = __builtin_cpu_supports("avx512vl");
    avx512dq = __builtin_cpu_supports("avx512dq");
    avx512bf16 = __builtin_cpu_supports("avx512bf16");
    avx512fp16 = __builtin_cpu_supports("avx512fp16");
  }
  Isa best() const {
    const bool has_avx2 = avx2 && fma && f16c;
    if (has_avx2 && avx512f && avx512bw && avx512vl && avx512dq) return Isa::Avx512;
    if (has_avx2) return Isa::Avx2;
    return Isa::Scalar;
  }
};

const Features& features() {
  static const Features f;
  return f;
}

}  // namespace

Isa cpu_isa() {
  static const Isa isa = features().best();
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "?";
}

std::string cpu_features() {
  const Features& f = features();
  std::string s;
  auto add = [&s](bool has, const char* name) {
    if (!has) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.f16c, "f16c");
  add(f.fma, "fma");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512dq, "avx512dq");
  add(f.avx512bf16, "avx512bf16");
  add(f.avx512fp16, "avx512fp16");
  return s.empty() ? "none" : s;
}

namespace detail {
bool cpu_has_avx512bf16() { return cpu_isa() == Isa::Avx512 && features().avx512bf16; }
}  // namespace detail

}  // namespace gradsync::kernels
