// adamw_math.cuh: one element of torch.optim.AdamW's update as the CPU
// backend computes it, shared by the float32 AdamW (optimizer.cu) and the
// 8-bit one (adamw_8bit.cu), so both give the CPU reference's bits.
// Included from .cu only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "anatomy/kernels/backend.h"

namespace anatomy::cuda {

// Constants of one AdamW step, computed on the host exactly as the CPU backend does.
struct AdamWConstants {
  double beta1, one_minus_beta1, beta2, one_minus_beta2, eps, step_size, bias2_sqrt, decay;
  float grad_scale;
};

inline AdamWConstants adamw_constants(const AdamWHyper& hp) {
  const double bias1 = 1.0 - std::pow(hp.beta1, static_cast<double>(hp.step));
  const double bias2 = 1.0 - std::pow(hp.beta2, static_cast<double>(hp.step));
  return AdamWConstants{hp.beta1,    1.0 - hp.beta1,        hp.beta2,
                        1.0 - hp.beta2, hp.eps,             hp.lr / bias1,
                        std::sqrt(bias2), 1.0 - hp.lr * hp.weight_decay,
                        static_cast<float>(hp.grad_scale)};
}

// The CPU's loop body with every operation rounded on its own (the _rn
// intrinsics stop nvcc fusing multiply-adds the x86 build does not fuse), so
// that parameters and moments come out bit-identical to the CPU backend's:
// updates m, v and p (one element) in place.
__device__ __forceinline__ void adamw_element(const AdamWConstants& k, float grad, float& m_io, float& v_io,
                                              float& p_io) {
  const double g = __fmul_rn(grad, k.grad_scale);  // exact when the scale is 1
  const double m = __dadd_rn(__dmul_rn(k.beta1, m_io), __dmul_rn(k.one_minus_beta1, g));
  const double v = __dadd_rn(__dmul_rn(k.beta2, v_io), __dmul_rn(__dmul_rn(k.one_minus_beta2, g), g));
  m_io = static_cast<float>(m);
  v_io = static_cast<float>(v);
  const double denom = __dadd_rn(__ddiv_rn(__dsqrt_rn(v), k.bias2_sqrt), k.eps);
  p_io = static_cast<float>(
      __dsub_rn(__dmul_rn(static_cast<double>(p_io), k.decay), __ddiv_rn(__dmul_rn(k.step_size, m), denom)));
}

// Copy is __nv_bfloat16 or __half: the parameter rounded for the 16-bit copy.
template <typename Copy>
__device__ __forceinline__ Copy round_copy(float p) {
  if constexpr (std::is_same_v<Copy, __nv_bfloat16>) return __float2bfloat16_rn(p);
  else return __float2half_rn(p);
}

}  // namespace anatomy::cuda
