// optimizer.cu: the CUDA kernels of the optimizer step: the sum of squares
// behind gradient-norm clipping, and torch.optim.AdamW's update of one tensor.
//
// sum_of_squares sums in double in a fixed two-level order (blocks over fixed
// slices of the tensor into `scratch`, then one block over the block sums), so
// the norm, and whether and how much gradients are clipped, is the same on
// every run. adamw_step repeats the CPU backend's double arithmetic operation
// for operation, so the two backends update parameters to the same bits.
//
// Mixed precision adds two things here. adamw_step_with_copy is the same
// update that also writes the new parameter rounded to bf16/fp16, the copy the
// 16-bit forward reads, in the same pass over the tensor. all_finite and
// unscale_and_check serve fp16 loss scaling: whether any gradient overflowed
// (then the step is skipped and the scale lowered), and gradients divided by
// the scale, in one pass. Their flag is an AND over fixed blocks, first into
// `scratch`, then in one block: integer logic, the same on every run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "anatomy/kernels/cuda/adamw_math.cuh"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/fused.cuh"
#include "anatomy/kernels/cuda/kernels.cuh"
#include "anatomy/kernels/cuda/reductions.cuh"

namespace anatomy::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kFinishThreads = 1024;
// The number of first-level blocks depends on n alone (not on the GPU), so
// the summation order, and with it the result, is fixed for a given n.
// (reduction_blocks of cuda_memory.h, which sizes the partials' scratch.)
constexpr int64_t kMaxBlocks = kFinishThreads;
constexpr int64_t kItemsPerThread = 16;  // four float4 groups
static_assert(kThreads == kReductionThreads && kItemsPerThread == kReductionItemsPerThread &&
                  kMaxBlocks == kReductionMaxBlocks,
              "cuda_memory.h sizes the reductions' scratch with these");

int64_t square_blocks(int64_t n) { return reduction_blocks(n); }

// Each thread takes the groups of four elements blockIdx·blockDim + tid +
// k·(grid·blockDim), adding a group's squares in element order. Whether a group
// is read as one float4 (16-byte aligned data) or as four floats, the sums are
// the same, so the result does not depend on the tensor's alignment.
template <bool kVec4>
__global__ void __launch_bounds__(kThreads) square_partials_kernel(const float* x, int64_t n, double* partials) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t groups = (n + 3) / 4;
  double acc = 0.0;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; g < groups; g += stride) {
    const int64_t i = 4 * g;
    if (kVec4 && i + 4 <= n) {
      const float4 v = *reinterpret_cast<const float4*>(x + i);
      acc += static_cast<double>(v.x) * v.x;
      acc += static_cast<double>(v.y) * v.y;
      acc += static_cast<double>(v.z) * v.z;
      acc += static_cast<double>(v.w) * v.w;
    } else {
      for (int64_t j = i; j < n && j < i + 4; ++j) acc += static_cast<double>(x[j]) * x[j];
    }
  }
  const double total = block_sum<kThreads>(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kFinishThreads)
    square_finish_kernel(const double* partials, int64_t count, double* result) {
  const double v = threadIdx.x < count ? partials[threadIdx.x] : 0.0;
  const double total = block_sum<kFinishThreads>(v);
  if (threadIdx.x == 0) *result = total;
}


// AdamWChunk and kAdamWChunk (elements per block of the multi-tensor kernel):
// cuda_memory.h, which builds the chunk table.
static_assert(sizeof(AdamWChunk) == 24 && alignof(AdamWChunk) == 8, "the table's layout, as the device reads it");

// adamw_element on element i of the buffers, and its copy[i] = round(param[i]).
template <typename Copy>
__device__ __forceinline__ void adamw_at(const AdamWConstants& k, int64_t i, float* param, const float* grad,
                                         float* exp_avg, float* exp_avg_sq, Copy* copy) {
  float m = exp_avg[i], v = exp_avg_sq[i], p = param[i];
  adamw_element(k, grad[i], m, v, p);
  exp_avg[i] = m;
  exp_avg_sq[i] = v;
  param[i] = p;
  if constexpr (!std::is_void_v<Copy>) copy[i] = round_copy<Copy>(p);
}

template <typename Copy>
__global__ void adamw_kernel(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                             AdamWConstants k, Copy* copy) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    adamw_at(k, i, param, grad, exp_avg, exp_avg_sq, copy);
}

// Multi-tensor AdamW: block b updates chunk b of a table of chunks, each a
// run of one parameter group (so one weight decay), element by element as
// adamw_kernel; a chunk that starts 16-byte aligned is read four floats at a time.
template <typename Copy>
__global__ void __launch_bounds__(kThreads) adamw_chunks_kernel(float* param, const float* grad, float* exp_avg,
                                                                float* exp_avg_sq, const AdamWChunk* chunks,
                                                                AdamWConstants with_decay, Copy* copy) {
  const AdamWChunk c = chunks[blockIdx.x];
  AdamWConstants k = with_decay;
  if (!c.decay) k.decay = 1.0;  // 1 − lr·0
  // Chunks start at 64-element multiples (tensor offsets in the flat buffers):
  // groups of four are read and written as float4 where whole; the tail one by one.
  if ((c.begin & 3) == 0) {
    for (int64_t i = c.begin + 4 * threadIdx.x; i < c.end; i += 4 * kThreads) {
      if (i + 4 <= c.end) {
        const float4 g4 = *reinterpret_cast<const float4*>(grad + i);
        float4 m4 = *reinterpret_cast<const float4*>(exp_avg + i);
        float4 v4 = *reinterpret_cast<const float4*>(exp_avg_sq + i);
        float4 p4 = *reinterpret_cast<const float4*>(param + i);
        adamw_element(k, g4.x, m4.x, v4.x, p4.x);
        adamw_element(k, g4.y, m4.y, v4.y, p4.y);
        adamw_element(k, g4.z, m4.z, v4.z, p4.z);
        adamw_element(k, g4.w, m4.w, v4.w, p4.w);
        *reinterpret_cast<float4*>(exp_avg + i) = m4;
        *reinterpret_cast<float4*>(exp_avg_sq + i) = v4;
        *reinterpret_cast<float4*>(param + i) = p4;
        if constexpr (!std::is_void_v<Copy>) {
          alignas(8) Copy h[4] = {round_copy<Copy>(p4.x), round_copy<Copy>(p4.y), round_copy<Copy>(p4.z),
                                  round_copy<Copy>(p4.w)};
          *reinterpret_cast<uint2*>(copy + i) = *reinterpret_cast<const uint2*>(h);
        }
      } else {
        for (int64_t j = i; j < c.end; ++j) adamw_at(k, j, param, grad, exp_avg, exp_avg_sq, copy);
      }
    }
  } else {
    for (int64_t i = c.begin + threadIdx.x; i < c.end; i += kThreads)
      adamw_at(k, i, param, grad, exp_avg, exp_avg_sq, copy);
  }
}

// ---- finite checks ----

// Not inf and not NaN: the exponent bits are not all ones.
__device__ __forceinline__ bool finite_bits(float v) { return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u; }

int64_t finite_blocks(int64_t n) { return square_blocks(n); }

// Each block writes 1 to partials[blockIdx] when all of its elements (the
// same groups of four as square_partials_kernel) are finite; with kUnscale it
// also writes y[i] = x[i]·inv_scale and checks x and y both.
template <bool kVec4, bool kUnscale>
__global__ void __launch_bounds__(kThreads)
    finite_partials_kernel(const float* x, float* y, int64_t n, float inv_scale, int* partials) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t groups = (n + 3) / 4;
  bool ok = true;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; g < groups; g += stride) {
    const int64_t i = 4 * g;
    if (kVec4 && i + 4 <= n) {
      const float4 v = *reinterpret_cast<const float4*>(x + i);
      ok = ok && finite_bits(v.x) && finite_bits(v.y) && finite_bits(v.z) && finite_bits(v.w);
      if constexpr (kUnscale) {
        const float4 u = make_float4(v.x * inv_scale, v.y * inv_scale, v.z * inv_scale, v.w * inv_scale);
        *reinterpret_cast<float4*>(y + i) = u;
        ok = ok && finite_bits(u.x) && finite_bits(u.y) && finite_bits(u.z) && finite_bits(u.w);
      }
    } else {
      for (int64_t j = i; j < n && j < i + 4; ++j) {
        const float v = x[j];
        ok = ok && finite_bits(v);
        if constexpr (kUnscale) {
          const float u = v * inv_scale;
          y[j] = u;
          ok = ok && finite_bits(u);
        }
      }
    }
  }
  const int all = __syncthreads_and(ok ? 1 : 0);
  if (threadIdx.x == 0) partials[blockIdx.x] = all;
}

__global__ void __launch_bounds__(kFinishThreads)
    finite_finish_kernel(const int* partials, int64_t count, int* flag, bool and_into_flag) {
  const int mine = threadIdx.x < count ? partials[threadIdx.x] : 1;
  const int all = __syncthreads_and(mine);
  if (threadIdx.x == 0) {
    const bool before = and_into_flag ? *flag != 0 : true;
    *flag = (before && all != 0) ? 1 : 0;
  }
}

void launch_finite(cudaStream_t s, const float* x, float* y, int64_t n, float inv_scale, int* flag, void* scratch,
                   bool and_into_flag) {
  n = std::max<int64_t>(n, 0);  // n == 0: one block finds nothing, the flag says finite
  const int64_t blocks = finite_blocks(n);
  auto* partials = static_cast<int*>(scratch);
  const bool vec4 = (reinterpret_cast<uintptr_t>(x) & 15u) == 0 && (reinterpret_cast<uintptr_t>(y) & 15u) == 0;
  const auto grid = static_cast<unsigned>(blocks);
  if (y) {
    if (vec4)
      finite_partials_kernel<true, true><<<grid, kThreads, 0, s>>>(x, y, n, inv_scale, partials);
    else
      finite_partials_kernel<false, true><<<grid, kThreads, 0, s>>>(x, y, n, inv_scale, partials);
  } else {
    if (vec4)
      finite_partials_kernel<true, false><<<grid, kThreads, 0, s>>>(x, y, n, inv_scale, partials);
    else
      finite_partials_kernel<false, false><<<grid, kThreads, 0, s>>>(x, y, n, inv_scale, partials);
  }
  ANATOMY_CUDA_CHECK(cudaGetLastError());
  finite_finish_kernel<<<1, kFinishThreads, 0, s>>>(partials, blocks, flag, and_into_flag);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

unsigned adamw_blocks(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65536));
}

}  // namespace

void sum_of_squares(cudaStream_t s, const float* x, int64_t n, double* result, void* scratch) {
  // n == 0 still runs: one block sums nothing and the result is 0.
  n = std::max<int64_t>(n, 0);
  const int64_t blocks = square_blocks(n);
  auto* partials = static_cast<double*>(scratch);
  if ((reinterpret_cast<uintptr_t>(x) & 15u) == 0)
    square_partials_kernel<true><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(x, n, partials);
  else
    square_partials_kernel<false><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(x, n, partials);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
  square_finish_kernel<<<1, kFinishThreads, 0, s>>>(partials, blocks, result);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void adamw_step(cudaStream_t s, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                const AdamWHyper& hp) {
  if (n <= 0) return;
  adamw_kernel<void><<<adamw_blocks(n), kThreads, 0, s>>>(param, grad, exp_avg, exp_avg_sq, n, adamw_constants(hp),
                                                          nullptr);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

// ---- 16-bit variants and loss scaling ----

void adamw_step_chunks(cudaStream_t s, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                       const void* chunk_table, int64_t chunks, const AdamWHyper& hp, Half* copy_type,
                       void* half_copy) {
  if (chunks <= 0) return;
  ANATOMY_CHECK(chunks <= 0x7fffffff, "adamw: {} chunks are too many", chunks);
  const AdamWConstants k = adamw_constants(hp);
  const auto* table = static_cast<const AdamWChunk*>(chunk_table);
  const unsigned grid = static_cast<unsigned>(chunks);
  if (copy_type == nullptr)
    adamw_chunks_kernel<void><<<grid, kThreads, 0, s>>>(param, grad, exp_avg, exp_avg_sq, table, k, nullptr);
  else if (*copy_type == Half::BF16)
    adamw_chunks_kernel<__nv_bfloat16><<<grid, kThreads, 0, s>>>(param, grad, exp_avg, exp_avg_sq, table, k,
                                                                 static_cast<__nv_bfloat16*>(half_copy));
  else
    adamw_chunks_kernel<__half><<<grid, kThreads, 0, s>>>(param, grad, exp_avg, exp_avg_sq, table, k,
                                                          static_cast<__half*>(half_copy));
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void adamw_step_with_copy(cudaStream_t s, Half h, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                          int64_t n, const AdamWHyper& hp, void* half_copy) {
  if (n <= 0) return;
  const AdamWConstants k = adamw_constants(hp);
  if (h == Half::BF16)
    adamw_kernel<__nv_bfloat16><<<adamw_blocks(n), kThreads, 0, s>>>(param, grad, exp_avg, exp_avg_sq, n, k,
                                                                     static_cast<__nv_bfloat16*>(half_copy));
  else
    adamw_kernel<__half><<<adamw_blocks(n), kThreads, 0, s>>>(param, grad, exp_avg, exp_avg_sq, n, k,
                                                              static_cast<__half*>(half_copy));
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void all_finite(cudaStream_t s, const float* x, int64_t n, int* flag, void* scratch, bool and_into_flag) {
  launch_finite(s, x, nullptr, n, 1.0f, flag, scratch, and_into_flag);
}

void unscale_and_check(cudaStream_t s, float* x, int64_t n, float inv_scale, int* flag, void* scratch,
                       bool and_into_flag) {
  launch_finite(s, x, x, n, inv_scale, flag, scratch, and_into_flag);
}

}  // namespace anatomy::cuda
