// fused_layernorm.cu: residual + dropout + LayerNorm in one pass, forward and
// backward, for 16-bit activations (float32 arithmetic, float32 gamma/beta).
//
// Forward: one warp per row; a lane holds the row elements h = 8·lane + 256·g
// (g < kGroups) in registers, loaded 16 bytes at a time, so the row is read
// once: the dropped-out branch plus the residual is rounded to the 16-bit sum
// (saved for backward), and mean and variance (two passes over the registers,
// lane partials in float, the warp's sum in double in a fixed butterfly
// order) are those of the rounded sum, which is what backward sees.
//
// Backward: one pass over dy and the sum. Rows interleaved over the blocks, a
// warp per row from registers: the input gradient, written twice (as is: the
// residual branch's gradient; through the dropout mask: the other branch's),
// and the row's share of dgamma and dbeta in per-lane column sums, which the
// block adds in warp order into one float partial per block ("chunk"); last,
// the chunks' partials are added in a fixed order (in double) into dgamma and
// dbeta. No atomics: bit-reproducible.
//
// Dropout masks are core/random.h's: element r·H + h of the stream, four
// elements per Philox call (8 aligned elements are two calls).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "anatomy/kernels/cuda/chunk_sums.cuh"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/dropout_keys.cuh"
#include "anatomy/kernels/cuda/fused.cuh"
#include "anatomy/kernels/cuda/half_types.cuh"
#include "anatomy/kernels/cuda/reductions.cuh"

namespace anatomy::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
constexpr int kMaxGroups = 8;        // H <= 256 * 8
static_assert(kMaxGroups == kFusedLayerNormMaxGroups, "fused_layernorm_supported (cuda_memory.h) admits this many");

// Pack8 / load_pack (packed 16-byte loads), load8 / store8 (widening and
// rounding 16-byte accesses): half_types.cuh.

// Keep bits of the 8 elements index .. index + 7 (index a multiple of 8): bit j
// for element index + j; two generator calls with the launch's precomputed
// keys (dropout_keys.cuh), the bits of dropout_keep4. Measured on an H100 at
// bert-large's batch 32 (FusedLayerNormTiming), the backward with the bias
// gradient took 0.0665 ms against 0.0718 ms with philox4x32's keys per call;
// the forward, whose loads now come first, the same either way.
__device__ __forceinline__ uint32_t keep_bits8(const DropoutKeys& keys, uint64_t index) {
  return keep4(keys, index >> 2) | keep4(keys, (index >> 2) + 1) << 4;
}

template <typename T, int kGroups>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    residual_ln_forward_kernel(const T* x, const T* residual, const DropoutKeys keys, bool dropout, float keep_scale,
                               const float* gamma, const float* beta, float eps, T* sum_out, T* y, float* mean,
                               float* rstd, int64_t rows, int H) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const int64_t base = r * H;
  float v[kGroups][8];
  float lane_sum = 0.0f;
  // The whole row's loads first, then the generator and the arithmetic: on an
  // H100 at bert-large's batch 32, 0.0556 ms against 0.0628 ms with each
  // group's loads next to its arithmetic.
  Pack8<T> raw_a[kGroups], raw_b[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int h = 8 * lane + 256 * g;
    if (h >= H) continue;
    raw_a[g] = load_pack(x + base + h);
    raw_b[g] = load_pack(residual + base + h);
  }
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int h = 8 * lane + 256 * g;
    if (h >= H) continue;
    float a[8], b[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      a[j] = to_float(raw_a[g].e[j]);
      b[j] = to_float(raw_b[g].e[j]);
    }
    const uint32_t keep = dropout ? keep_bits8(keys, static_cast<uint64_t>(base + h)) : 0xffu;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float branch = dropout ? (((keep >> j) & 1u) ? a[j] * keep_scale : 0.0f) : a[j];
      v[g][j] = to_float(from_float<T>(branch + b[j]));  // the saved, rounded sum
      lane_sum += v[g][j];
    }
    store8(sum_out + base + h, v[g]);
  }
  const double m = warp_sum(static_cast<double>(lane_sum)) / H;
  const float mf = static_cast<float>(m);
  float lane_sq = 0.0f;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    if (8 * lane + 256 * g >= H) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float dv = v[g][j] - mf;
      lane_sq += dv * dv;
    }
  }
  const double var = warp_sum(static_cast<double>(lane_sq)) / H;
  const float s = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
  if (lane == 0) {
    mean[r] = mf;
    rstd[r] = s;
  }
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int h = 8 * lane + 256 * g;
    if (h >= H) continue;
    float o[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = (v[g][j] - mf) * s * gamma[h + j] + beta[h + j];
    store8(y + base + h, o);
  }
}

// Shared memory of the backward: float slots in the order lane-major within
// each half pack, so that a warp's 16-byte accesses (lane l: elements 4k..4k+3
// of its pack in group g) fall on consecutive banks. Column h = 256·g + 8·l +
// 4·k + j sits at slot ((2g + k)·32 + l)·4 + j; a row of slots is 256·kGroups
// long (H rounded up). With the natural layout (a lane's 8 floats at 32-byte
// steps) each access took twice the wavefronts, and with γ read from global
// memory a float at a time the L1 was the kernel's limit (83% busy on an H100,
// DRAM at 44%).
// The backward's dynamic shared memory: γ and `sums` column sums per warp, each
// a row of 256·groups slots.
constexpr size_t backward_shared_bytes(int64_t groups, int sums) {
  return static_cast<size_t>(1 + sums * kWarpsPerBlock) * 256 * static_cast<size_t>(groups) * sizeof(float);
}
__device__ __forceinline__ int slot_of_column(int h) {
  const int g = h / 256, l = (h % 256) / 8, k = (h % 8) / 4, j = h % 4;
  return ((2 * g + k) * kWarp + l) * 4 + j;
}
__device__ __forceinline__ void load_slots8(const float* base, int g, int lane, float (&v)[8]) {
  reinterpret_cast<float4*>(v)[0] = reinterpret_cast<const float4*>(base)[(2 * g) * kWarp + lane];
  reinterpret_cast<float4*>(v)[1] = reinterpret_cast<const float4*>(base)[(2 * g + 1) * kWarp + lane];
}
__device__ __forceinline__ void store_slots8(float* base, int g, int lane, const float (&v)[8]) {
  reinterpret_cast<float4*>(base)[(2 * g) * kWarp + lane] = reinterpret_cast<const float4*>(v)[0];
  reinterpret_cast<float4*>(base)[(2 * g + 1) * kWarp + lane] = reinterpret_cast<const float4*>(v)[1];
}

// The whole backward in one pass over dy and the sum: warp w of block b takes
// the rows 8·b + w + 8·blocks·k (k = 0, 1, ...) in order, kWarpsPerBlock = 8.
// A warp holds a row's dy and sum packed in registers, writes the input
// gradient twice (as is: the residual branch's; through the dropout mask: the
// other branch's) and adds the row's dy·x̂ and dy into per-lane column sums.
// At the end the block adds its warps' column sums in warp order, through
// shared memory, into the block's partials of dgamma and dbeta. Rows are read
// once, so dy may be d_residual (each row is read whole before it is written).
template <typename T, int kGroups, bool kBias>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock, 2)
    residual_ln_backward_kernel(const T* dy, const T* x, const float* mean, const float* rstd, const float* gamma,
                                const DropoutKeys keys, bool dropout, float keep_scale, T* d_residual, T* d_x,
                                float* partial_gamma, float* partial_beta, float* partial_bias, int64_t rows, int H) {
  // γ, then each warp's column sums of dy·x̂, of dy and (kBias) of d_x:
  // [1 + (2 or 3)·kWarpsPerBlock][S] in the slot order above, in shared
  // memory rather than registers, so that two blocks fit on an SM.
  extern __shared__ float4 shared_f4[];
  float* const shared = reinterpret_cast<float*>(shared_f4);
  constexpr int S = 256 * kGroups;  // a row of slots
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  float* const gamma_s = shared;
  float* const sums_g = shared + S * (1 + warp);
  float* const sums_b = shared + S * (1 + kWarpsPerBlock + warp);
  float* const sums_x = shared + S * (1 + 2 * kWarpsPerBlock + warp);
  for (int i = 4 * lane; i < S; i += 4 * kWarp) {
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    *reinterpret_cast<float4*>(sums_g + i) = zero;
    *reinterpret_cast<float4*>(sums_b + i) = zero;
    if (kBias) *reinterpret_cast<float4*>(sums_x + i) = zero;
  }
  for (int h = threadIdx.x; h < S; h += kWarp * kWarpsPerBlock) gamma_s[slot_of_column(h)] = h < H ? gamma[h] : 0.0f;
  __syncthreads();
  // Rows interleaved over the grid: at any time the blocks work on nearby rows.
  // No prefetch into L2: on an H100 the bulk prefetch of each warp's rows two
  // ahead cost 15 us a call at bert-large's batch 32 (0.0826 against 0.0670 ms).
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp; r < rows; r += step) {
    const int64_t base = r * H;
    const float m = mean[r], s = rstd[r];
    Pack8<T> raw_x[kGroups], raw_dy[kGroups];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const int h = 8 * lane + 256 * g;
      if (h >= H) continue;
      raw_x[g] = load_pack(x + base + h);
      raw_dy[g] = load_pack(dy + base + h);
    }
    float lane_dyg = 0.0f, lane_dyg_xh = 0.0f;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const int h = 8 * lane + 256 * g;
      if (h >= H) continue;
      float sg[8], sb[8], ga[8];
      load_slots8(sums_g, g, lane, sg);
      load_slots8(sums_b, g, lane, sb);
      load_slots8(gamma_s, g, lane, ga);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float xh = (to_float(raw_x[g].e[j]) - m) * s;
        const float gy = to_float(raw_dy[g].e[j]);
        const float dyg = gy * ga[j];
        lane_dyg += dyg;
        lane_dyg_xh += dyg * xh;
        sg[j] += gy * xh;
        sb[j] += gy;
      }
      store_slots8(sums_g, g, lane, sg);
      store_slots8(sums_b, g, lane, sb);
    }
    const float mean_dyg = static_cast<float>(warp_sum(static_cast<double>(lane_dyg)) / H);
    const float mean_dyg_xh = static_cast<float>(warp_sum(static_cast<double>(lane_dyg_xh)) / H);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const int h = 8 * lane + 256 * g;
      if (h >= H) continue;
      float o[8], od[8], ga[8];
      load_slots8(gamma_s, g, lane, ga);
      const uint32_t keep = dropout ? keep_bits8(keys, static_cast<uint64_t>(base + h)) : 0xffu;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float xh = (to_float(raw_x[g].e[j]) - m) * s;
        const float dyg = to_float(raw_dy[g].e[j]) * ga[j];
        o[j] = to_float(from_float<T>(s * (dyg - mean_dyg - xh * mean_dyg_xh)));
        od[j] = dropout ? (((keep >> j) & 1u) ? o[j] * keep_scale : 0.0f) : o[j];
      }
      store8(d_residual + base + h, o);
      store8(d_x + base + h, od);
      if (kBias) {
        float sx[8];
        load_slots8(sums_x, g, lane, sx);
#pragma unroll
        for (int j = 0; j < 8; ++j) sx[j] += to_float(from_float<T>(od[j]));  // as stored
        store_slots8(sums_x, g, lane, sx);
      }
    }
  }
  // The chunk's partials: the warps' column sums added in warp order.
  __syncthreads();
  const int64_t at = static_cast<int64_t>(blockIdx.x) * H;
  for (int h = threadIdx.x; h < H; h += kWarp * kWarpsPerBlock) {
    const int slot = slot_of_column(h);
    float total_g = 0.0f, total_b = 0.0f, total_x = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsPerBlock; ++w) {
      total_g += shared[S * (1 + w) + slot];
      total_b += shared[S * (1 + kWarpsPerBlock + w) + slot];
      if (kBias) total_x += shared[S * (1 + 2 * kWarpsPerBlock + w) + slot];
    }
    partial_gamma[at + h] = total_g;
    partial_beta[at + h] = total_b;
    if (kBias) partial_bias[at + h] = total_x;
  }
}

// Column sums of a 16-bit [rows, N] matrix into float partials per chunk of
// rows: a thread per 8 columns (16-byte loads), rows in order. Plane
// blockIdx.z: the matrix dy_plane elements on, its partials a chunks × N
// block further.
constexpr int kColThreads = kColumnSumThreads;
template <typename T>
__global__ void __launch_bounds__(kColThreads)
    column_partials_kernel(const T* dy, int64_t dy_plane, float* partial, int64_t rows, int N, int64_t rows_per_chunk) {
  const int n = 8 * (blockIdx.y * kColThreads + threadIdx.x);
  if (n >= N) return;
  dy += static_cast<int64_t>(blockIdx.z) * dy_plane;
  partial += static_cast<int64_t>(blockIdx.z) * gridDim.x * N;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rows_per_chunk;
  const int64_t r1 = min(rows, r0 + rows_per_chunk);
  float acc[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = 0.0f;
#pragma unroll 4
  for (int64_t r = r0; r < r1; ++r) {
    float v[8];
    load8(dy + r * N + n, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] += v[j];
  }
  float* out = partial + static_cast<int64_t>(blockIdx.x) * N + n;
#pragma unroll
  for (int j = 0; j < 8; ++j) out[j] = acc[j];
}

// Runs f(std::integral_constant<int, G>) for G = ceil(H / 256) in 1..8.
template <typename F>
void with_groups(int64_t H, F&& f) {
  switch ((H + 255) / 256) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default: ANATOMY_CHECK(false, "fused LayerNorm: hidden size {} over 2048", H);
  }
}

// Chunks of 32 rows, or of fewer (down to 8) when that keeps more blocks busy:
// fused_partial_chunks of cuda_memory.h, which sizes the scratch.
int64_t chunk_count(int64_t rows) { return fused_partial_chunks(rows); }

// The current GPU's SM count.
int64_t multiprocessor_count() {
  int device = 0, sms = 0;
  ANATOMY_CUDA_CHECK(cudaGetDevice(&device));
  ANATOMY_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return std::max(sms, 1);
}

}  // namespace

int64_t column_sum_chunks(int64_t rows, int64_t N) {
  const int64_t column_blocks = std::max<int64_t>(1, (N / 8 + kColumnSumThreads - 1) / kColumnSumThreads);
  return std::clamp<int64_t>(kColumnSumBlocksPerSm * multiprocessor_count() / column_blocks, 1,
                             fused_partial_chunks(rows));
}

void residual_layernorm_forward_fused(cudaStream_t s, DType dtype, const void* x, const void* residual,
                                     const DropoutSpec& dropout, const float* gamma, const float* beta, double eps,
                                     void* sum, void* y, float* mean, float* rstd, int64_t rows, int64_t H) {
  if (rows <= 0) return;
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  ANATOMY_CHECK(blocks <= 0x7fffffff, "residual_layernorm_forward: {} rows are too many", rows);
  with_element_type(dtype, "fused LayerNorm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_groups(H, [&](auto groups) {
      residual_ln_forward_kernel<T, decltype(groups)::value>
          <<<static_cast<unsigned>(blocks), kWarp * kWarpsPerBlock, 0, s>>>(
              static_cast<const T*>(x), static_cast<const T*>(residual), make_dropout_keys(dropout), dropout.p > 0.0f,
              keep_scale_of(dropout), gamma,
              beta, static_cast<float>(eps), static_cast<T*>(sum), static_cast<T*>(y), mean, rstd, rows,
              static_cast<int>(H));
    });
  });
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void residual_layernorm_backward_fused(cudaStream_t s, DType dtype, const void* dy, const void* sum, const float* mean,
                                      const float* rstd, const float* gamma, const DropoutSpec& dropout,
                                      void* d_residual, void* d_x, float* dgamma, float* dbeta, float* d_bias,
                                      int64_t rows, int64_t H, void* scratch) {
  if (rows <= 0) return;
  // No more blocks (chunks of partials) than two an SM: one wave where two
  // blocks fit an SM (H up to 1024; larger rows take two), each warp going
  // through several rows. The scratch holds chunk_count(rows) chunks, at least
  // as many. The order of the sums depends on the SM count: the same on the
  // same GPU.
  const int64_t chunks = std::min(chunk_count(rows), 2 * multiprocessor_count());
  float* partial_gamma = static_cast<float*>(scratch);
  float* partial_beta = partial_gamma + chunks * H;
  float* partial_bias = d_bias ? partial_beta + chunks * H : nullptr;
  const size_t shared = backward_shared_bytes((H + 255) / 256, d_bias ? 3 : 2);
  const auto run = [&](auto tag, auto groups, auto bias) {
    using T = typename decltype(tag)::type;
    const auto kernel = residual_ln_backward_kernel<T, decltype(groups)::value, decltype(bias)::value>;
    // Over the default 48 KiB: the kernel's limit raised once, the first time
    // it is needed, to the largest size (200 KiB at H = 2048 with the bias).
    if (shared > 48 * 1024) {
      static const bool raised = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      backward_shared_bytes(kMaxGroups, 3)) == cudaSuccess;
      ANATOMY_CHECK(raised, "residual_layernorm_backward: no {} bytes of shared memory for H = {}", shared, H);
    }
    kernel<<<static_cast<unsigned>(chunks), kWarp * kWarpsPerBlock, shared, s>>>(
        static_cast<const T*>(dy), static_cast<const T*>(sum), mean, rstd, gamma, make_dropout_keys(dropout),
        dropout.p > 0.0f, keep_scale_of(dropout),
        static_cast<T*>(d_residual), static_cast<T*>(d_x), partial_gamma, partial_beta, partial_bias, rows,
        static_cast<int>(H));
  };
  with_element_type(dtype, "fused LayerNorm", [&](auto tag) {
    with_groups(H, [&](auto groups) {
      if (d_bias) run(tag, groups, std::true_type{});
      else run(tag, groups, std::false_type{});
    });
  });
  ANATOMY_CUDA_CHECK(cudaGetLastError());
  // dgamma, dbeta and the bias gradient in one launch: their partials lie one after another.
  FinishPlanes<float> planes;
  planes.partial = partial_gamma;
  planes.partial_plane = chunks * H;
  planes.out[0] = dgamma;
  planes.out[1] = dbeta;
  planes.out[2] = d_bias;
  launch_chunk_sums_finish(s, planes, d_bias ? 3 : 2, chunks, H);
}

void column_partials_finish(cudaStream_t s, const float* partial, float* out, int64_t chunks, int64_t N,
                            int planes, int64_t out_plane) {
  ANATOMY_CHECK(planes == 1 || out_plane != 0, "column sums: {} planes need an output stride", planes);
  FinishPlanes<float> p;
  p.partial = partial;
  p.partial_plane = chunks * N;
  p.out[0] = out;
  p.out_plane = planes > 1 ? out_plane : 0;
  launch_chunk_sums_finish(s, p, planes, chunks, N);
}

void column_sums_accumulate_half_fast(cudaStream_t s, Half half, const void* dy, int64_t rows, int64_t N, float* db,
                                      void* scratch, int planes, int64_t dy_plane, int64_t db_plane) {
  if (rows <= 0 || N <= 0 || planes <= 0) return;
  ANATOMY_CHECK(planes <= 65535, "column sums: {} planes are too many", planes);
  const int64_t chunks = column_sum_chunks(rows, N);
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  float* partial = static_cast<float*>(scratch);
  with_half_type(half, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>((N / 8 + kColThreads - 1) / kColThreads),
                    static_cast<unsigned>(planes));
    column_partials_kernel<T><<<grid, kColThreads, 0, s>>>(static_cast<const T*>(dy), dy_plane, partial, rows,
                                                           static_cast<int>(N), rows_per_chunk);
  });
  ANATOMY_CUDA_CHECK(cudaGetLastError());
  column_partials_finish(s, partial, db, chunks, N, planes, db_plane);
}

}  // namespace anatomy::cuda
