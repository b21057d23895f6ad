// fp32_products.h: how a backend runs float32 matrix products. A GPU choice:
// the CPU backend has plain float32 only.
#pragma once

#include <string_view>

namespace anatomy {

enum class Fp32Products {
  // CUDA cores: float32 inputs, float32 accumulation. PyTorch's default
  // (torch.set_float32_matmul_precision("highest")), and the seed's vanilla run.
  Float32,
  // TensorFloat-32 tensor cores: each input rounded to a 10-bit mantissa
  // (relative error up to 2^-11), float32 accumulation. `--tf32`, as
  // torch.backends.cuda.matmul.allow_tf32.
  Tf32,
  // Split TF32 on tensor cores (`--split-tf32`): each input x is written as
  // hi + lo, hi = x rounded to TF32 and lo = (x - hi) rounded to TF32, and
  // the product is lo·hi + hi·lo + hi·hi, one TF32 product of three times the
  // depth with float32 accumulation, the small terms first. An input keeps about 22 of float32's 24
  // significand bits (relative error up to 2^-22 against float32's 2^-24); the
  // dropped lo·lo term is below 2^-22 of each term too.
  SplitTf32,
};

// "float32", "tf32" or "split-tf32": the ceilings' cache key and reports.
constexpr std::string_view fp32_products_label(Fp32Products p) {
  switch (p) {
    case Fp32Products::Tf32: return "tf32";
    case Fp32Products::SplitTf32: return "split-tf32";
    case Fp32Products::Float32: break;
  }
  return "float32";
}

}  // namespace anatomy
