// attention.cu: multi-head scaled dot-product attention on the GPU, forward
// and backward, as declared in kernels.cuh. The four products per head go to
// cuBLAS (float32, batched over heads); the softmax, its key mask, the dropout
// of the probabilities and the softmax backward are kernels of this file, one
// warp per row. The CPU backend (kernels/cpu/cpu_backend.cpp) is the reference:
// every step here mirrors one there, in the same precision where it matters.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "anatomy/core/error.h"
#include "anatomy/core/random.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/dropout_keys.cuh"
#include "anatomy/kernels/cuda/kernels.cuh"

namespace anatomy::cuda {

namespace {

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) fail("cuBLAS error in {}: {}", what, cublasGetStatusString(status));
}

// ---------------------------------------------------------------------------
// Batched products over (batch entry, head).
//
// Row-major tensors are handed to cuBLAS (column-major) as their transposes:
// a row-major [rows, cols] block with leading dimension ld is, to cuBLAS, a
// [cols, rows] column-major matrix with the same ld. The head h of batch entry
// b of q/k/v/ctx (row-major [L, D] with ld = heads*D) starts at b*L*H + h*D;
// its [L, L] probabilities at (b*heads + h)*L*L.
//
// Each operand's offset is b*per_batch + h*per_head. cuBLAS's strided batching
// takes one stride, so one dimension is batched and the other looped over;
// the loop runs over the smaller of B and heads to launch fewer products.
// (Pointer-array batching would need one launch, but hides the operands'
// alignment from cuBLAS, which then has to assume the worst.)
// ---------------------------------------------------------------------------

struct Operand {
  const float* base;
  int64_t ld;
  int64_t per_batch;  // offset between batch entries, in floats
  int64_t per_head;   // offset between heads, in floats
};

// C = alpha · op(A) · op(B) for every (b, h), all column-major in cuBLAS's sense.
void gemm_per_head(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                   int64_t k, float alpha, const Operand& a, const Operand& b, float* c_base, int64_t ldc,
                   int64_t c_per_batch, int64_t c_per_head, int64_t B, int64_t heads) {
  const float beta = 0.0f;
  const bool loop_batch = B <= heads;  // batch over heads, loop over b; or the reverse
  const int64_t outer = loop_batch ? B : heads;
  const int64_t inner = loop_batch ? heads : B;
  for (int64_t o = 0; o < outer; ++o) {
    const int64_t oa = loop_batch ? o * a.per_batch : o * a.per_head;
    const int64_t ob = loop_batch ? o * b.per_batch : o * b.per_head;
    const int64_t oc = loop_batch ? o * c_per_batch : o * c_per_head;
    const int64_t sa = loop_batch ? a.per_head : a.per_batch;
    const int64_t sb = loop_batch ? b.per_head : b.per_batch;
    const int64_t sc = loop_batch ? c_per_head : c_per_batch;
    check_cublas(cublasSgemmStridedBatched(handle, ta, tb, static_cast<int>(m), static_cast<int>(n),
                                           static_cast<int>(k), &alpha, a.base + oa, static_cast<int>(a.ld), sa,
                                           b.base + ob, static_cast<int>(b.ld), sb, &beta, c_base + oc,
                                           static_cast<int>(ldc), sc, static_cast<int>(inner)),
                 "cublasSgemmStridedBatched (attention)");
  }
}

// ---------------------------------------------------------------------------
// Row kernels: one warp per row of L scores. Reductions are warp butterflies
// of fixed shape, so results do not depend on scheduling.
// ---------------------------------------------------------------------------

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ double warp_sum(double x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ __forceinline__ double warp_max(double x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

__device__ __forceinline__ bool masked(const int64_t* mask, int64_t j) { return mask != nullptr && mask[j] == 0; }

// out[j] = dropout(in[j]) for the row of L elements whose element j has
// dropout index base + j, by the whole warp (in == out allowed). One Philox
// call gives the bits of the four indices 4c .. 4c + 3 (core/random.h), so a
// lane takes whole groups of four, aligned on the index (a group may straddle
// rows when L % 4 != 0: each row's warp then uses its own part of it).
__device__ __forceinline__ void dropout_row(const float* in, float* out, uint64_t base, int64_t L, int lane, float p,
                                            float keep_scale, uint64_t seed, uint64_t stream) {
  const uint64_t first = base >> 2, last = (base + static_cast<uint64_t>(L) - 1) >> 2;
  for (uint64_t c = first + static_cast<uint64_t>(lane); c <= last; c += kWarp) {
    const uint32_t keep = dropout_keep4(seed, stream, c, p);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint64_t index = 4 * c + static_cast<uint64_t>(w);
      if (index < base || index - base >= static_cast<uint64_t>(L)) continue;
      const int64_t j = static_cast<int64_t>(index - base);
      out[j] = ((keep >> w) & 1u) ? in[j] * keep_scale : 0.0f;
    }
  }
}

// probs holds scale·QKᵀ on entry, row r = (b*heads + h)*L + i, and the softmax
// on exit. Max, exponentials and sum are in double as on the CPU, so the float
// probabilities agree with it to the last bit or so. Masked keys get exactly 0;
// a row with every key masked attends uniformly (1/L), as the CPU does. When
// `dropped` is given it receives dropout(probs): element r*L + j is element
// (b*heads + h)*L*L + i*L + j, the index the CPU's mask uses.
// With `window` > 0, keys farther than it from the row's query are masked too.
__global__ void softmax_rows_kernel(float* probs, float* dropped, const int64_t* key_mask, int64_t rows, int64_t L,
                                    int64_t rows_per_batch, float p, float keep_scale, uint64_t seed,
                                    uint64_t stream, int64_t window) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;  // the whole warp leaves together
  const int lane = threadIdx.x % kWarp;
  float* x = probs + row * L;
  const int64_t* key_row = key_mask ? key_mask + (row / rows_per_batch) * L : nullptr;
  const int64_t query = row % L;
  const auto masked = [&](const int64_t*, int64_t j) {
    return (key_row != nullptr && key_row[j] == 0) || (window > 0 && (j - query > window || query - j > window));
  };
  const int64_t* mask = key_row;

  double mx = -INFINITY;
  for (int64_t j = lane; j < L; j += kWarp)
    if (!masked(mask, j)) mx = fmax(mx, static_cast<double>(x[j]));
  mx = warp_max(mx);

  if (mx == -INFINITY) {
    // Every key masked (mx stays -inf only then; a finite score is > -inf).
    const float uniform = 1.0f / static_cast<float>(L);
    for (int64_t j = lane; j < L; j += kWarp) x[j] = uniform;
  } else {
    double sum = 0.0;
    for (int64_t j = lane; j < L; j += kWarp)
      if (!masked(mask, j)) sum += exp(static_cast<double>(x[j]) - mx);
    sum = warp_sum(sum);
    for (int64_t j = lane; j < L; j += kWarp)
      x[j] = masked(mask, j) ? 0.0f : static_cast<float>(exp(static_cast<double>(x[j]) - mx) / sum);
  }

  if (dropped) {
    // Lanes read probabilities other lanes wrote above (groups of four indices
    // per lane): the warp's writes are made visible first.
    __syncwarp();
    dropout_row(x, dropped + row * L, static_cast<uint64_t>(row) * static_cast<uint64_t>(L), L, lane, p, keep_scale,
                seed, stream);
  }
}

// Softmax backward, in place on grad (dP of the dropped probabilities on
// entry, dS on exit): dP goes through the forward's dropout mask, then
// dS = P ⊙ (dP − Σ_j P dP) · scale, with the row sum and the product in double
// exactly as the CPU writes them.
__global__ void softmax_backward_rows_kernel(const float* probs, float* grad, int64_t rows, int64_t L, double scale,
                                             bool use_dropout, float p, float keep_scale, uint64_t seed,
                                             uint64_t stream) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const float* pr = probs + row * L;
  float* g = grad + row * L;
  const uint64_t base = static_cast<uint64_t>(row) * static_cast<uint64_t>(L);

  if (use_dropout) {
    // dP through the mask, in place (lanes take groups of four indices), made
    // visible to the warp before the lane-strided passes below read it.
    dropout_row(g, g, base, L, lane, p, keep_scale, seed, stream);
    __syncwarp();
  }
  double dot = 0.0;
  for (int64_t j = lane; j < L; j += kWarp) dot += static_cast<double>(pr[j]) * g[j];
  dot = warp_sum(dot);
  for (int64_t j = lane; j < L; j += kWarp) g[j] = static_cast<float>(pr[j] * (g[j] - dot) * scale);
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

// The CPU scales kept elements by 1/(1-p) computed in float; so does this.

}  // namespace

// The scratch (attention_scratch_bytes, cuda_memory.h) holds the dropped
// probabilities (forward), then dP / dS (backward), for all heads at once: one
// [B, heads, L, L] float buffer.

void attention_forward(cudaStream_t s, cublasHandle_t cublas, const float* q, const float* k, const float* v,
                       const int64_t* key_mask, int64_t B, int64_t L, int64_t heads, int64_t D, double scale,
                       const DropoutSpec& dropout, float* probs, float* ctx, void* scratch, int64_t window) {
  if (B == 0 || L == 0 || heads == 0) return;
  const int64_t H = heads * D;
  const int64_t LL = L * L;
  if (D == 0) {
    // No features: every score is 0 (softmax still defined), ctx is empty.
    ANATOMY_CUDA_CHECK(cudaMemsetAsync(probs, 0, static_cast<size_t>(B * heads * LL) * sizeof(float), s));
  } else {
    // scoresᵀ (column-major [L, L]) = Kᵀ·Q per head, i.e. row-major S = scale·Q Kᵀ,
    // with alpha the float scale the CPU passes to its sgemm.
    gemm_per_head(cublas, CUBLAS_OP_T, CUBLAS_OP_N, L, L, D, static_cast<float>(scale), {k, H, L * H, D},
                  {q, H, L * H, D}, probs, L, heads * LL, LL, B, heads);
  }

  const bool use_dropout = dropout.p > 0.0f;  // the CPU's test, so p = 0 takes the same path
  float* dropped = use_dropout ? static_cast<float*>(scratch) : nullptr;
  const int64_t rows = B * heads * L;
  softmax_rows_kernel<<<row_blocks(rows), kWarpsPerBlock * kWarp, 0, s>>>(
      probs, dropped, key_mask, rows, L, heads * L, dropout.p, keep_scale_of(dropout),
      dropout.seed, dropout.stream, window);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
  if (D == 0) return;

  // ctxᵀ (column-major [D, L], ld H) = Vᵀ · Wᵀ per head, i.e. row-major ctx_h = W V_h,
  // W the (dropped) probabilities.
  const float* weights = use_dropout ? dropped : probs;
  gemm_per_head(cublas, CUBLAS_OP_N, CUBLAS_OP_N, D, L, L, 1.0f, {v, H, L * H, D}, {weights, L, heads * LL, LL},
                ctx, H, L * H, D, B, heads);
}

void attention_backward(cudaStream_t s, cublasHandle_t cublas, const float* dctx, const float* q, const float* k,
                        const float* v, const float* probs, int64_t B, int64_t L, int64_t heads, int64_t D,
                        double scale, const DropoutSpec& dropout, float* dq, float* dk, float* dv, void* scratch) {
  if (B == 0 || L == 0 || heads == 0 || D == 0) return;  // dq, dk, dv are then empty
  const int64_t H = heads * D;
  const int64_t LL = L * L;
  const int64_t n = B * heads * LL;
  float* buffer = static_cast<float*>(scratch);
  const bool use_dropout = dropout.p > 0.0f;
  const float keep_scale = keep_scale_of(dropout);

  // dV_h = Wᵀ dctx_h, W the dropped probabilities, replayed from the saved ones
  // (column-major: dVᵀ = dctxᵀ · W).
  const float* weights = probs;
  if (use_dropout) {
    // Element i of the [B, heads, L, L] probabilities has dropout index i: the
    // element-wise dropout (elementwise.cu), which scales by the same float 1/(1-p).
    cuda::dropout(s, probs, buffer, n, dropout);
    weights = buffer;
  }
  gemm_per_head(cublas, CUBLAS_OP_N, CUBLAS_OP_T, D, L, L, 1.0f, {dctx, H, L * H, D}, {weights, L, heads * LL, LL},
                dv, H, L * H, D, B, heads);

  // dP = dctx_h V_hᵀ (column-major: dPᵀ = Vᵀ·dctx), into the same buffer: the
  // stream orders it after the dV product that read the dropped probabilities.
  gemm_per_head(cublas, CUBLAS_OP_T, CUBLAS_OP_N, L, L, D, 1.0f, {v, H, L * H, D}, {dctx, H, L * H, D}, buffer, L,
                heads * LL, LL, B, heads);

  const int64_t rows = B * heads * L;
  softmax_backward_rows_kernel<<<row_blocks(rows), kWarpsPerBlock * kWarp, 0, s>>>(
      probs, buffer, rows, L, scale, use_dropout, dropout.p, keep_scale, dropout.seed, dropout.stream);
  ANATOMY_CUDA_CHECK(cudaGetLastError());

  // dQ_h = dS K_h (column-major: dQᵀ = Kᵀ · dSᵀ) and dK_h = dSᵀ Q_h (dKᵀ = Qᵀ · dS).
  gemm_per_head(cublas, CUBLAS_OP_N, CUBLAS_OP_N, D, L, L, 1.0f, {k, H, L * H, D}, {buffer, L, heads * LL, LL}, dq,
                H, L * H, D, B, heads);
  gemm_per_head(cublas, CUBLAS_OP_N, CUBLAS_OP_T, D, L, L, 1.0f, {q, H, L * H, D}, {buffer, L, heads * LL, LL}, dk,
                H, L * H, D, B, heads);
}

}  // namespace anatomy::cuda
