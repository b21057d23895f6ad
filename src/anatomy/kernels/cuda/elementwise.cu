// elementwise.cu: the CUDA element-wise kernels of kernels.cuh: add, scale,
// the activations and their derivatives, dropout, selecting one sequence row,
// and the column sums that make a linear layer's bias gradient. Each matches
// the CPU backend (kernels/cpu/cpu_backend.cpp) element for element; where the
// CPU computes in double and the GPU in float, the formulas are chosen to keep
// the relative error near float's rounding (no cancellation in the tails).
// The 16-bit variants (bf16, fp16) run the very same element functions on
// inputs widened to float and round each result once, so their outputs are
// the float32 kernels' results rounded to nearest even; except the erf GELU,
// whose 16-bit functions take a cheaper erfc (activation_math.cuh) and round
// as the exact GELU does instead (but for rare fp16 near-ties).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "anatomy/core/random.h"
#include "anatomy/kernels/cuda/activation_math.cuh"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/dropout_keys.cuh"
#include "anatomy/kernels/cuda/half_types.cuh"
#include "anatomy/kernels/cuda/kernels.cuh"

namespace anatomy::cuda {

namespace {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over `work` items: enough to fill the GPU many
// times over; the loop covers whatever is beyond.
unsigned blocks_for(int64_t work, int threads = kThreads) {
  return static_cast<unsigned>(std::clamp<int64_t>((work + threads - 1) / threads, 1, 65536));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Element types: half_types.cuh.

// load8 / store8: half_types.cuh.

// ---- generic maps: y[i] = f(x[i], i) and y[i] = f(a[i], b[i]) ----
// With kVec == 4 each thread handles four consecutive elements through one
// float4 load and store (the launcher checks 16-byte alignment); the last,
// partial group falls back to scalar accesses.

template <int kVec, typename F>
__global__ void map1_kernel(const float* x, float* y, int64_t n, F f) {
  const int64_t groups = (n + kVec - 1) / kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const int64_t i = g * kVec;
    if (kVec == 4 && i + 4 <= n) {
      float4 v = *reinterpret_cast<const float4*>(x + i);
      v.x = f(v.x, i);
      v.y = f(v.y, i + 1);
      v.z = f(v.z, i + 2);
      v.w = f(v.w, i + 3);
      *reinterpret_cast<float4*>(y + i) = v;
    } else {
      for (int64_t j = i; j < n && j < i + kVec; ++j) y[j] = f(x[j], j);
    }
  }
}

template <int kVec, typename F>
__global__ void map2_kernel(const float* a, const float* b, float* y, int64_t n, F f) {
  const int64_t groups = (n + kVec - 1) / kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const int64_t i = g * kVec;
    if (kVec == 4 && i + 4 <= n) {
      const float4 u = *reinterpret_cast<const float4*>(a + i);
      const float4 v = *reinterpret_cast<const float4*>(b + i);
      *reinterpret_cast<float4*>(y + i) = make_float4(f(u.x, v.x), f(u.y, v.y), f(u.z, v.z), f(u.w, v.w));
    } else {
      for (int64_t j = i; j < n && j < i + kVec; ++j) y[j] = f(a[j], b[j]);
    }
  }
}

// The same maps over any input and output element types, with 8-element
// groups (16 bytes of 16-bit data) when every pointer is 16-byte aligned:
// y[i] = round(f(widen(x[i]), i)) and y[i] = round(f(widen(a[i]), widen(b[i]))).
template <int kVec, typename In, typename Out, typename F>
__global__ void map1_typed_kernel(const In* x, Out* y, int64_t n, F f) {
  const int64_t groups = (n + kVec - 1) / kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const int64_t i = g * kVec;
    if (kVec == 8 && i + 8 <= n) {
      float v[8];
      load8(x + i, v);
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = f(v[k], i + k);
      store8(y + i, v);
    } else {
      for (int64_t j = i; j < n && j < i + kVec; ++j) y[j] = from_float<Out>(f(to_float(x[j]), j));
    }
  }
}

template <int kVec, typename In, typename Out, typename F>
__global__ void map2_typed_kernel(const In* a, const In* b, Out* y, int64_t n, F f) {
  const int64_t groups = (n + kVec - 1) / kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const int64_t i = g * kVec;
    if (kVec == 8 && i + 8 <= n) {
      float u[8], v[8];
      load8(a + i, u);
      load8(b + i, v);
#pragma unroll
      for (int k = 0; k < 8; ++k) u[k] = f(u[k], v[k]);
      store8(y + i, u);
    } else {
      for (int64_t j = i; j < n && j < i + kVec; ++j) y[j] = from_float<Out>(f(to_float(a[j]), to_float(b[j])));
    }
  }
}

template <typename In, typename Out, typename F>
void launch_map1_typed(cudaStream_t s, const In* x, Out* y, int64_t n, F f) {
  if (n <= 0) return;
  if (aligned16(x) && aligned16(y))
    map1_typed_kernel<8><<<blocks_for((n + 7) / 8), kThreads, 0, s>>>(x, y, n, f);
  else
    map1_typed_kernel<1><<<blocks_for(n), kThreads, 0, s>>>(x, y, n, f);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

template <typename In, typename Out, typename F>
void launch_map2_typed(cudaStream_t s, const In* a, const In* b, Out* y, int64_t n, F f) {
  if (n <= 0) return;
  if (aligned16(a) && aligned16(b) && aligned16(y))
    map2_typed_kernel<8><<<blocks_for((n + 7) / 8), kThreads, 0, s>>>(a, b, y, n, f);
  else
    map2_typed_kernel<1><<<blocks_for(n), kThreads, 0, s>>>(a, b, y, n, f);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

template <typename F>
void launch_map1(cudaStream_t s, const float* x, float* y, int64_t n, F f) {
  if (n <= 0) return;
  if (aligned16(x) && aligned16(y))
    map1_kernel<4><<<blocks_for((n + 3) / 4), kThreads, 0, s>>>(x, y, n, f);
  else
    map1_kernel<1><<<blocks_for(n), kThreads, 0, s>>>(x, y, n, f);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

template <typename F>
void launch_map2(cudaStream_t s, const float* a, const float* b, float* y, int64_t n, F f) {
  if (n <= 0) return;
  if (aligned16(a) && aligned16(b) && aligned16(y))
    map2_kernel<4><<<blocks_for((n + 3) / 4), kThreads, 0, s>>>(a, b, y, n, f);
  else
    map2_kernel<1><<<blocks_for(n), kThreads, 0, s>>>(a, b, y, n, f);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

// ---- the element functions ----

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

struct IdentityOp {
  __device__ float operator()(float v, int64_t) const { return v; }
};

struct ScaleOp {
  float factor;
  __device__ float operator()(float v, int64_t) const { return v * factor; }
};

// The activation functions and derivatives: activation_math.cuh.

// ---- dropout ----
// y[i] = keep(index_base + i) ? x[i]·scale : 0, the mask core/random.h's:
// one Philox call gives the keep bits of the four elements 4c .. 4c + 3 of the
// global index, so a thread takes whole groups of four (aligned on the global
// index, not on i) and makes one call per group.

struct DropoutArgs {
  DropoutKeys keys;  // the launch's generator constants (dropout_keys.cuh): dropout_keep4's bits
  uint64_t index_base;
  float scale;
};

// With index_base % 4 == 0 and x, y 16-byte aligned: 8 elements per thread,
// loaded and stored 16 bytes at a time (two groups, two Philox calls); a
// partial last chunk goes element by element with the same bits.
template <typename T>
__global__ void dropout_vec8_kernel(const T* x, T* y, int64_t n, DropoutArgs a) {
  const int64_t chunks = (n + 7) / 8;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks; c += stride) {
    const int64_t i = c * 8;
    const uint64_t counter = (a.index_base + static_cast<uint64_t>(i)) >> 2;
    const uint32_t keep = keep4(a.keys, counter) | keep4(a.keys, counter + 1) << 4;
    if (i + 8 <= n) {
      float v[8];
      load8(x + i, v);
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = ((keep >> k) & 1u) ? v[k] * a.scale : 0.0f;
      store8(y + i, v);
    } else {
      for (int k = 0; k < 8 && i + k < n; ++k)
        y[i + k] = from_float<T>(((keep >> k) & 1u) ? to_float(x[i + k]) * a.scale : 0.0f);
    }
  }
}

// Any index_base and alignment: a thread per group of four global indices
// 4c .. 4c + 3 that meets [index_base, index_base + n), scalar accesses.
template <typename T>
__global__ void dropout_group_kernel(const T* x, T* y, int64_t n, DropoutArgs a) {
  const uint64_t first = a.index_base >> 2, last = (a.index_base + static_cast<uint64_t>(n) - 1) >> 2;
  const int64_t groups = static_cast<int64_t>(last - first) + 1;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < groups; c += stride) {
    const uint64_t counter = first + static_cast<uint64_t>(c);
    const uint32_t keep = keep4(a.keys, counter);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint64_t index = counter * 4 + static_cast<uint64_t>(w);
      if (index < a.index_base || index - a.index_base >= static_cast<uint64_t>(n)) continue;
      const int64_t i = static_cast<int64_t>(index - a.index_base);
      y[i] = from_float<T>(((keep >> w) & 1u) ? to_float(x[i]) * a.scale : 0.0f);
    }
  }
}

template <typename T>
void launch_dropout(cudaStream_t s, const T* x, T* y, int64_t n, const DropoutArgs& a) {
  if (n <= 0) return;
  if (a.index_base % 4 == 0 && aligned16(x) && aligned16(y))
    dropout_vec8_kernel<T><<<blocks_for((n + 7) / 8), kThreads, 0, s>>>(x, y, n, a);
  else
    dropout_group_kernel<T><<<blocks_for(n / 4 + 2), kThreads, 0, s>>>(x, y, n, a);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

// ---- rows and columns ----

// out[b, h] = x[b, row, h] (forward) or dx[b, row, h] += dout[b, h] (backward),
// the sum in float and rounded once for 16-bit T.
template <bool kBackward, typename T>
__global__ void select_row_kernel(const T* src, T* dst, int64_t B, int64_t L, int64_t H, int64_t row) {
  const int64_t n = B * H;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t b = i / H, h = i - b * H;
    const int64_t seq = (b * L + row) * H + h;
    if (kBackward)
      dst[seq] = from_float<T>(to_float(dst[seq]) + to_float(src[i]));
    else
      dst[i] = src[seq];
  }
}

// Column sums: a block owns kCols adjacent columns; its kRowLanes lanes of
// threads take every kRowLanes-th row (so a warp reads 4 rows × 8 columns, one
// 32-byte sector per row), sum in double, then combine the lanes in a fixed
// tree. No atomics and no dependence on scheduling: the same bits every run.
constexpr int kCols = 8;
constexpr int kRowLanes = 128;

template <typename T>
__global__ void __launch_bounds__(kCols* kRowLanes)
    column_sums_kernel(const T* dy, int64_t M, int64_t N, float* db) {
  __shared__ double partial[kRowLanes][kCols];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kCols + tx;
  double acc = 0.0;
  if (n < N) {
#pragma unroll 4
    for (int64_t m = ty; m < M; m += kRowLanes) acc += to_float(dy[m * N + n]);
  }
  partial[ty][tx] = acc;
  __syncthreads();
  for (int half = kRowLanes / 2; half > 0; half /= 2) {
    if (ty < half) partial[ty][tx] += partial[ty + half][tx];
    __syncthreads();
  }
  if (ty == 0 && n < N) db[n] += static_cast<float>(partial[0][tx]);
}

}  // namespace

void add(cudaStream_t s, const float* a, const float* b, float* out, int64_t n) {
  launch_map2(s, a, b, out, n, AddOp{});
}

void add_inplace(cudaStream_t s, float* dst, const float* src, int64_t n) {
  launch_map2(s, dst, src, dst, n, AddOp{});
}

void scale(cudaStream_t s, float* x, float factor, int64_t n) { launch_map1(s, x, x, n, ScaleOp{factor}); }

void activation_forward(cudaStream_t s, ActivationKind kind, const float* x, float* y, int64_t n) {
  switch (kind) {
    case ActivationKind::GeluErf: launch_map1(s, x, y, n, GeluErfForward{}); break;
    case ActivationKind::GeluTanh: launch_map1(s, x, y, n, GeluTanhForward{}); break;
    case ActivationKind::Relu: launch_map1(s, x, y, n, ReluForward{}); break;
    case ActivationKind::Tanh: launch_map1(s, x, y, n, TanhForward{}); break;
  }
}

void activation_backward(cudaStream_t s, ActivationKind kind, const float* saved, const float* dy, float* dx,
                         int64_t n) {
  switch (kind) {
    case ActivationKind::GeluErf: launch_map2(s, saved, dy, dx, n, GeluErfBackward{}); break;
    case ActivationKind::GeluTanh: launch_map2(s, saved, dy, dx, n, GeluTanhBackward{}); break;
    case ActivationKind::Relu: launch_map2(s, saved, dy, dx, n, ReluBackward{}); break;
    case ActivationKind::Tanh: launch_map2(s, saved, dy, dx, n, TanhBackward{}); break;
  }
}

void dropout(cudaStream_t s, const float* x, float* y, int64_t n, const DropoutSpec& spec, uint64_t index_base) {
  if (n <= 0) return;
  if (spec.p <= 0.0f) {
    // As the CPU: no randomness drawn, a plain copy (nothing at all in place).
    if (x != y) ANATOMY_CUDA_CHECK(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
    return;
  }
  launch_dropout(s, x, y, n, DropoutArgs{make_dropout_keys(spec), index_base, keep_scale_of(spec)});
}

void select_row(cudaStream_t s, const float* x, int64_t B, int64_t L, int64_t H, int64_t row, float* out) {
  if (B * H <= 0) return;
  select_row_kernel<false, float><<<blocks_for(B * H), kThreads, 0, s>>>(x, out, B, L, H, row);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void select_row_backward(cudaStream_t s, const float* dout, int64_t B, int64_t L, int64_t H, int64_t row,
                         float* dx) {
  if (B * H <= 0) return;
  select_row_kernel<true, float><<<blocks_for(B * H), kThreads, 0, s>>>(dout, dx, B, L, H, row);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
__global__ void mask_rows_kernel(T* x, const int64_t* mask, int64_t rows, int64_t H) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * H) return;
  if (mask[i / H] == 0) x[i] = T(0.0f);
}

void mask_rows(cudaStream_t s, std::optional<Half> half, void* x, const int64_t* mask, int64_t rows, int64_t H) {
  if (rows * H <= 0) return;
  if (!half) {
    mask_rows_kernel<float><<<blocks_for(rows * H), kThreads, 0, s>>>(static_cast<float*>(x), mask, rows, H);
  } else {
    with_half_type(*half, [&](auto tag) {
      using T = typename decltype(tag)::type;
      mask_rows_kernel<T><<<blocks_for(rows * H), kThreads, 0, s>>>(static_cast<T*>(x), mask, rows, H);
    });
  }
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void column_sums_accumulate(cudaStream_t s, const float* dy, int64_t M, int64_t N, float* db) {
  // M == 0 adds zeros, as the CPU does; N == 0 has nothing to do.
  if (N <= 0) return;
  const int64_t blocks = (N + kCols - 1) / kCols;
  ANATOMY_CHECK(blocks <= 0x7fffffff, "column_sums_accumulate: {} columns are too many", N);
  column_sums_kernel<float><<<static_cast<unsigned>(blocks), dim3(kCols, kRowLanes), 0, s>>>(dy, M, N, db);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

// ---- 16-bit variants ----

void cast_f32_to_half(cudaStream_t s, Half h, const float* x, void* y, int64_t n) {
  with_half_type(h, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map1_typed(s, x, static_cast<T*>(y), n, IdentityOp{});
  });
}

void cast_half_to_f32(cudaStream_t s, Half h, const void* x, float* y, int64_t n) {
  with_half_type(h, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map1_typed(s, static_cast<const T*>(x), y, n, IdentityOp{});
  });
}

void add_half(cudaStream_t s, Half h, const void* a, const void* b, void* out, int64_t n) {
  with_half_type(h, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map2_typed(s, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n, AddOp{});
  });
}

void add_inplace_half(cudaStream_t s, Half h, void* dst, const void* src, int64_t n) {
  add_half(s, h, dst, src, dst, n);
}

void activation_forward_half(cudaStream_t s, Half h, ActivationKind kind, const void* x, void* y, int64_t n) {
  with_half_type(h, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(y);
    switch (kind) {
      case ActivationKind::GeluErf: launch_map1_typed(s, in, out, n, GeluErfForward16{}); break;
      case ActivationKind::GeluTanh: launch_map1_typed(s, in, out, n, GeluTanhForward{}); break;
      case ActivationKind::Relu: launch_map1_typed(s, in, out, n, ReluForward{}); break;
      case ActivationKind::Tanh: launch_map1_typed(s, in, out, n, TanhForward{}); break;
    }
  });
}

void activation_backward_half(cudaStream_t s, Half h, ActivationKind kind, const void* saved, const void* dy,
                              void* dx, int64_t n) {
  with_half_type(h, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* sv = static_cast<const T*>(saved);
    const T* g = static_cast<const T*>(dy);
    T* out = static_cast<T*>(dx);
    switch (kind) {
      case ActivationKind::GeluErf: launch_map2_typed(s, sv, g, out, n, GeluErfBackward16{}); break;
      case ActivationKind::GeluTanh: launch_map2_typed(s, sv, g, out, n, GeluTanhBackward{}); break;
      case ActivationKind::Relu: launch_map2_typed(s, sv, g, out, n, ReluBackward{}); break;
      case ActivationKind::Tanh: launch_map2_typed(s, sv, g, out, n, TanhBackward{}); break;
    }
  });
}

void dropout_half(cudaStream_t s, Half h, const void* x, void* y, int64_t n, const DropoutSpec& spec,
                  uint64_t index_base) {
  if (n <= 0) return;
  if (spec.p <= 0.0f) {
    // A 16-bit value rounds to itself: a plain copy, as the float32 dropout makes.
    if (x != y) ANATOMY_CUDA_CHECK(cudaMemcpyAsync(y, x, n * 2, cudaMemcpyDeviceToDevice, s));
    return;
  }
  with_half_type(h, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_dropout(s, static_cast<const T*>(x), static_cast<T*>(y), n,
                   DropoutArgs{make_dropout_keys(spec), index_base, keep_scale_of(spec)});
  });
}

void select_row_half(cudaStream_t s, Half h, const void* x, int64_t B, int64_t L, int64_t H, int64_t row,
                     void* out) {
  if (B * H <= 0) return;
  with_half_type(h, [&](auto tag) {
    using T = typename decltype(tag)::type;
    select_row_kernel<false, T>
        <<<blocks_for(B * H), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(out), B, L, H, row);
  });
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void select_row_backward_half(cudaStream_t s, Half h, const void* dout, int64_t B, int64_t L, int64_t H, int64_t row,
                              void* dx) {
  if (B * H <= 0) return;
  with_half_type(h, [&](auto tag) {
    using T = typename decltype(tag)::type;
    select_row_kernel<true, T>
        <<<blocks_for(B * H), kThreads, 0, s>>>(static_cast<const T*>(dout), static_cast<T*>(dx), B, L, H, row);
  });
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void column_sums_accumulate_half(cudaStream_t s, Half h, const void* dy, int64_t M, int64_t N, float* db) {
  if (N <= 0) return;
  const int64_t blocks = (N + kCols - 1) / kCols;
  ANATOMY_CHECK(blocks <= 0x7fffffff, "column_sums_accumulate_half: {} columns are too many", N);
  with_half_type(h, [&](auto tag) {
    using T = typename decltype(tag)::type;
    column_sums_kernel<T><<<static_cast<unsigned>(blocks), dim3(kCols, kRowLanes), 0, s>>>(
        static_cast<const T*>(dy), M, N, db);
  });
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace anatomy::cuda
