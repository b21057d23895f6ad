// attention_common.cuh: small pieces the fused attention kernels share
// (flash_attention.cu, flash_attention_f32.cu, hopper_attention.cu): device
// helpers, and the launchers' host-side checks of their arguments.
// Included from .cu only.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "anatomy/core/error.h"

namespace anatomy::cuda {

// 2^x on the special-function unit (flush-to-zero; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// 1 when batch entry `mrow` keeps at least one key (or there is no mask). All
// threads of the block must call it.
__device__ __forceinline__ bool any_key_kept(const int64_t* mrow, int L) {
  if (mrow == nullptr) return true;
  int local = 0;
  for (int j = threadIdx.x; j < L; j += blockDim.x) local |= mrow[j] != 0;
  return __syncthreads_or(local) != 0;
}

// A dropout probability in [0, 1), else the run ends naming `what`.
inline void check_attention_dropout(const char* what, float p) {
  if (!(p >= 0.0f && p < 1.0f)) fail("{}: dropout probability {} not in [0, 1)", what, p);
}

// Every pointer 16-byte aligned, else the run ends naming `what`.
inline void check_aligned16(const char* what, std::initializer_list<const void*> ptrs) {
  for (const void* ptr : ptrs)
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) fail("{}: tensors must be 16-byte aligned", what);
}

}  // namespace anatomy::cuda
