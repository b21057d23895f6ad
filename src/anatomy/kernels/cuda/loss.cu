// loss.cu: the CUDA losses (cross-entropy, mean squared error, binary
// cross-entropy with logits). Each writes dlogits and leaves the mean loss as
// one double in device memory, so the caller reads it back only when it wants
// to print it.
//
// The heads these serve are small (B ≤ 4096 rows, C ≤ 1000 classes), so each
// loss runs as a single block: the mean needs a sum over every row, and one
// block can make it in a fixed order (per-thread or per-warp partial sums in
// double, then the warps' sums added in warp order) with no atomics and no
// scratch, giving the same bits on every run.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/half_types.cuh"
#include "anatomy/kernels/cuda/kernels.cuh"
#include "anatomy/kernels/cuda_memory.h"

namespace anatomy::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / kWarp;
constexpr int64_t kIgnoreIndex = -100;  // torch's default ignore_index

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block of one value per warp (the caller's warp-uniform value),
// added in warp order; the result is returned to every thread.
template <typename T>
__device__ T block_sum_of_warps(T warp_value, T* shared /* [kWarps + 1] */) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) shared[warp] = warp_value;
  __syncthreads();
  if (threadIdx.x == 0) {
    T total = 0;
    for (int w = 0; w < kWarps; ++w) total += shared[w];
    shared[kWarps] = total;
  }
  __syncthreads();
  return shared[kWarps];
}

// One row of the cross-entropy by one warp: writes the row's dlogits and
// returns its log-sum-exp (the same value in every lane). With label smoothing
// ε > 0 the target is (1 − ε)·one-hot + ε/C and *row_sum gets the sum of the
// row's logits (every lane), for the smoothed loss. With K > 0 the row is
// loaded once into registers, K values per lane (C <= 32·K), so that all its
// loads are in flight together; K == 0 serves any C by reading the row in each
// pass. Each lane sums its values in the same order either way (columns lane,
// lane + 32, ...), so K changes the speed and never the bits.
template <int K>
__device__ double cross_entropy_row(const float* row, float* d, int64_t C, int64_t y, double inv_counted,
                                    int lane, double eps = 0.0, double* row_sum = nullptr) {
  constexpr int kHeld = K > 0 ? K : 1;
  float held[kHeld];
  if constexpr (K > 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c = lane + static_cast<int64_t>(k) * kWarp;
      held[k] = c < C ? row[c] : -INFINITY;
    }
  }
  // The row's value at column c = lane + 32·k.
  auto value = [&](int k, int64_t c) -> float {
    if constexpr (K > 0) return held[k];
    else return row[c];
  };
  const int steps = K > 0 ? K : static_cast<int>((C - lane + kWarp - 1) / kWarp);

  float mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < (K > 0 ? K : steps); ++k) {
    const int64_t c = lane + static_cast<int64_t>(k) * kWarp;
    if (c < C) mx = fmaxf(mx, value(k, c));
  }
  mx = warp_max(mx);
  double sum = 0.0;
#pragma unroll
  for (int k = 0; k < (K > 0 ? K : steps); ++k) {
    const int64_t c = lane + static_cast<int64_t>(k) * kWarp;
    if (c < C) sum += expf(value(k, c) - mx);
  }
  const double lse = static_cast<double>(mx) + log(warp_sum(sum));
  if (eps > 0.0) {
    double xs = 0.0;
#pragma unroll
    for (int k = 0; k < (K > 0 ? K : steps); ++k) {
      const int64_t c = lane + static_cast<int64_t>(k) * kWarp;
      if (c < C) xs += value(k, c);
    }
    *row_sum = warp_sum(xs);
  }
  // ε = 0: the target is exactly 1 at y and 0 elsewhere, the bits of the plain loss.
  const double spread = eps / static_cast<double>(C);
#pragma unroll
  for (int k = 0; k < (K > 0 ? K : steps); ++k) {
    const int64_t c = lane + static_cast<int64_t>(k) * kWarp;
    if (c < C) {
      const double softmax = expf(static_cast<float>(value(k, c) - lse));
      // A multiply by 1/counted rather than the CPU's division: a double
      // division per element would dominate this single-block kernel, and the
      // two differ by at most one double ulp before the rounding to float.
      d[c] = static_cast<float>((softmax - ((c == y ? 1.0 - eps : 0.0) + spread)) * inv_counted);
    }
  }
  return lse;
}

template <int K>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_kernel(const float* logits, const int64_t* labels, float* dlogits, double* loss, int64_t B,
                         int64_t C, double eps) {
  __shared__ long long shared_count[kWarps + 1];
  __shared__ double shared_loss[kWarps + 1];
  __shared__ int bad_label;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (threadIdx.x == 0) bad_label = 0;

  // The mean is over the rows whose label counts; dlogits need that count first.
  long long mine = 0;
  for (int64_t b = threadIdx.x; b < B; b += kThreads) mine += labels[b] != kIgnoreIndex;
  const double counted = static_cast<double>(block_sum_of_warps(warp_sum(mine), shared_count));
  const double inv_counted = 1.0 / counted;

  // One warp per row; every warp adds its rows' losses in row order.
  double warp_total = 0.0;
  for (int64_t b = warp; b < B; b += kWarps) {
    const int64_t y = labels[b];
    const float* row = logits + b * C;
    float* d = dlogits + b * C;
    if (y == kIgnoreIndex) {
      for (int64_t c = lane; c < C; c += kWarp) d[c] = 0.0f;
      continue;
    }
    // The CPU throws on a label outside [0, C); a kernel cannot, so the loss
    // becomes NaN (and the row's gradient is the softmax alone).
    const bool valid = y >= 0 && y < C;
    if (!valid) bad_label = 1;
    double row_sum = 0.0;
    const double lse = cross_entropy_row<K>(row, d, C, y, inv_counted, lane, eps, &row_sum);
    if (valid)
      warp_total += eps > 0.0 ? (1.0 - eps) * (lse - row[y]) + eps * (lse - row_sum / static_cast<double>(C))
                              : lse - row[y];
  }
  const double total = block_sum_of_warps(warp_total, shared_loss);
  if (threadIdx.x == 0) *loss = (counted > 0.0 && !bad_label) ? total / counted : NAN;
}

__global__ void __launch_bounds__(kThreads)
    mse_kernel(const float* logits, const float* targets, float* dlogits, double* loss, int64_t n) {
  __shared__ double shared[kWarps + 1];
  const double count = static_cast<double>(n);
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const double diff = static_cast<double>(logits[i]) - targets[i];
    acc += diff * diff;
    dlogits[i] = static_cast<float>(__ddiv_rn(__dmul_rn(2.0, diff), count));  // 2·diff/n, as the CPU rounds it
  }
  const double total = block_sum_of_warps(warp_sum(acc), shared);
  if (threadIdx.x == 0) *loss = total / count;  // NaN for n == 0, as on the CPU
}

__global__ void __launch_bounds__(kThreads)
    bce_with_logits_kernel(const float* logits, const float* targets, float* dlogits, double* loss, int64_t n) {
  __shared__ double shared[kWarps + 1];
  const double count = static_cast<double>(n);
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const double v = logits[i], target = targets[i];
    // max(v, 0) − v·t + log(1 + e^−|v|): never overflows.
    acc += fmax(v, 0.0) - v * target + log1p(exp(-fabs(v)));
    const double sigmoid = 1.0 / (1.0 + exp(-v));
    dlogits[i] = static_cast<float>((sigmoid - target) / count);
  }
  const double total = block_sum_of_warps(warp_sum(acc), shared);
  if (threadIdx.x == 0) *loss = total / count;
}

// The masked-LM head's chunked cross-entropy: rows of a 30k-50k vocabulary,
// thousands of them, so the rows spread over a fixed grid (kCrossEntropySumWarps
// warps, one row per warp at a time, rows w, w + warps, ...). Each warp adds
// its rows' losses in row order into its own partial (double); a second,
// single-block kernel adds the partials in warp order: the same bits on every
// run, and scratch of a fixed size whatever the rows.
constexpr int kSumThreads = 256;
constexpr int kSumBlocks = static_cast<int>(kCrossEntropySumWarps / (kSumThreads / kWarp));

template <typename In, typename Out>
__global__ void __launch_bounds__(kSumThreads)
    cross_entropy_sum_kernel(const In* logits, const int64_t* labels, Out* dlogits, double scale, double* partial,
                             int* bad, int64_t N, int64_t C) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  double mine = 0.0;
  for (int64_t n = warp; n < N; n += warps) {
    const int64_t y = labels[n];
    const In* row = logits + n * C;
    Out* d = dlogits ? dlogits + n * C : nullptr;
    if (y == kIgnoreIndex) {
      if (d)
        for (int64_t c = lane; c < C; c += kWarp) d[c] = from_float<Out>(0.0f);
      continue;
    }
    const bool valid = y >= 0 && y < C;
    if (!valid && lane == 0) *bad = 1;
    float mx = -INFINITY;
    for (int64_t c = lane; c < C; c += kWarp) mx = fmaxf(mx, to_float(row[c]));
    mx = warp_max(mx);
    double sum = 0.0;
    for (int64_t c = lane; c < C; c += kWarp) sum += expf(to_float(row[c]) - mx);
    const double lse = static_cast<double>(mx) + log(warp_sum(sum));
    if (valid) mine += lse - static_cast<double>(to_float(row[y]));  // every lane reads row[y] before any write
    __syncwarp();
    if (d)
      for (int64_t c = lane; c < C; c += kWarp) {
        const double softmax = expf(static_cast<float>(to_float(row[c]) - lse));
        d[c] = from_float<Out>(static_cast<float>((softmax - (c == y ? 1.0 : 0.0)) * scale));
      }
  }
  if (lane == 0) partial[warp] = mine;
}

__global__ void __launch_bounds__(kThreads) cross_entropy_sum_total(const double* partial, const int* bad,
                                                                   double* loss, int64_t n) {
  __shared__ double shared[kWarps + 1];
  // Thread t adds partials t, t + kThreads, ... ; the warps' sums are added in warp order.
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) acc += partial[i];
  const double total = block_sum_of_warps(warp_sum(acc), shared);
  if (threadIdx.x == 0) *loss = *bad ? NAN : total;
}

}  // namespace

void cross_entropy_sum(cudaStream_t s, DType in, const void* logits, const int64_t* labels, DType out,
                       void* dlogits, double scale, double* loss, int64_t N, int64_t C, void* scratch) {
  double* partial = static_cast<double*>(scratch);
  int* bad = reinterpret_cast<int*>(partial + kCrossEntropySumWarps);
  ANATOMY_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(int), s));
  auto launch = [&](auto in_type, auto out_type) {
    using In = typename decltype(in_type)::type;
    using Out = typename decltype(out_type)::type;
    cross_entropy_sum_kernel<In, Out><<<kSumBlocks, kSumThreads, 0, s>>>(
        static_cast<const In*>(logits), labels, static_cast<Out*>(dlogits), scale, partial, bad, N, C);
  };
  auto with_out = [&](auto in_type) {
    if (out == DType::BF16) launch(in_type, std::type_identity<__nv_bfloat16>{});
    else if (out == DType::F16) launch(in_type, std::type_identity<__half>{});
    else launch(in_type, std::type_identity<float>{});
  };
  if (in == DType::BF16) with_out(std::type_identity<__nv_bfloat16>{});
  else if (in == DType::F16) with_out(std::type_identity<__half>{});
  else with_out(std::type_identity<float>{});
  ANATOMY_CUDA_CHECK(cudaGetLastError());
  cross_entropy_sum_total<<<1, kThreads, 0, s>>>(partial, bad, loss, kCrossEntropySumWarps);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

namespace {

}  // namespace

void cross_entropy(cudaStream_t s, const float* logits, const int64_t* labels, float* dlogits, double* loss,
                   int64_t B, int64_t C, double label_smoothing) {
  const double eps = label_smoothing;
  // Rows of up to 32·K classes are held in registers (K values per lane).
  if (C <= 1 * kWarp)
    cross_entropy_kernel<1><<<1, kThreads, 0, s>>>(logits, labels, dlogits, loss, B, C, eps);
  else if (C <= 4 * kWarp)
    cross_entropy_kernel<4><<<1, kThreads, 0, s>>>(logits, labels, dlogits, loss, B, C, eps);
  else if (C <= 16 * kWarp)
    cross_entropy_kernel<16><<<1, kThreads, 0, s>>>(logits, labels, dlogits, loss, B, C, eps);
  else if (C <= 32 * kWarp)
    cross_entropy_kernel<32><<<1, kThreads, 0, s>>>(logits, labels, dlogits, loss, B, C, eps);
  else
    cross_entropy_kernel<0><<<1, kThreads, 0, s>>>(logits, labels, dlogits, loss, B, C, eps);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void mse(cudaStream_t s, const float* logits, const float* targets, float* dlogits, double* loss, int64_t n) {
  mse_kernel<<<1, kThreads, 0, s>>>(logits, targets, dlogits, loss, n);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void bce_with_logits(cudaStream_t s, const float* logits, const float* targets, float* dlogits, double* loss,
                     int64_t n) {
  bce_with_logits_kernel<<<1, kThreads, 0, s>>>(logits, targets, dlogits, loss, n);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace anatomy::cuda
