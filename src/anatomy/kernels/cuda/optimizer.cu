// optimizer.cu: the CUDA kernels of the optimizer step: the sum of squares
// behind gradient-norm clipping, and torch.optim.AdamW's update of one tensor.
//
// sum_of_squares sums in double in a fixed two-level order (blocks over fixed
// slices of the tensor into `scratch`, then one block over the block sums), so
// the norm, and whether and how much gradients are clipped, is the same on
// every run. adamw_step repeats the CPU backend's double arithmetic operation
// for operation, so the two backends update parameters to the same bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/kernels.cuh"

namespace anatomy::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr int kFinishThreads = 1024;
// The number of first-level blocks depends on n alone (not on the GPU), so
// the summation order, and with it the result, is fixed for a given n.
constexpr int64_t kMaxBlocks = kFinishThreads;
constexpr int64_t kItemsPerThread = 16;  // four float4 groups

int64_t square_blocks(int64_t n) {
  return std::clamp<int64_t>((n + kThreads * kItemsPerThread - 1) / (kThreads * kItemsPerThread), 1, kMaxBlocks);
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Block-wide sum, warps added in order; valid in thread 0.
template <int kBlock>
__device__ double block_sum(double v) {
  __shared__ double warps[kBlock / kWarp];
  v = warp_sum(v);
  if (threadIdx.x % kWarp == 0) warps[threadIdx.x / kWarp] = v;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kBlock / kWarp; ++w) total += warps[w];
  return total;
}

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

// Constants of one AdamW step, computed on the host exactly as the CPU backend does.
struct AdamWConstants {
  double beta1, one_minus_beta1, beta2, one_minus_beta2, eps, step_size, bias2_sqrt, decay;
};

// The CPU's loop body with every operation rounded on its own (the _rn
// intrinsics stop nvcc fusing multiply-adds the x86 build does not fuse), so
// that parameters and moments come out bit-identical to the CPU backend's.
__global__ void adamw_kernel(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                             AdamWConstants k) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double g = grad[i];
    const double m = __dadd_rn(__dmul_rn(k.beta1, exp_avg[i]), __dmul_rn(k.one_minus_beta1, g));
    const double v = __dadd_rn(__dmul_rn(k.beta2, exp_avg_sq[i]), __dmul_rn(__dmul_rn(k.one_minus_beta2, g), g));
    exp_avg[i] = static_cast<float>(m);
    exp_avg_sq[i] = static_cast<float>(v);
    const double denom = __dadd_rn(__ddiv_rn(__dsqrt_rn(v), k.bias2_sqrt), k.eps);
    param[i] = static_cast<float>(
        __dsub_rn(__dmul_rn(static_cast<double>(param[i]), k.decay), __ddiv_rn(__dmul_rn(k.step_size, m), denom)));
  }
}

}  // namespace

size_t sum_of_squares_scratch_bytes(int64_t n) { return static_cast<size_t>(square_blocks(n)) * sizeof(double); }

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
  const double bias1 = 1.0 - std::pow(hp.beta1, static_cast<double>(hp.step));
  const double bias2 = 1.0 - std::pow(hp.beta2, static_cast<double>(hp.step));
  const AdamWConstants k{hp.beta1,    1.0 - hp.beta1,        hp.beta2,
                         1.0 - hp.beta2, hp.eps,             hp.lr / bias1,
                         std::sqrt(bias2), 1.0 - hp.lr * hp.weight_decay};
  const unsigned blocks = static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65536));
  adamw_kernel<<<blocks, kThreads, 0, s>>>(param, grad, exp_avg, exp_avg_sq, n, k);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace anatomy::cuda
