// half_types.cuh: the element types of the CUDA kernels (float, __nv_bfloat16,
// __half) seen through float: widening is exact, narrowing rounds to nearest
// even, and for float both are the identity, so a kernel templated over the
// element type does, for float, exactly what a float-only kernel does. Plus
// the host-side dispatch from the Half tag to the CUDA type. Included from .cu only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "anatomy/kernels/cuda/kernels.cuh"

namespace anatomy::cuda {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

// Runs f(std::type_identity<T>{}) with T the CUDA type of the 16-bit format.
template <typename F>
void with_half_type(Half h, F&& f) {
  if (h == Half::BF16)
    f(std::type_identity<__nv_bfloat16>{});
  else
    f(std::type_identity<__half>{});
}

}  // namespace anatomy::cuda
