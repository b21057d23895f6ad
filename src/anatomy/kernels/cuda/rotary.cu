// rotary.cu: ModernBERT's element-wise ops: the rotary position embedding
// (Backend::rotary) and the gated activation (GeGLU: act(input) · gate), for
// float32, bf16 and fp16 data, computing in float as the CPU reference does.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "anatomy/kernels/cuda/activation_math.cuh"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/half_types.cuh"
#include "anatomy/kernels/cuda/kernels.cuh"
#include "anatomy/kernels/rotary_frequencies.h"

namespace anatomy::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxHalfHead = 256;  // head sizes up to 512

struct Frequencies {
  float f[kMaxHalfHead];
};

// Blocks for a grid-stride loop (as elementwise.cu's).
unsigned blocks_for(int64_t work) {
  return static_cast<unsigned>(std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, 65536));
}

// One thread per (row, head, i < d/2): the pair (i, i + d/2) of that head turns
// by t·f_i, t the row's position in its sequence. cos and sin of the float
// angle in double, rounded to float, as the CPU computes them.
template <typename T>
__global__ void rotary_kernel(T* x, int64_t rows, int64_t L, int64_t heads, int64_t half, Frequencies freq,
                              bool inverse) {
  const int64_t n = rows * heads * half;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half, h = (idx / half) % heads, row = idx / (half * heads);
    const float angle = static_cast<float>(row % L) * freq.f[i];
    const float c = static_cast<float>(cos(static_cast<double>(angle)));
    const float s = static_cast<float>(sin(static_cast<double>(angle))) * (inverse ? -1.0f : 1.0f);
    T* p = x + row * heads * 2 * half + h * 2 * half;
    const float a = to_float(p[i]), z = to_float(p[i + half]);
    p[i] = from_float<T>(a * c - z * s);
    p[i + half] = from_float<T>(z * c + a * s);
  }
}

template <typename T, typename Forward>
__global__ void gated_forward_kernel(const T* u, T* y, int64_t rows, int64_t I, Forward f) {
  const int64_t n = rows * I;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / I, i = idx % I;
    const float a = to_float(u[r * 2 * I + i]), gate = to_float(u[r * 2 * I + I + i]);
    y[idx] = from_float<T>(f(a, idx) * gate);
  }
}

template <typename T, typename Forward, typename Backward>
__global__ void gated_backward_kernel(const T* u, const T* dy, T* du, int64_t rows, int64_t I, Forward f,
                                      Backward df) {
  const int64_t n = rows * I;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / I, i = idx % I;
    const float a = to_float(u[r * 2 * I + i]), gate = to_float(u[r * 2 * I + I + i]), g = to_float(dy[idx]);
    du[r * 2 * I + i] = from_float<T>(df(a, g * gate));
    du[r * 2 * I + I + i] = from_float<T>(g * f(a, idx));
  }
}

// f(Forward, Backward) for the gate's activation.
template <typename F>
void with_gate_activation(ActivationKind kind, F&& f) {
  switch (kind) {
    case ActivationKind::GeluErf: return f(GeluErfForward{}, GeluErfBackward{});
    case ActivationKind::GeluTanh: return f(GeluTanhForward{}, GeluTanhBackward{});
    case ActivationKind::Relu: return f(ReluForward{}, ReluBackward{});
    case ActivationKind::Tanh: break;
  }
  ANATOMY_CHECK(false, "gated activation: tanh is not a gate's activation");
}

}  // namespace

void rotary(cudaStream_t s, DType dtype, void* x, int64_t B, int64_t L, int64_t heads, int64_t D, double theta,
            bool inverse) {
  const int64_t half = D / 2;
  ANATOMY_CHECK(half <= kMaxHalfHead, "rotary: head size {} over {}", D, 2 * kMaxHalfHead);
  if (B * L * heads * half == 0) return;
  Frequencies freq{};
  const std::vector<float> f = rotary_inverse_frequencies(theta, D);
  for (int64_t i = 0; i < half; ++i) freq.f[i] = f[static_cast<size_t>(i)];
  const unsigned blocks = blocks_for(B * L * heads * half);
  with_element_type(dtype, "rotary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rotary_kernel<T><<<blocks, kThreads, 0, s>>>(static_cast<T*>(x), B * L, L, heads, half, freq, inverse);
  });
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void gated_activation_forward(cudaStream_t s, DType dtype, ActivationKind kind, const void* u, void* y, int64_t rows,
                              int64_t I) {
  if (rows * I == 0) return;
  const unsigned blocks = blocks_for(rows * I);
  with_element_type(dtype, "gated activation", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_gate_activation(kind, [&](auto forward, auto) {
      gated_forward_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const T*>(u), static_cast<T*>(y), rows, I, forward);
    });
  });
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void gated_activation_backward(cudaStream_t s, DType dtype, ActivationKind kind, const void* u, const void* dy,
                               void* du, int64_t rows, int64_t I) {
  if (rows * I == 0) return;
  const unsigned blocks = blocks_for(rows * I);
  with_element_type(dtype, "gated activation", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_gate_activation(kind, [&](auto forward, auto backward) {
      gated_backward_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const T*>(u), static_cast<const T*>(dy),
                                                        static_cast<T*>(du), rows, I, forward, backward);
    });
  });
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace anatomy::cuda
