// adafactor.cu: transformers' Adafactor step (as Trainer builds it; semantics
// in backend.h, reference in kernels/cpu/adafactor.cpp) for one parameter
// tensor on the GPU.
//
// Element-wise, every float32 operation is the CPU reference's, each rounded
// on its own (the _rn intrinsics keep nvcc from fusing what the reference does
// not fuse, and fuse what torch fuses). The reductions are deterministic: sums
// in double in an order fixed by the shape alone (warp lanes over a row, then
// a fixed shuffle tree; column sums over fixed slices of rows into the scratch,
// then added in slice order; the update's sum of squares over fixed blocks,
// then one block), no atomics. They differ from the CPU's sequential double
// sums only in the last bits of a double, so a mean rounded to float32 can
// differ by one ulp (tests/gpu/test_cuda_adafactor.cpp says what follows).
//
// A matrix [rows, cols] takes, in order on the stream: the row means into the
// row state (a warp per row); the column sums (a thread per column and slice
// of rows), their finish into the column state; the mean of the row state
// (one block); the update's sum of squares (blocks of fixed slices, one
// finishing block that turns it into the clipping divisor); the update itself.
// A vector: its state and the sum of squares in one pass, the finish, the update.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/half_types.cuh"
#include "anatomy/kernels/cuda/optimizer_kernels.cuh"
#include "anatomy/kernels/cuda_memory.h"
#include "anatomy/kernels/cuda/reductions.cuh"

namespace anatomy::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr int kFinishThreads = 1024;
static_assert(kAdafactorMaxRmsBlocks == kFinishThreads, "one finishing thread per partial sum");
static_assert(kAdafactorRmsItemsPerBlock % kThreads == 0, "cuda_memory.h sizes the blocks with these");

// The scalars of one step, rounded to float32 on the host where torch rounds
// its Python floats (beta2t, 1 - beta2t, eps1, lr, -wd·lr, clip_threshold).
struct Constants {
  float beta2t, one_minus_beta2t, eps1, lr, decay, clip_threshold;
  bool weight_decay;
  int64_t rows, cols, n;
};

struct Scalars {
  float row_mean;      // exp_avg_sq_row.mean()
  float clip_divisor;  // max(1, RMS(update) / clip_threshold)
};

__device__ __forceinline__ float sq_plus_eps(float g, float eps1) { return __fadd_rn(__fmul_rn(g, g), eps1); }
__device__ __forceinline__ float rsqrt_rn(float x) { return __fdiv_rn(1.0f, __fsqrt_rn(x)); }
// state.mul_(beta2t).add_(mean, alpha=1 - beta2t)
__device__ __forceinline__ float moving_average(float state, float mean, const Constants& k) {
  return __fmaf_rn(mean, k.one_minus_beta2t, __fmul_rn(state, k.beta2t));
}

// ---- the factored statistics of a matrix ----

// Warp w of the grid takes row w: lanes sum columns lane, lane + 32, ... in double.
__global__ void __launch_bounds__(kThreads) row_state_kernel(const float* __restrict__ g, float* __restrict__ row,
                                                             Constants k) {
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / kWarp;
  if (r >= k.rows) return;  // whole warps leave together
  const int lane = threadIdx.x % kWarp;
  const float* g_row = g + r * k.cols;
  double sum = 0.0;
  for (int64_t j = lane; j < k.cols; j += kWarp) sum += sq_plus_eps(g_row[j], k.eps1);
  sum = warp_sum(sum);
  if (lane == 0) row[r] = moving_average(row[r], static_cast<float>(sum / static_cast<double>(k.cols)), k);
}

// Thread (column j, slice s) sums rows [s·per_slice, (s+1)·per_slice) of
// column j in row order; with one slice it finishes the column state itself.
__global__ void __launch_bounds__(kThreads) column_partials_kernel(const float* __restrict__ g,
                                                                   float* __restrict__ col,
                                                                   double* __restrict__ partials,
                                                                   int64_t rows_per_slice, Constants k) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= k.cols) return;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_slice;
  const int64_t end = begin + rows_per_slice < k.rows ? begin + rows_per_slice : k.rows;
  double sum = 0.0;
  for (int64_t r = begin; r < end; ++r) sum += sq_plus_eps(g[r * k.cols + j], k.eps1);
  if (gridDim.y == 1) col[j] = moving_average(col[j], static_cast<float>(sum / static_cast<double>(k.rows)), k);
  else partials[static_cast<int64_t>(blockIdx.y) * k.cols + j] = sum;
}

__global__ void __launch_bounds__(kThreads) column_finish_kernel(float* __restrict__ col,
                                                                 const double* __restrict__ partials, int64_t slices,
                                                                 Constants k) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= k.cols) return;
  double sum = 0.0;
  for (int64_t s = 0; s < slices; ++s) sum += partials[s * k.cols + j];
  col[j] = moving_average(col[j], static_cast<float>(sum / static_cast<double>(k.rows)), k);
}

// One block: the mean of the (updated) row state.
__global__ void __launch_bounds__(kFinishThreads) row_mean_kernel(const float* __restrict__ row,
                                                                  Scalars* __restrict__ scalars, Constants k) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < k.rows; i += kFinishThreads) sum += row[i];
  sum = block_sum<kFinishThreads>(sum);
  if (threadIdx.x == 0) scalars->row_mean = static_cast<float>(sum / static_cast<double>(k.rows));
}

// _approx_sq_grad(row, col) · grad at element e = (i, j):
// (row_i / mean(row)).rsqrt() · col_j.rsqrt() · g.
__device__ __forceinline__ float factored_update(const float* row, const float* col, float row_mean, float g,
                                                 int64_t e, const Constants& k) {
  const int64_t i = e / k.cols, j = e - i * k.cols;
  const float row_factor = rsqrt_rn(__fdiv_rn(row[i], row_mean));
  return __fmul_rn(__fmul_rn(row_factor, rsqrt_rn(col[j])), g);
}

// ---- the update's RMS and the step ----

// Block b sums the squares of the updates of elements b·T + t + m·(blocks·T)
// (T threads) into partials[b]. A vector's state is updated in the same pass.
template <bool kFactored>
__global__ void __launch_bounds__(kThreads) update_square_partials_kernel(const float* __restrict__ g,
                                                                          const float* __restrict__ row,
                                                                          const float* __restrict__ col,
                                                                          float* __restrict__ v,
                                                                          const Scalars* __restrict__ scalars,
                                                                          double* __restrict__ partials, Constants k) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const float row_mean = kFactored ? scalars->row_mean : 0.0f;
  double sum = 0.0;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < k.n; e += stride) {
    const float grad = g[e];
    float u;
    if constexpr (kFactored) {
      u = factored_update(row, col, row_mean, grad, e, k);
    } else {
      const float state = moving_average(v[e], sq_plus_eps(grad, k.eps1), k);
      v[e] = state;
      u = __fmul_rn(rsqrt_rn(state), grad);
    }
    sum += static_cast<double>(u) * u;
  }
  sum = block_sum<kThreads>(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// One block: the partials in order, then (norm(2) / numel ** 0.5 / clip_threshold).clamp(min=1).
__global__ void __launch_bounds__(kFinishThreads) clip_divisor_kernel(const double* __restrict__ partials,
                                                                      int64_t count, Scalars* __restrict__ scalars,
                                                                      float sqrt_n, Constants k) {
  const double v = threadIdx.x < count ? partials[threadIdx.x] : 0.0;
  const double total = block_sum<kFinishThreads>(v);
  if (threadIdx.x == 0) {
    const float rms = __fdiv_rn(static_cast<float>(sqrt(total)), sqrt_n);
    scalars->clip_divisor = fmaxf(1.0f, __fdiv_rn(rms, k.clip_threshold));
  }
}

// update / divisor · lr; p.add_(p, alpha=-wd·lr) when decaying; p.add_(-update).
template <bool kFactored, typename Copy>
__global__ void __launch_bounds__(kThreads) apply_kernel(float* __restrict__ p, const float* __restrict__ g,
                                                         const float* __restrict__ row, const float* __restrict__ col,
                                                         const float* __restrict__ v,
                                                         const Scalars* __restrict__ scalars, Copy* __restrict__ copy,
                                                         Constants k) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const float divisor = scalars->clip_divisor;
  const float row_mean = kFactored ? scalars->row_mean : 0.0f;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < k.n; e += stride) {
    const float grad = g[e];
    float u;
    if constexpr (kFactored) u = factored_update(row, col, row_mean, grad, e, k);
    else u = __fmul_rn(rsqrt_rn(v[e]), grad);
    u = __fmul_rn(__fdiv_rn(u, divisor), k.lr);
    float w = p[e];
    if (k.weight_decay) w = __fmaf_rn(w, k.decay, w);
    w = __fsub_rn(w, u);
    p[e] = w;
    if constexpr (!std::is_void_v<Copy>) copy[e] = from_float<Copy>(w);
  }
}

unsigned blocks_for(int64_t items, int64_t per_block) {
  return static_cast<unsigned>(std::max<int64_t>(1, (items + per_block - 1) / per_block));
}

template <typename Copy>
void launch(cudaStream_t stream, const Tensor& param, const Tensor& grad, const Tensor& row_state,
            const Tensor& col_state, const Tensor& v_state, const Constants& k, Copy* copy, void* scratch) {
  auto* base = static_cast<unsigned char*>(scratch);
  auto* rms_partials = reinterpret_cast<double*>(base + AdafactorScratch::kRmsPartials);
  auto* scalars = reinterpret_cast<Scalars*>(base + AdafactorScratch::kScalars);
  auto* column_partials = reinterpret_cast<double*>(base + AdafactorScratch::kColumnPartials);
  static_assert(sizeof(Scalars) <= AdafactorScratch::kColumnPartials - AdafactorScratch::kScalars);

  const float* g = grad.data<float>();
  float* row = k.rows > 0 && row_state.defined() ? row_state.data<float>() : nullptr;
  float* col = row ? col_state.data<float>() : nullptr;
  float* v = row ? nullptr : v_state.data<float>();
  const bool factored = row != nullptr;
  const int64_t rms_blocks = adafactor_rms_blocks(k.n);
  const auto sqrt_n = static_cast<float>(std::sqrt(static_cast<double>(k.n)));

  if (factored) {
    row_state_kernel<<<blocks_for(k.rows * kWarp, kThreads), kThreads, 0, stream>>>(g, row, k);
    ANATOMY_CUDA_CHECK(cudaGetLastError());
    const int64_t slices = adafactor_column_slices(k.rows, k.cols);
    const int64_t rows_per_slice = (k.rows + slices - 1) / slices;
    const dim3 grid(blocks_for(k.cols, kThreads), static_cast<unsigned>(slices));
    column_partials_kernel<<<grid, kThreads, 0, stream>>>(g, col, column_partials, rows_per_slice, k);
    ANATOMY_CUDA_CHECK(cudaGetLastError());
    if (slices > 1) {
      column_finish_kernel<<<blocks_for(k.cols, kThreads), kThreads, 0, stream>>>(col, column_partials, slices, k);
      ANATOMY_CUDA_CHECK(cudaGetLastError());
    }
    row_mean_kernel<<<1, kFinishThreads, 0, stream>>>(row, scalars, k);
    ANATOMY_CUDA_CHECK(cudaGetLastError());
    update_square_partials_kernel<true>
        <<<static_cast<unsigned>(rms_blocks), kThreads, 0, stream>>>(g, row, col, nullptr, scalars, rms_partials, k);
  } else {
    update_square_partials_kernel<false>
        <<<static_cast<unsigned>(rms_blocks), kThreads, 0, stream>>>(g, nullptr, nullptr, v, scalars, rms_partials, k);
  }
  ANATOMY_CUDA_CHECK(cudaGetLastError());
  clip_divisor_kernel<<<1, kFinishThreads, 0, stream>>>(rms_partials, rms_blocks, scalars, sqrt_n, k);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
  // The update pass: a grid-stride loop over about two waves of a large GPU.
  const auto apply_blocks = static_cast<unsigned>(std::min<int64_t>(blocks_for(k.n, kThreads), 132 * 8));
  if (factored)
    apply_kernel<true, Copy><<<apply_blocks, kThreads, 0, stream>>>(param.data<float>(), g, row, col, nullptr,
                                                                     scalars, copy, k);
  else
    apply_kernel<false, Copy><<<apply_blocks, kThreads, 0, stream>>>(param.data<float>(), g, nullptr, nullptr, v,
                                                                      scalars, copy, k);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void adafactor_step(cudaStream_t stream, const Tensor& param, const Tensor& grad, const Tensor& row_state,
                    const Tensor& col_state, const Tensor& v_state, const AdafactorHyper& h,
                    const Tensor* half_copy, void* scratch) {
  const int64_t n = param.numel();
  ANATOMY_CHECK(grad.numel() == n, "adafactor_step: {} and {} differ in size", param.name(), grad.name());
  ANATOMY_CHECK(h.step >= 1, "adafactor_step: step {} is not 1-based", h.step);
  Constants k{};
  k.n = n;
  if (row_state.defined()) {
    ANATOMY_CHECK(param.rank() == 2 && col_state.defined(),
                  "adafactor_step: {} is not a matrix with row and column states", param.name());
    k.rows = param.dim(0), k.cols = param.dim(1);
    ANATOMY_CHECK(row_state.numel() == k.rows && col_state.numel() == k.cols,
                  "adafactor_step: states of {} and {} elements for {} [{}, {}]", row_state.numel(),
                  col_state.numel(), param.name(), k.rows, k.cols);
  } else {
    ANATOMY_CHECK(v_state.defined() && v_state.numel() == n,
                  "adafactor_step: {} needs a second-moment state of {} elements", param.name(), n);
  }
  if (n == 0) return;
  const double beta2t = 1.0 - std::pow(static_cast<double>(h.step), h.decay_rate);
  k.beta2t = static_cast<float>(beta2t);
  k.one_minus_beta2t = static_cast<float>(1.0 - beta2t);
  k.eps1 = static_cast<float>(h.eps1);
  k.lr = static_cast<float>(h.lr);
  k.decay = static_cast<float>(-h.weight_decay * h.lr);
  k.weight_decay = h.weight_decay != 0.0;
  k.clip_threshold = static_cast<float>(h.clip_threshold);
  if (!half_copy) return launch<void>(stream, param, grad, row_state, col_state, v_state, k, nullptr, scratch);
  ANATOMY_CHECK(half_copy->numel() == n, "adafactor_step: the half copy {} differs in size", half_copy->name());
  if (half_copy->dtype() == DType::BF16)
    return launch(stream, param, grad, row_state, col_state, v_state, k, half_copy->data<__nv_bfloat16>(), scratch);
  ANATOMY_CHECK(half_copy->dtype() == DType::F16, "adafactor_step: the half copy {} is {}", half_copy->name(),
                dtype_name(half_copy->dtype()));
  launch(stream, param, grad, row_state, col_state, v_state, k, half_copy->data<__half>(), scratch);
}

}  // namespace anatomy::cuda
