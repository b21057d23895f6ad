// half_types.cuh: the element types of the CUDA kernels (float, __nv_bfloat16,
// __half) seen through float: widening is exact, narrowing rounds to nearest
// even, and for float both are the identity, so a kernel templated over the
// element type does, for float, exactly what a float-only kernel does. Plus
// the host-side dispatch from the Half tag, or a DType, to the CUDA type. Included from .cu only.
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

// Eight elements of T (16 bytes of 16-bit data, 32 of float) kept packed, as
// loaded by 16-byte accesses from a 16-byte aligned p: half the registers of
// widened floats for 16-bit data.
template <typename T>
struct Pack8 {
  alignas(16) T e[8];
};
template <typename T>
__device__ __forceinline__ Pack8<T> load_pack(const T* p) {
  Pack8<T> r;
#pragma unroll
  for (int k = 0; k < static_cast<int>(sizeof(Pack8<T>) / 16); ++k)
    reinterpret_cast<uint4*>(r.e)[k] = reinterpret_cast<const uint4*>(p)[k];
  return r;
}

// Eight consecutive elements at a 16-byte aligned p, widened: one 16-byte load
// for 16-bit types, two for float; and the rounding store back.
template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&v)[8]) {
  if constexpr (std::is_same_v<T, float>) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    alignas(16) T e[8];
    *reinterpret_cast<uint4*>(e) = *reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = to_float(e[k]);
  }
}

template <typename T>
__device__ __forceinline__ void store8(T* p, const float (&v)[8]) {
  if constexpr (std::is_same_v<T, float>) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    alignas(16) T e[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) e[k] = from_float<T>(v[k]);
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(e);
  }
}

// Runs f(std::type_identity<T>{}) with T the CUDA type of the 16-bit format.
template <typename F>
void with_half_type(Half h, F&& f) {
  if (h == Half::BF16)
    f(std::type_identity<__nv_bfloat16>{});
  else
    f(std::type_identity<__half>{});
}

// Runs f(std::type_identity<T>{}) for the element type of a float32, bf16 or
// fp16 tensor; `what` names the op in the error for any other type.
template <typename F>
void with_element_type(DType t, const char* what, F&& f) {
  if (t == DType::F32) f(std::type_identity<float>{});
  else if (t == DType::BF16) f(std::type_identity<__nv_bfloat16>{});
  else if (t == DType::F16) f(std::type_identity<__half>{});
  else ANATOMY_CHECK(false, "{}: no {} kernels", what, dtype_name(t));
}

}  // namespace anatomy::cuda
