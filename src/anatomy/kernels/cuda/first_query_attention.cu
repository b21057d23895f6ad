// first_query_attention.cu: attention of query row 0 over all keys, forward
// and backward (Backend::attention_first_query_forward / _backward), for the
// last encoder layer, whose first token alone reaches the loss.
//
// One block of kThreads threads per (batch entry, head). The work is
// B·heads·L·d multiply-adds each way, a few MFLOP at bert-large's shapes:
// the kernels read k and v once and are bound by that, so they are written
// for clarity rather than for the tensor cores.
//   forward:  scores s_j = scale·q·k_j (0 for a masked key, every key when all
//             are masked: uniform attention), p = softmax(s) written as float32
//             [B, heads, L], then ctx = Σ_j p_j·keep_j/(1-p)·v_j;
//   backward: w_j = p_j·keep_j/(1-p), dv_j = w_j·dctx, dp_j = keep_j/(1-p)·dctx·v_j,
//             ds_j = p_j·(dp_j − Σ_i p_i·dp_i)·scale, dq = Σ_j ds_j·k_j, dk_j = ds_j·q.
// The mask is the reference's for element (b·heads + h)·L·L + j of the stream:
// row 0 of attention_forward's mask (keep_element of dropout_keys.cuh).
// Sums over keys are taken in a fixed order (a strided partial per thread,
// then a tree over the block), so results are deterministic.
#include "anatomy/kernels/cuda/first_query_attention.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "anatomy/core/error.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/dropout_keys.cuh"
#include "anatomy/kernels/cuda/half_types.cuh"
#include "anatomy/kernels/cuda_memory.h"

namespace anatomy::cuda {

namespace {

constexpr int kThreads = static_cast<int>(kFirstQueryThreads);
constexpr int kMaxD = static_cast<int>(kFirstQueryMaxHeadSize);  // q and dctx held in shared memory

struct FirstQueryParams {
  int L, heads, D;
  int64_t H;
  float scale;
  float keep_scale;  // 1/(1-p), or 1
  bool drop;
  DropoutKeys keys;
};

// Sum (or max) of one value per thread over the block; every thread gets it.
template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) r = kMax ? fmaxf(r, scratch[w]) : r + scratch[w];
  return r;
}

// out[d] = Σ_j w[j]·rows[j·stride + d] for d < D (w in shared memory, for
// all L rows; the block's threads all call it). When D divides kThreads,
// thread t sums the rows j ≡ t / D (mod kThreads / D) for d = t % D and the
// partials meet in `scratch` (kThreads floats), added in a fixed order;
// otherwise each d is one thread's loop over all rows.
template <typename T>
__device__ void weighted_row_sum(const float* w, const T* rows, int L, int D, int64_t stride, float* scratch,
                                 T* out) {
  const int tid = threadIdx.x;
  if (D <= kThreads && kThreads % D == 0) {
    const int groups = kThreads / D, d = tid % D, g = tid / D;
    float acc = 0.0f;
    for (int j = g; j < L; j += groups) acc = fmaf(w[j], to_float(rows[j * stride + d]), acc);
    __syncthreads();  // scratch may still be read by a previous reduction
    scratch[tid] = acc;
    __syncthreads();
    if (g == 0) {
      float total = 0.0f;
      for (int i = 0; i < groups; ++i) total += scratch[i * D + d];
      out[d] = from_float<T>(total);
    }
  } else {
    for (int d = tid; d < D; d += kThreads) {
      float acc = 0.0f;
      for (int j = 0; j < L; ++j) acc = fmaf(w[j], to_float(rows[j * stride + d]), acc);
      out[d] = from_float<T>(acc);
    }
  }
}

__device__ __forceinline__ bool kept(const FirstQueryParams& p, int bh, int j) {
  if (!p.drop) return true;
  const uint64_t index = static_cast<uint64_t>(bh) * static_cast<uint64_t>(p.L) * static_cast<uint64_t>(p.L) +
                         static_cast<uint64_t>(j);
  return keep_element(p.keys, index);
}

// Shared memory: q (D floats), the L scores / probabilities, the reduction scratch.
template <typename T>
__global__ void __launch_bounds__(kThreads) first_query_forward_kernel(const FirstQueryParams p, const T* q0,
                                                                        const T* k, const T* v, const int64_t* mask,
                                                                        float* probs, T* ctx0) {
  extern __shared__ float smem[];
  float* sq = smem;
  float* sp = smem + kMaxD;
  float* scratch = sp + p.L;
  const int bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads, tid = threadIdx.x;
  const int L = p.L, D = p.D;
  const int64_t col = static_cast<int64_t>(h) * D;
  for (int d = tid; d < D; d += kThreads) sq[d] = to_float(q0[b * p.H + col + d]);
  bool any = mask == nullptr;
  if (mask != nullptr)
    for (int j = tid; j < L; j += kThreads) any = any || mask[static_cast<int64_t>(b) * L + j] != 0;
  const bool some_key = __syncthreads_or(any) != 0;
  float mx = -INFINITY;
  for (int j = tid; j < L; j += kThreads) {
    const T* kj = k + (static_cast<int64_t>(b) * L + j) * p.H + col;
    float s = 0.0f;
    for (int d = 0; d < D; ++d) s = fmaf(sq[d], to_float(kj[d]), s);
    s *= p.scale;
    // A masked key scores -inf; with every key masked, all score 0 (uniform).
    if (!some_key) s = 0.0f;
    else if (mask != nullptr && mask[static_cast<int64_t>(b) * L + j] == 0) s = -INFINITY;
    sp[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = block_reduce<true>(mx, scratch);
  float sum = 0.0f;
  for (int j = tid; j < L; j += kThreads) {
    const float e = sp[j] == -INFINITY ? 0.0f : expf(sp[j] - mx);
    sp[j] = e;
    sum += e;
  }
  sum = block_reduce<false>(sum, scratch);
  const float inv = 1.0f / sum;
  float* prow = probs + static_cast<int64_t>(bh) * L;
  for (int j = tid; j < L; j += kThreads) {
    const float pr = sp[j] * inv;
    prow[j] = pr;
    sp[j] = kept(p, bh, j) ? pr * p.keep_scale : 0.0f;  // the weights of the values
  }
  __syncthreads();
  weighted_row_sum(sp, v + static_cast<int64_t>(b) * L * p.H + col, L, D, p.H, scratch, ctx0 + b * p.H + col);
}

// Shared memory: q and dctx (D floats each), w and ds (L floats each), the scratch.
template <typename T>
__global__ void __launch_bounds__(kThreads) first_query_backward_kernel(const FirstQueryParams p, const T* dctx0,
                                                                         const T* q0, const T* k, const T* v,
                                                                         const float* probs, T* dq0, T* dk, T* dv) {
  extern __shared__ float smem[];
  float* sq = smem;
  float* sg = smem + kMaxD;
  float* sw = sg + kMaxD;
  float* sds = sw + p.L;
  float* scratch = sds + p.L;
  const int bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads, tid = threadIdx.x;
  const int L = p.L, D = p.D;
  const int64_t col = static_cast<int64_t>(h) * D;
  for (int d = tid; d < D; d += kThreads) {
    sq[d] = to_float(q0[b * p.H + col + d]);
    sg[d] = to_float(dctx0[b * p.H + col + d]);
  }
  __syncthreads();
  const float* prow = probs + static_cast<int64_t>(bh) * L;
  float dot = 0.0f;
  for (int j = tid; j < L; j += kThreads) {
    const bool keep = kept(p, bh, j);
    const float pr = prow[j];
    const T* vj = v + (static_cast<int64_t>(b) * L + j) * p.H + col;
    float dp = 0.0f;
    for (int d = 0; d < D; ++d) dp = fmaf(sg[d], to_float(vj[d]), dp);
    dp = keep ? dp * p.keep_scale : 0.0f;
    sw[j] = keep ? pr * p.keep_scale : 0.0f;
    sds[j] = dp;
    dot = fmaf(pr, dp, dot);
  }
  dot = block_reduce<false>(dot, scratch);
  for (int j = tid; j < L; j += kThreads) sds[j] = prow[j] * (sds[j] - dot) * p.scale;
  __syncthreads();
  // dk_j = ds_j·q and dv_j = w_j·dctx over (key, d), consecutive threads on consecutive d.
  const int64_t n = static_cast<int64_t>(L) * D;
  for (int64_t i = tid; i < n; i += kThreads) {
    const int j = static_cast<int>(i / D), d = static_cast<int>(i % D);
    const int64_t at = (static_cast<int64_t>(b) * L + j) * p.H + col + d;
    dk[at] = from_float<T>(sds[j] * sq[d]);
    dv[at] = from_float<T>(sw[j] * sg[d]);
  }
  // dq = Σ_j ds_j·k_j, as the forward's context sum.
  weighted_row_sum(sds, k + static_cast<int64_t>(b) * L * p.H + col, L, D, p.H, scratch, dq0 + b * p.H + col);
}

FirstQueryParams params_of(const FirstQueryShape& s, const DropoutSpec& dropout) {
  ANATOMY_CHECK(s.heads > 0 && s.H % s.heads == 0 && s.H / s.heads <= kMaxD,
                "first-query attention: {} columns in {} heads (head size at most {})", s.H, s.heads, kMaxD);
  FirstQueryParams p{};
  p.L = static_cast<int>(s.L);
  p.heads = static_cast<int>(s.heads);
  p.D = static_cast<int>(s.H / s.heads);
  p.H = s.H;
  p.scale = static_cast<float>(s.scale);
  p.keep_scale = keep_scale_of(dropout);
  p.drop = dropout.p > 0.0f;
  p.keys = make_dropout_keys(dropout);
  return p;
}

// Dynamic shared memory of the two kernels, in bytes (the scratch is kThreads floats).
size_t forward_smem(int64_t L) { return (kMaxD + L + kThreads) * sizeof(float); }
size_t backward_smem(int64_t L) { return (2 * kMaxD + 2 * L + kThreads) * sizeof(float); }

template <typename K>
void allow_smem(K kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    ANATOMY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)));
}

}  // namespace

void first_query_attention_forward(cudaStream_t stream, DType dtype, const FirstQueryShape& s, const void* q0,
                                   const void* k, const void* v, const int64_t* mask, const DropoutSpec& dropout,
                                   float* probs, void* ctx0) {
  if (s.B * s.heads == 0 || s.L == 0) return;
  const FirstQueryParams p = params_of(s, dropout);
  const size_t smem = forward_smem(s.L);
  with_element_type(dtype, "first-query attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    allow_smem(first_query_forward_kernel<T>, smem);
    first_query_forward_kernel<T><<<static_cast<unsigned>(s.B * s.heads), kThreads, smem, stream>>>(
        p, static_cast<const T*>(q0), static_cast<const T*>(k), static_cast<const T*>(v), mask, probs,
        static_cast<T*>(ctx0));
  });
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void first_query_attention_backward(cudaStream_t stream, DType dtype, const FirstQueryShape& s, const void* dctx0,
                                    const void* q0, const void* k, const void* v, const float* probs,
                                    const DropoutSpec& dropout, void* dq0, void* dk, void* dv) {
  if (s.B * s.heads == 0 || s.L == 0) return;
  const FirstQueryParams p = params_of(s, dropout);
  const size_t smem = backward_smem(s.L);
  with_element_type(dtype, "first-query attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    allow_smem(first_query_backward_kernel<T>, smem);
    first_query_backward_kernel<T><<<static_cast<unsigned>(s.B * s.heads), kThreads, smem, stream>>>(
        p, static_cast<const T*>(dctx0), static_cast<const T*>(q0), static_cast<const T*>(k),
        static_cast<const T*>(v), probs, static_cast<T*>(dq0), static_cast<T*>(dk), static_cast<T*>(dv));
  });
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace anatomy::cuda
