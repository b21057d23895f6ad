// split_tf32.cu: the operand split of split-TF32 float32 products
// (Fp32Products::SplitTf32, kernels/fp32_products.h).
//
// Each float32 x becomes hi = x rounded to TF32 (a 10-bit mantissa: the low 13
// bits of the float32 cleared, rounding half away from zero) and lo = x - hi
// (exact in float32) rounded to TF32 the same way. The rounding is done here,
// in integer arithmetic, so the tensor cores get inputs that are exactly
// TF32 whatever their own conversion does.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/kernels.cuh"

namespace anatomy::cuda {
namespace {

// x rounded to TF32. Infinities and NaNs pass unchanged; a finite x whose
// rounding would overflow to infinity is truncated instead.
__device__ __forceinline__ float round_tf32(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  const uint32_t r = (u + 0x1000u) & 0xffffe000u;
  if ((r & 0x7f800000u) == 0x7f800000u) return __uint_as_float(u & 0xffffe000u);
  return __uint_as_float(r);
}

struct Pieces {
  float hi, lo;
};

// lo is 0 for a non-finite x (x - hi would be NaN for an infinity).
__device__ __forceinline__ Pieces split(float x) {
  const float hi = round_tf32(x);
  return {hi, isfinite(x) ? round_tf32(x - hi) : 0.0f};
}

// dst's segment s (0, 1, 2) holds lo where bit s of lo_mask is set, else hi.
// Along the rows, segment s of column c starts at dst + c·3·rows + s·rows;
// along the columns, at dst + (s·cols + c)·rows. Each thread takes V
// consecutive rows of one column (V = 4 when rows, ld and the pointers allow
// 16-byte accesses).
template <int V>
__global__ void split_tf32_kernel(const float* __restrict__ src, int64_t rows, int64_t cols, int64_t ld,
                                  bool along_rows, unsigned lo_mask, float* __restrict__ dst) {
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (r >= rows) return;
  for (int64_t c = blockIdx.y; c < cols; c += gridDim.y) {
    float x[V];
    if constexpr (V == 4) {
      const float4 v = *reinterpret_cast<const float4*>(src + c * ld + r);
      x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
    } else {
      x[0] = src[c * ld + r];
    }
    float hi[V], lo[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const Pieces p = split(x[i]);
      hi[i] = p.hi;
      lo[i] = p.lo;
    }
#pragma unroll
    for (int s = 0; s < 3; ++s) {
      const float* piece = (lo_mask >> s) & 1u ? lo : hi;
      float* out = along_rows ? dst + c * 3 * rows + s * rows + r : dst + (s * cols + c) * rows + r;
      if constexpr (V == 4) *reinterpret_cast<float4*>(out) = make_float4(piece[0], piece[1], piece[2], piece[3]);
      else out[0] = piece[0];
    }
  }
}

}  // namespace

void split_tf32(cudaStream_t s, const float* src, int64_t rows, int64_t cols, int64_t ld, bool along_rows,
                unsigned lo_mask, float* dst) {
  if (rows <= 0 || cols <= 0) return;
  ANATOMY_CHECK(ld >= rows, "split_tf32: leading dimension {} below {} rows", ld, rows);
  const bool vector = rows % 4 == 0 && ld % 4 == 0 && is_16_byte_aligned(src) && is_16_byte_aligned(dst);
  const int64_t per_thread = vector ? 4 : 1;
  const int64_t threads_per_column = (rows + per_thread - 1) / per_thread;
  const unsigned block = static_cast<unsigned>(std::min<int64_t>(256, ((threads_per_column + 31) / 32) * 32));
  const int64_t x_blocks = (threads_per_column + block - 1) / block;
  ANATOMY_CHECK(x_blocks <= 0x7fffffff, "split_tf32: {} rows are too many", rows);
  const dim3 grid(static_cast<unsigned>(x_blocks), static_cast<unsigned>(std::min<int64_t>(cols, 65535)));
  if (vector) split_tf32_kernel<4><<<grid, block, 0, s>>>(src, rows, cols, ld, along_rows, lo_mask, dst);
  else split_tf32_kernel<1><<<grid, block, 0, s>>>(src, rows, cols, ld, along_rows, lo_mask, dst);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace anatomy::cuda
