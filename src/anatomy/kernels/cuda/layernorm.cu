// layernorm.cu: the CUDA LayerNorm forward and backward.
//
// One warp normalises one row: the row's statistics are summed in double, as
// the CPU backend does, so the float results agree with it to rounding for
// any H (a float Welford would drift at H = 4096). The warp reductions use a
// butterfly of shuffles, whose order is fixed, so every run gives the same
// bits. The row is read from global memory in each pass; after the first it
// comes from L1.
//
// dgamma and dbeta are sums over all rows: a first kernel sums fixed chunks of
// rows per column into `scratch` (in double), a second adds the chunks in a
// fixed order and adds the totals into dgamma and dbeta. No atomics.
//
// The kernels are templates over the element type T of x, y, dy and dx
// (float, __nv_bfloat16, __half) and the width V of each lane's loads. The
// float32 launchers use <float, 1>, the operations of a float-only kernel.
// The 16-bit launchers widen to float (exactly) as they load, do the same
// double arithmetic, round each result to float as the float32 kernels do and
// then once more to the 16-bit format; with H % 8 == 0 and 16-byte aligned
// rows a lane reads eight adjacent elements with one 16-byte load (V = 8),
// which changes the order of the row sums (fixed all the same), not the math.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "anatomy/kernels/cuda/chunk_sums.cuh"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/fused.cuh"
#include "anatomy/kernels/cuda/half_types.cuh"
#include "anatomy/kernels/cuda/kernels.cuh"
#include "anatomy/kernels/cuda/reductions.cuh"

namespace anatomy::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // warps per block in the per-row kernels

// dgamma/dbeta partial sums: chunks of rows (layernorm_partial_chunks,
// cuda_memory.h, which sizes the scratch); a block of kColTile columns ×
// kRowLanes row lanes.
constexpr int kColTile = 32;
constexpr int kRowLanes = 8;

// Element types: half_types.cuh.

// V consecutive elements at p, widened (V == 8 only for 16-bit T, p 16-byte aligned: one load).
template <typename T, int V>
__device__ __forceinline__ void load_vec(const T* p, float (&v)[V]) {
  if constexpr (V == 1) {
    v[0] = to_float(p[0]);
  } else {
    static_assert(V == 8 && sizeof(T) == 2, "eight 16-bit elements per 16-byte load");
    alignas(16) T e[8];
    *reinterpret_cast<uint4*>(e) = *reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = to_float(e[k]);
  }
}

template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, const float (&v)[V]) {
  if constexpr (V == 1) {
    p[0] = from_float<T>(v[0]);
  } else {
    static_assert(V == 8 && sizeof(T) == 2, "eight 16-bit elements per 16-byte store");
    alignas(16) T e[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) e[k] = from_float<T>(v[k]);
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(e);
  }
}

int64_t chunk_count(int64_t rows) { return layernorm_partial_chunks(rows); }


// A lane takes elements h, h + 1, ..., h + V − 1 for h = V·lane + 32·V·k
// (H % V == 0); with V = 1 that is every 32nd element from its lane.
template <typename T, int V>
__global__ void __launch_bounds__(kWarp* kRowsPerBlock)
    layernorm_forward_kernel(const T* x, const float* gamma, const float* beta, double eps, T* y, float* mean,
                             float* rstd, int64_t rows, int64_t H) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;  // whole warps leave together; no block barrier follows
  const T* in = x + r * H;
  T* out = y + r * H;

  double sum = 0.0;
  for (int64_t h = lane * V; h < H; h += kWarp * V) {
    float v[V];
    load_vec<T, V>(in + h, v);
#pragma unroll
    for (int j = 0; j < V; ++j) sum += v[j];
  }
  const double m = warp_sum(sum) / static_cast<double>(H);
  // Two passes (mean first, then squared deviations), as the CPU does.
  double sq = 0.0;
  for (int64_t h = lane * V; h < H; h += kWarp * V) {
    float v[V];
    load_vec<T, V>(in + h, v);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const double d = v[j] - m;
      sq += d * d;
    }
  }
  const double var = warp_sum(sq) / static_cast<double>(H);
  const double s = 1.0 / sqrt(var + eps);
  if (lane == 0) {
    mean[r] = static_cast<float>(m);
    rstd[r] = static_cast<float>(s);
  }
  // ((x - m)·s)·γ + β rounded step by step like the CPU (no fused multiply-add),
  // to float as the CPU stores it (and then, for 16-bit T, to T).
  for (int64_t h = lane * V; h < H; h += kWarp * V) {
    float v[V], o[V];
    load_vec<T, V>(in + h, v);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const double t = __dmul_rn(__dmul_rn(__dsub_rn(v[j], m), s), gamma[h + j]);
      o[j] = static_cast<float>(__dadd_rn(t, beta[h + j]));
    }
    store_vec<T, V>(out + h, o);
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(kWarp* kRowsPerBlock)
    layernorm_backward_dx_kernel(const T* dy, const T* x, const float* mean, const float* rstd, const float* gamma,
                                 T* dx, int64_t rows, int64_t H) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const T* in = x + r * H;
  const T* g = dy + r * H;
  T* out = dx + r * H;
  const double m = mean[r], s = rstd[r];

  double sum_dyg = 0.0, sum_dyg_xhat = 0.0;
  for (int64_t h = lane * V; h < H; h += kWarp * V) {
    float xv[V], gv[V];
    load_vec<T, V>(in + h, xv);
    load_vec<T, V>(g + h, gv);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const double xhat = __dmul_rn(__dsub_rn(xv[j], m), s);
      const double dyg = __dmul_rn(gv[j], gamma[h + j]);
      sum_dyg += dyg;
      sum_dyg_xhat += dyg * xhat;
    }
  }
  const double mean_dyg = warp_sum(sum_dyg) / static_cast<double>(H);
  const double mean_dyg_xhat = warp_sum(sum_dyg_xhat) / static_cast<double>(H);
  for (int64_t h = lane * V; h < H; h += kWarp * V) {
    float xv[V], gv[V], o[V];
    load_vec<T, V>(in + h, xv);
    load_vec<T, V>(g + h, gv);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const double xhat = __dmul_rn(__dsub_rn(xv[j], m), s);
      const double dyg = __dmul_rn(gv[j], gamma[h + j]);
      // s·(dyg − mean(dyg) − x̂·mean(dyg·x̂)), evaluated in the CPU's order.
      const double inner = __dsub_rn(__dsub_rn(dyg, mean_dyg), __dmul_rn(xhat, mean_dyg_xhat));
      o[j] = static_cast<float>(__dmul_rn(s, inner));
    }
    store_vec<T, V>(out + h, o);
  }
}

// Block (column tile, chunk): column sums of dy·x̂ and dy over the chunk's rows.
template <typename T>
__global__ void __launch_bounds__(kColTile* kRowLanes)
    layernorm_param_partials_kernel(const T* dy, const T* x, const float* mean, const float* rstd,
                                    double* partial_gamma, double* partial_beta, int64_t rows, int64_t H,
                                    int64_t rows_per_chunk) {
  __shared__ double sg[kRowLanes][kColTile];
  __shared__ double sb[kRowLanes][kColTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t h = static_cast<int64_t>(blockIdx.x) * kColTile + tx;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  double acc_g = 0.0, acc_b = 0.0;
  if (h < H) {
    for (int64_t r = r0 + ty; r < r1; r += kRowLanes) {
      const double m = mean[r], s = rstd[r];
      const double xhat = __dmul_rn(__dsub_rn(to_float(x[r * H + h]), m), s);
      const float g = to_float(dy[r * H + h]);
      acc_g += __dmul_rn(g, xhat);
      acc_b += g;
    }
  }
  sg[ty][tx] = acc_g;
  sb[ty][tx] = acc_b;
  lane_tree_sum(tx, ty, sg, sb);
  if (ty == 0 && h < H) {
    partial_gamma[chunk * H + h] = sg[0][tx];
    partial_beta[chunk * H + h] = sb[0][tx];
  }
}

unsigned row_blocks(int64_t rows) {
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  ANATOMY_CHECK(blocks <= 0x7fffffff, "layernorm: {} rows are too many", rows);
  return static_cast<unsigned>(blocks);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename T, int V>
void layernorm_forward_impl(cudaStream_t s, const T* x, const float* gamma, const float* beta, double eps, T* y,
                            float* mean, float* rstd, int64_t rows, int64_t H) {
  layernorm_forward_kernel<T, V><<<row_blocks(rows), kWarp * kRowsPerBlock, 0, s>>>(x, gamma, beta, eps, y, mean,
                                                                                    rstd, rows, H);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

// dgamma and dbeta: the chunks' column partials, then their sums.
template <typename T>
void layernorm_param_gradients_impl(cudaStream_t s, const T* dy, const T* x, const float* mean, const float* rstd,
                                    float* dgamma, float* dbeta, int64_t rows, int64_t H, void* scratch) {
  const int64_t chunks = chunk_count(rows);
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  auto* partial_gamma = static_cast<double*>(scratch);
  double* partial_beta = partial_gamma + chunks * H;
  const dim3 grid(static_cast<unsigned>((H + kColTile - 1) / kColTile), static_cast<unsigned>(chunks));
  layernorm_param_partials_kernel<T><<<grid, dim3(kColTile, kRowLanes), 0, s>>>(dy, x, mean, rstd, partial_gamma,
                                                                                partial_beta, rows, H,
                                                                                rows_per_chunk);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
  // dgamma and dbeta in one launch: their partials lie one after another.
  FinishPlanes<double> planes;
  planes.partial = partial_gamma;
  planes.partial_plane = chunks * H;
  planes.out[0] = dgamma;
  planes.out[1] = dbeta;
  launch_chunk_sums_finish(s, planes, 2, chunks, H);
}

template <typename T, int V>
void layernorm_backward_impl(cudaStream_t s, const T* dy, const T* x, const float* mean, const float* rstd,
                             const float* gamma, T* dx, float* dgamma, float* dbeta, int64_t rows, int64_t H,
                             void* scratch) {
  layernorm_backward_dx_kernel<T, V><<<row_blocks(rows), kWarp * kRowsPerBlock, 0, s>>>(dy, x, mean, rstd, gamma,
                                                                                        dx, rows, H);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
  layernorm_param_gradients_impl(s, dy, x, mean, rstd, dgamma, dbeta, rows, H, scratch);
}

}  // namespace

void layernorm_param_gradients(cudaStream_t s, const float* dy, const float* x, const float* mean, const float* rstd,
                               float* dgamma, float* dbeta, int64_t rows, int64_t H, void* scratch) {
  if (rows <= 0 || H <= 0) return;
  layernorm_param_gradients_impl(s, dy, x, mean, rstd, dgamma, dbeta, rows, H, scratch);
}

void layernorm_forward(cudaStream_t s, const float* x, const float* gamma, const float* beta, double eps, float* y,
                       float* mean, float* rstd, int64_t rows, int64_t H) {
  if (rows <= 0 || H <= 0) return;
  layernorm_forward_impl<float, 1>(s, x, gamma, beta, eps, y, mean, rstd, rows, H);
}

void layernorm_backward(cudaStream_t s, const float* dy, const float* x, const float* mean, const float* rstd,
                        const float* gamma, float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t H,
                        void* scratch) {
  if (rows <= 0 || H <= 0) return;
  layernorm_backward_impl<float, 1>(s, dy, x, mean, rstd, gamma, dx, dgamma, dbeta, rows, H, scratch);
}

// ---- 16-bit variants ----

void layernorm_forward_half(cudaStream_t s, Half h, const void* x, const float* gamma, const float* beta, double eps,
                            void* y, float* mean, float* rstd, int64_t rows, int64_t H) {
  if (rows <= 0 || H <= 0) return;
  // Rows start 16-byte aligned when the base is and H % 8 == 0.
  const bool vec8 = H % 8 == 0 && aligned16(x) && aligned16(y);
  with_half_type(h, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(y);
    if (vec8)
      layernorm_forward_impl<T, 8>(s, in, gamma, beta, eps, out, mean, rstd, rows, H);
    else
      layernorm_forward_impl<T, 1>(s, in, gamma, beta, eps, out, mean, rstd, rows, H);
  });
}

void layernorm_backward_half(cudaStream_t s, Half h, const void* dy, const void* x, const float* mean,
                             const float* rstd, const float* gamma, void* dx, float* dgamma, float* dbeta,
                             int64_t rows, int64_t H, void* scratch) {
  if (rows <= 0 || H <= 0) return;
  const bool vec8 = H % 8 == 0 && aligned16(dy) && aligned16(x) && aligned16(dx);
  with_half_type(h, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = static_cast<const T*>(dy);
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(dx);
    if (vec8)
      layernorm_backward_impl<T, 8>(s, g, in, mean, rstd, gamma, out, dgamma, dbeta, rows, H, scratch);
    else
      layernorm_backward_impl<T, 1>(s, g, in, mean, rstd, gamma, out, dgamma, dbeta, rows, H, scratch);
  });
}

}  // namespace anatomy::cuda
