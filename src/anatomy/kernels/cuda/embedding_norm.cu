// embedding_norm.cu: the embeddings block in one pass each way (fused.cuh).
//
// Forward, one warp per token: the word, position and token-type rows
// (float32 tables) added in that order, as three embedding_forward calls add
// them; the sum written (saved for backward); LayerNorm with the statistics
// and the output in double, as layernorm_forward does them; the dropout mask
// of core/random.h (keep·1/(1-p) in float, as the dropout op); one rounding to
// the output's dtype. Backward, one warp per token: dout widened to float, the
// dropout mask applied (the work tensor, written), LayerNorm's input gradient
// in double as layernorm_backward's (written as d_sum); then dgamma and dbeta
// by layernorm.cu's column sums from work and the sum, the plain path's own
// kernels on the same inputs, so those two are its bits.
//
// A lane holds the elements h = 4·lane + 128·g (g < kGroups) of its row in
// registers, 16 bytes at a time, so each row is read from memory once and all
// its loads are issued before any arithmetic. The row's sums are per-lane
// double sums added by a fixed butterfly: deterministic, though in another
// order than the plain kernels' (one element per lane), so mean, rstd, out and
// d_sum agree with them to rounding, not bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/dropout_keys.cuh"
#include "anatomy/kernels/cuda/fused.cuh"
#include "anatomy/kernels/cuda/half_types.cuh"
#include "anatomy/kernels/cuda/reductions.cuh"

namespace anatomy::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void st4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ float at(const float4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }

// Four consecutive elements of T (16-byte aligned for float, 8-byte for 16-bit).
template <typename T>
struct Quad {
  alignas(4 * sizeof(T)) T e[4];
};
template <typename T>
__device__ __forceinline__ Quad<T> load_quad(const T* p) {
  return *reinterpret_cast<const Quad<T>*>(p);
}
template <typename T>
__device__ __forceinline__ void store_quad(T* p, const float (&v)[4]) {
  Quad<T> q;
#pragma unroll
  for (int j = 0; j < 4; ++j) q.e[j] = from_float<T>(v[j]);
  *reinterpret_cast<Quad<T>*>(p) = q;
}

template <typename T, int kGroups>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    embeddings_ln_forward_kernel(const int64_t* ids, const int64_t* pos_ids, const int64_t* type_ids,
                                 const float* word, const float* pos, const float* type, const float* gamma,
                                 const float* beta, double eps, const DropoutKeys keys, bool dropout,
                                 float keep_scale, float* sum, T* out, float* mean, float* rstd, int64_t rows, int H) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;  // whole warps leave together; no barrier follows
  const int64_t base = r * H;
  const float* w = word + ids[r] * H;
  const float* p = pos + pos_ids[r] * H;
  const float* y = type ? type + type_ids[r] * H : nullptr;  // no token types: adds zeros
  float4 a[kGroups], b[kGroups], c[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int h = 4 * lane + 128 * g;
    if (h >= H) continue;
    a[g] = ld4(w + h);
    b[g] = ld4(p + h);
    c[g] = y ? ld4(y + h) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  float v[kGroups][4];
  double lane_sum = 0.0;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int h = 4 * lane + 128 * g;
    if (h >= H) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[g][j] = (at(a[g], j) + at(b[g], j)) + at(c[g], j);
      lane_sum += v[g][j];
    }
    st4(sum + base + h, make_float4(v[g][0], v[g][1], v[g][2], v[g][3]));
  }
  const double m = warp_sum(lane_sum) / static_cast<double>(H);
  double lane_sq = 0.0;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    if (4 * lane + 128 * g >= H) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const double d = v[g][j] - m;
      lane_sq += d * d;
    }
  }
  const double var = warp_sum(lane_sq) / static_cast<double>(H);
  const double s = 1.0 / sqrt(var + eps);
  if (lane == 0) {
    mean[r] = static_cast<float>(m);
    rstd[r] = static_cast<float>(s);
  }
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int h = 4 * lane + 128 * g;
    if (h >= H) continue;
    const uint32_t keep = dropout ? keep4(keys, static_cast<uint64_t>(base + h) >> 2) : 0xfu;
    float o[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // ((x - m)·s)·γ + β step by step in double, to float (layernorm_forward's
      // arithmetic), then the dropout in float.
      const double t = __dmul_rn(__dmul_rn(__dsub_rn(v[g][j], m), s), gamma[h + j]);
      const float yv = static_cast<float>(__dadd_rn(t, beta[h + j]));
      o[j] = ((keep >> j) & 1u) ? (dropout ? yv * keep_scale : yv) : 0.0f;
    }
    store_quad<T>(out + base + h, o);
  }
}

template <typename T, int kGroups>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    embeddings_ln_backward_kernel(const T* dout, const float* x, const float* mean, const float* rstd,
                                  const float* gamma, const DropoutKeys keys, bool dropout, float keep_scale,
                                  float* work, float* dx, int64_t rows, int H) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const int64_t base = r * H;
  Quad<T> d[kGroups];
  float4 xv[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int h = 4 * lane + 128 * g;
    if (h >= H) continue;
    d[g] = load_quad(dout + base + h);
    xv[g] = ld4(x + base + h);
  }
  const double m = mean[r], s = rstd[r];
  float gv[kGroups][4];
  double sum_dyg = 0.0, sum_dyg_xhat = 0.0;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int h = 4 * lane + 128 * g;
    if (h >= H) continue;
    const uint32_t keep = dropout ? keep4(keys, static_cast<uint64_t>(base + h) >> 2) : 0xfu;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float widened = to_float(d[g].e[j]);
      gv[g][j] = ((keep >> j) & 1u) ? (dropout ? widened * keep_scale : widened) : 0.0f;
      const double xhat = __dmul_rn(__dsub_rn(at(xv[g], j), m), s);
      const double dyg = __dmul_rn(gv[g][j], gamma[h + j]);
      sum_dyg += dyg;
      sum_dyg_xhat += dyg * xhat;
    }
    st4(work + base + h, make_float4(gv[g][0], gv[g][1], gv[g][2], gv[g][3]));
  }
  const double mean_dyg = warp_sum(sum_dyg) / static_cast<double>(H);
  const double mean_dyg_xhat = warp_sum(sum_dyg_xhat) / static_cast<double>(H);
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int h = 4 * lane + 128 * g;
    if (h >= H) continue;
    float o[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const double xhat = __dmul_rn(__dsub_rn(at(xv[g], j), m), s);
      const double dyg = __dmul_rn(gv[g][j], gamma[h + j]);
      // s·(dyg − mean(dyg) − x̂·mean(dyg·x̂)), in layernorm_backward's order.
      const double inner = __dsub_rn(__dsub_rn(dyg, mean_dyg), __dmul_rn(xhat, mean_dyg_xhat));
      o[j] = static_cast<float>(__dmul_rn(s, inner));
    }
    st4(dx + base + h, make_float4(o[0], o[1], o[2], o[3]));
  }
}

// f(std::integral_constant<int, G>) for the smallest G in {2, 4, 8, 16} with
// 128·G >= H (H <= 2048: embeddings_layernorm_fused_supported).
template <typename F>
void with_groups(int64_t H, F&& f) {
  if (H <= 256) return f(std::integral_constant<int, 2>{});
  if (H <= 512) return f(std::integral_constant<int, 4>{});
  if (H <= 1024) return f(std::integral_constant<int, 8>{});
  ANATOMY_CHECK(H <= 2048, "embeddings LayerNorm: hidden size {} over 2048", H);
  return f(std::integral_constant<int, 16>{});
}

unsigned row_blocks(int64_t rows) {
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  ANATOMY_CHECK(blocks <= 0x7fffffff, "embeddings LayerNorm: {} rows are too many", rows);
  return static_cast<unsigned>(blocks);
}

}  // namespace

void embeddings_layernorm_forward_fused(cudaStream_t s, DType out_dtype, const int64_t* ids, const int64_t* pos_ids,
                                        const int64_t* type_ids, const float* word, const float* pos,
                                        const float* type, const float* gamma, const float* beta, double eps,
                                        const DropoutSpec& dropout, float* sum, void* out, float* mean, float* rstd,
                                        int64_t rows, int64_t H) {
  if (rows <= 0) return;
  const bool use_dropout = dropout.p > 0.0f;
  const DropoutKeys keys = make_dropout_keys(dropout);
  with_element_type(out_dtype, "embeddings LayerNorm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_groups(H, [&](auto groups) {
      embeddings_ln_forward_kernel<T, decltype(groups)::value><<<row_blocks(rows), kWarp * kWarpsPerBlock, 0, s>>>(
          ids, pos_ids, type_ids, word, pos, type, gamma, beta, eps, keys, use_dropout, keep_scale_of(dropout), sum,
          static_cast<T*>(out), mean, rstd, rows, static_cast<int>(H));
    });
  });
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void embeddings_layernorm_backward_fused(cudaStream_t s, DType dout_dtype, const void* dout, const float* sum,
                                         const float* mean, const float* rstd, const float* gamma,
                                         const DropoutSpec& dropout, float* work, float* d_sum, float* dgamma,
                                         float* dbeta, int64_t rows, int64_t H, void* scratch) {
  if (rows <= 0) return;
  const bool use_dropout = dropout.p > 0.0f;
  const DropoutKeys keys = make_dropout_keys(dropout);
  with_element_type(dout_dtype, "embeddings LayerNorm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_groups(H, [&](auto groups) {
      embeddings_ln_backward_kernel<T, decltype(groups)::value><<<row_blocks(rows), kWarp * kWarpsPerBlock, 0, s>>>(
          static_cast<const T*>(dout), sum, mean, rstd, gamma, keys, use_dropout, keep_scale_of(dropout), work, d_sum,
          rows, static_cast<int>(H));
    });
  });
  ANATOMY_CUDA_CHECK(cudaGetLastError());
  layernorm_param_gradients(s, work, sum, mean, rstd, dgamma, dbeta, rows, H, scratch);
}

}  // namespace anatomy::cuda
