// fused_activation.cu: an activation's backward that also recomputes its
// forward, for 16-bit data: one pass reads x and dy and writes y = f(x) and
// dx = f'(x)·dy, each rounded once from float, with the element functions of
// activation_math.cuh (so y is bit for bit what activation_forward gives, and
// dx what activation_backward gives). Eight elements per thread through
// 16-byte accesses when every pointer is 16-byte aligned.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "anatomy/kernels/cuda/activation_math.cuh"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/fused.cuh"
#include "anatomy/kernels/cuda/half_types.cuh"

namespace anatomy::cuda {

namespace {

constexpr int kThreads = 256;

template <int kVec, typename T, typename Fwd, typename Bwd>
__global__ void __launch_bounds__(kThreads)
    recompute_backward_kernel(const T* x, const T* dy, T* dx, T* y, int64_t n, Fwd fwd, Bwd bwd) {
  const int64_t groups = (n + kVec - 1) / kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const int64_t i = g * kVec;
    if (kVec == 8 && i + 8 <= n) {
      alignas(16) T ex[8], eg[8], ox[8], oy[8];
      *reinterpret_cast<uint4*>(ex) = *reinterpret_cast<const uint4*>(x + i);
      *reinterpret_cast<uint4*>(eg) = *reinterpret_cast<const uint4*>(dy + i);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float v = to_float(ex[k]);
        oy[k] = from_float<T>(fwd(v, i + k));
        ox[k] = from_float<T>(bwd(v, to_float(eg[k])));
      }
      *reinterpret_cast<uint4*>(y + i) = *reinterpret_cast<const uint4*>(oy);
      *reinterpret_cast<uint4*>(dx + i) = *reinterpret_cast<const uint4*>(ox);
    } else {
      for (int64_t j = i; j < n && j < i + kVec; ++j) {
        const float v = to_float(x[j]);
        const float gj = to_float(dy[j]);
        y[j] = from_float<T>(fwd(v, j));
        dx[j] = from_float<T>(bwd(v, gj));
      }
    }
  }
}

// y = f(x) alone, element by element: data not 16-byte aligned, and the
// last n % 8 elements after forward_packs_kernel.
template <typename T, typename Fwd>
__global__ void __launch_bounds__(kThreads) forward_kernel(const T* x, T* y, int64_t n, Fwd fwd) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = from_float<T>(fwd(to_float(x[i]), i));
}

// y = f(x) over `packs` whole packs of 8 elements, kForwardUnroll packs a
// thread with every load issued before the first use, so that each thread has
// several 16-byte loads in flight (one at a time left the forward at about 57%
// of the copy bandwidth on an H100; the backward, with two loads, at 92%).
constexpr int kForwardUnroll = 4;
template <typename T, typename Fwd>
__global__ void __launch_bounds__(kThreads) forward_packs_kernel(const T* x, T* y, int64_t packs, Fwd fwd) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kForwardUnroll * kThreads + threadIdx.x;
  uint4 in[kForwardUnroll];
#pragma unroll
  for (int u = 0; u < kForwardUnroll; ++u) {
    const int64_t p = first + static_cast<int64_t>(u) * kThreads;
    if (p < packs) in[u] = reinterpret_cast<const uint4*>(x)[p];
  }
#pragma unroll
  for (int u = 0; u < kForwardUnroll; ++u) {
    const int64_t p = first + static_cast<int64_t>(u) * kThreads;
    if (p >= packs) break;
    const T* ex = reinterpret_cast<const T*>(&in[u]);
    alignas(16) T oy[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) oy[k] = from_float<T>(fwd(to_float(ex[k]), p * 8 + k));
    reinterpret_cast<uint4*>(y)[p] = *reinterpret_cast<const uint4*>(oy);
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// f with its element index shifted, for a tail launched at an offset.
template <typename Fwd>
struct Shifted {
  Fwd f;
  int64_t offset;
  __device__ float operator()(float v, int64_t i) const { return f(v, i + offset); }
};

template <typename T, typename Fwd>
void launch_forward(cudaStream_t s, const T* x, T* y, int64_t n, Fwd fwd) {
  const bool vec = aligned16(x) && aligned16(y);
  if (vec) {
    // The whole packs, then the last n % 8 elements one by one (same values: f is element-wise).
    const int64_t packs = n / 8;
    if (packs > 0) {
      const int64_t per_block = static_cast<int64_t>(kForwardUnroll) * kThreads;
      forward_packs_kernel<<<static_cast<unsigned>((packs + per_block - 1) / per_block), kThreads, 0, s>>>(x, y, packs,
                                                                                                         fwd);
      ANATOMY_CUDA_CHECK(cudaGetLastError());
    }
    const int64_t done = packs * 8;
    if (done == n) return;
    forward_kernel<<<1, kThreads, 0, s>>>(x + done, y + done, n - done, Shifted<Fwd>{fwd, done});
    ANATOMY_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const unsigned blocks = static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65536));
  forward_kernel<<<blocks, kThreads, 0, s>>>(x, y, n, fwd);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

template <typename T, typename Fwd, typename Bwd>
void launch(cudaStream_t s, const T* x, const T* dy, T* dx, T* y, int64_t n, Fwd fwd, Bwd bwd) {
  const bool vec = aligned16(x) && aligned16(dy) && aligned16(dx) && aligned16(y);
  const int64_t work = vec ? (n + 7) / 8 : n;
  const unsigned blocks = static_cast<unsigned>(std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, 65536));
  if (vec)
    recompute_backward_kernel<8><<<blocks, kThreads, 0, s>>>(x, dy, dx, y, n, fwd, bwd);
  else
    recompute_backward_kernel<1><<<blocks, kThreads, 0, s>>>(x, dy, dx, y, n, fwd, bwd);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

// With the bias gradient, over rows × N (N % 8 == 0, 16-byte aligned): block
// (chunk of rows, kBiasThreads × 8 columns); a thread walks its 8 columns down
// the chunk's rows in order, adding dx as stored, and leaves one float partial
// per chunk and column for column_partials_finish.
constexpr int kBiasThreads = kColumnSumThreads;
// Rows a thread loads before it computes (several 16-byte loads in flight).
// Two rows and at most 73 registers (7 blocks an SM) rather than four rows in
// 128 registers (4 blocks): ncu on an H100 found the four-row kernel with the
// SM 65% busy, DRAM at 57% and only 16 warps an SM to hide either.
constexpr int kBiasUnroll = 2;
template <typename T, typename Fwd, typename Bwd>
__global__ void __launch_bounds__(kBiasThreads, kColumnSumBlocksPerSm)
    recompute_backward_bias_kernel(const T* x, const T* dy, T* dx, T* y, int64_t rows, int N, int64_t rows_per_chunk,
                                   float* partial, Fwd fwd, Bwd bwd) {
  const int n = 8 * (blockIdx.y * kBiasThreads + threadIdx.x);
  if (n >= N) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rows_per_chunk;
  const int64_t r1 = min(rows, r0 + rows_per_chunk);
  float acc[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) acc[k] = 0.0f;
  for (int64_t r = r0; r < r1; r += kBiasUnroll) {
    // Kept as loaded (16-bit: half the registers of floats) and widened at use.
    Pack8<T> in_x[kBiasUnroll], in_g[kBiasUnroll];
#pragma unroll
    for (int u = 0; u < kBiasUnroll; ++u) {
      if (r + u >= r1) break;
      const int64_t i = (r + u) * N + n;
      in_x[u] = load_pack(x + i);
      in_g[u] = load_pack(dy + i);
    }
#pragma unroll
    for (int u = 0; u < kBiasUnroll; ++u) {
      if (r + u >= r1) break;
      const int64_t i = (r + u) * N + n;
      float ox[8], oy[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float v = to_float(in_x[u].e[k]);
        oy[k] = fwd(v, i + k);
        ox[k] = to_float(from_float<T>(bwd(v, to_float(in_g[u].e[k]))));  // as stored
        acc[k] += ox[k];
      }
      store8(y + i, oy);
      store8(dx + i, ox);
    }
  }
  float* out = partial + static_cast<int64_t>(blockIdx.x) * N + n;
#pragma unroll
  for (int k = 0; k < 8; ++k) out[k] = acc[k];
}

template <typename T, typename Fwd, typename Bwd>
void launch_bias(cudaStream_t s, const T* x, const T* dy, T* dx, T* y, int64_t rows, int64_t N, int64_t chunks,
                 float* partial, Fwd fwd, Bwd bwd) {
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>((N / 8 + kBiasThreads - 1) / kBiasThreads));
  recompute_backward_bias_kernel<<<grid, kBiasThreads, 0, s>>>(x, dy, dx, y, rows, static_cast<int>(N),
                                                               rows_per_chunk, partial, fwd, bwd);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

// Runs f(forward, backward) with the element functions of `kind` for
// activations of type T (not tanh, which saves its output rather than its
// input). 16-bit GELU takes the 16-bit functions, as the element-wise kernels do.
template <typename T, typename F>
void with_activation(ActivationKind kind, F&& f) {
  switch (kind) {
    case ActivationKind::GeluErf:
      if constexpr (sizeof(T) == 2) return f(GeluErfForward16{}, GeluErfBackward16{});
      else return f(GeluErfForward{}, GeluErfBackward{});
    case ActivationKind::GeluTanh: return f(GeluTanhForward{}, GeluTanhBackward{});
    case ActivationKind::Relu: return f(ReluForward{}, ReluBackward{});
    case ActivationKind::Tanh: ANATOMY_CHECK(false, "activation_backward_recompute: not for tanh");
  }
}

}  // namespace

void activation_backward_recompute_bias(cudaStream_t s, DType dtype, ActivationKind kind, const void* x,
                                        const void* dy, void* dx, void* y, int64_t rows, int64_t N, float* d_bias,
                                        void* scratch) {
  if (rows <= 0 || N <= 0) return;
  ANATOMY_CHECK(recompute_bias_supported(N, {x, dy, dx, y}),
                "activation_backward_recompute: the bias gradient's fused pass wants rows of a multiple of 8 "
                "elements at 16-byte aligned addresses (N = {})", N);
  float* partial = static_cast<float*>(scratch);
  const int64_t chunks = column_sum_chunks(rows, N);  // the partials' count, for both kernels
  with_element_type(dtype, "activation_backward_recompute", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_activation<T>(kind, [&](auto fwd, auto bwd) {
      launch_bias(s, static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dx), static_cast<T*>(y),
                  rows, N, chunks, partial, fwd, bwd);
    });
  });
  column_partials_finish(s, partial, d_bias, chunks, N);
}

void activation_backward_recompute_half(cudaStream_t s, Half h, ActivationKind kind, const void* x, const void* dy,
                                        void* dx, void* y, int64_t n) {
  if (n <= 0) return;
  with_half_type(h, [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_activation<T>(kind, [&](auto fwd, auto bwd) {
      launch(s, static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dx), static_cast<T*>(y), n, fwd,
             bwd);
    });
  });
}

void gelu_forward_half(cudaStream_t s, Half h, ActivationKind kind, const void* x, void* y, int64_t n) {
  if (n <= 0) return;
  with_half_type(h, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(y);
    if (kind == ActivationKind::GeluErf) launch_forward(s, in, out, n, GeluErfForward16{});
    else if (kind == ActivationKind::GeluTanh) launch_forward(s, in, out, n, GeluTanhForward{});
    else ANATOMY_CHECK(false, "gelu_forward_half: not a GELU");
  });
}

}  // namespace anatomy::cuda
