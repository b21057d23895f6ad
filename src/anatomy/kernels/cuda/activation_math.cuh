// activation_math.cuh: the activation functions and their derivatives as
// the CUDA kernels evaluate them in float (element functors: forward
// f(x, index), backward f(x, dy)), shared by the element-wise kernels and the
// fused ones so that both round the same values. Included from .cu only.
#pragma once

#include <cstdint>

namespace anatomy::cuda {

constexpr float kSqrt1_2 = 0.70710678118654752440f;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
constexpr float kGeluCubic = 0.044715f;

// 0.5·x·(1 + erf(x/√2)) written with erfc, which keeps full relative precision
// for large negative x where 1 + erf(·) would cancel.
struct GeluErfForward {
  __device__ float operator()(float v, int64_t) const { return 0.5f * v * erfcf(-v * kSqrt1_2); }
};
struct GeluErfBackward {
  __device__ float operator()(float v, float g) const {
    const float d = 0.5f * erfcf(-v * kSqrt1_2) + v * kInvSqrt2Pi * expf(-0.5f * v * v);
    return g * d;
  }
};

// The same GELU for 16-bit activations, with a cheaper erfc: the float erfcf
// left the GELU forward compute-bound on an H100 (ncu: SM 88% busy, DRAM 50%).
// erfc(z), z ≥ 0, as t·exp(−z² + P(t)), t = 1/(1 + z/2), P the degree-9
// Chebyshev fit whose fractional error is under 1.2e-7 in exact arithmetic: one
// reciprocal and one exponential. In float its relative error stays near 1e-6
// for z ≤ 4 and under 3e-5 up to where erfc underflows, far inside a 16-bit
// value's rounding (2^-9 relative for bf16, 2^-12 for fp16); the GPU test
// GeluFor16BitValues checks every bf16 and fp16 input against the exact GELU.
__device__ __forceinline__ float erfc_nonnegative(float z) {
  const float t = __frcp_rn(fmaf(0.5f, z, 1.0f));
  float p = 0.17087277f;
  p = fmaf(p, t, -0.82215223f);
  p = fmaf(p, t, 1.48851587f);
  p = fmaf(p, t, -1.13520398f);
  p = fmaf(p, t, 0.27886807f);
  p = fmaf(p, t, -0.18628806f);
  p = fmaf(p, t, 0.09678418f);
  p = fmaf(p, t, 0.37409196f);
  p = fmaf(p, t, 1.00002368f);
  p = fmaf(p, t, -1.26551223f);
  return t * expf(fmaf(-z, z, p));
}
// Φ(v) = erfc(−v/√2)/2: for v < 0 from erfc(|v|/√2), which keeps its relative
// precision; for v ≥ 0 as 1 − erfc(|v|/√2)/2, where erfc ≤ 1 cannot cancel.
__device__ __forceinline__ float normal_cdf16(float v) {
  const float half_tail = 0.5f * erfc_nonnegative(fabsf(v) * kSqrt1_2);
  return v >= 0.0f ? 1.0f - half_tail : half_tail;
}
struct GeluErfForward16 {
  __device__ float operator()(float v, int64_t) const { return v * normal_cdf16(v); }
};
struct GeluErfBackward16 {
  __device__ float operator()(float v, float g) const {
    return g * (normal_cdf16(v) + v * kInvSqrt2Pi * expf(-0.5f * v * v));
  }
};

// The tanh approximation: 0.5·x·(1 + tanh(u)) = x·σ(2u), u = √(2/π)(x + 0.044715x³);
// the sigmoid form has no cancellation for negative x.
struct GeluTanhForward {
  __device__ float operator()(float v, int64_t) const {
    const float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
    return v / (1.0f + expf(-2.0f * u));
  }
};
struct GeluTanhBackward {
  // With s = σ(2u): 1 + tanh(u) = 2s and 1 − tanh²(u) = 4s(1 − s), so the
  // CPU's 0.5(1 + t) + 0.5x(1 − t²)·u' becomes s + 2x·s(1 − s)·u'. For s near
  // 1, 1 − s cancels; there it is taken as e·s (e = e^−2u) instead.
  __device__ float operator()(float v, float g) const {
    const float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
    const float e = expf(-2.0f * u);
    const float sig = 1.0f / (1.0f + e);
    const float one_minus_sig = sig < 0.5f ? 1.0f - sig : e * sig;  // e may be inf only when sig is 0
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    return g * (sig + 2.0f * v * sig * one_minus_sig * du);
  }
};

struct ReluForward {
  // Written as the CPU writes it, so that NaN maps to 0 on both.
  __device__ float operator()(float v, int64_t) const { return v > 0.0f ? v : 0.0f; }
};
struct ReluBackward {
  __device__ float operator()(float v, float g) const { return g * (v > 0.0f ? 1.0f : 0.0f); }
};

struct TanhForward {
  __device__ float operator()(float v, int64_t) const { return tanhf(v); }
};
struct TanhBackward {
  // `v` is y = tanh(x). 1 − y² cancels badly near |y| = 1 in float, so it is
  // computed in double exactly as the CPU does (the _rn intrinsics keep nvcc
  // from fusing into an FMA the CPU does not use), which makes it bit-exact.
  __device__ float operator()(float v, float g) const {
    const double y = v;
    const double d = __dsub_rn(1.0, __dmul_rn(y, y));
    return static_cast<float>(__dmul_rn(static_cast<double>(g), d));
  }
};

}  // namespace anatomy::cuda
