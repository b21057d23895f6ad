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
#include "anatomy/kernels/cuda_memory.h"

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
                                    uint64_t stream, int64_t window, bool mask_queries) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;  // the whole warp leaves together
  const int lane = threadIdx.x % kWarp;
  float* x = probs + row * L;
  const int64_t* key_row = key_mask ? key_mask + (row / rows_per_batch) * L : nullptr;
  const int64_t query = row % L;
  // DeBERTa's mask is query × key (mask_queries): a padding query's row has every key masked.
  const bool query_masked = mask_queries && key_row != nullptr && key_row[query] == 0;
  const auto masked = [&](const int64_t*, int64_t j) {
    return query_masked || (key_row != nullptr && key_row[j] == 0) ||
           (window > 0 && (j - query > window || query - j > window));
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

// ---------------------------------------------------------------------------
// DeBERTa's relative terms. c2p (Q·pos_kᵀ) and p2c (K·pos_qᵀ) are laid out
// [heads, B, L, P]: head h's rows are the B·L tokens in order, so each is one
// product per head over all tokens, and so are the position gradients.
// ---------------------------------------------------------------------------

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// scores[b, h, i, j] += scale·c2p[h, b, i, r] + scale·p2c[h, b, j, r],
// r = index[i − j + L − 1] (the CPU's float operations in its order).
__global__ void relative_scores_kernel(float* scores, const float* c2p, const float* p2c, const int64_t* index,
                                       int64_t B, int64_t heads, int64_t L, int64_t P, float scale) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= B * heads * L * L) return;
  const int64_t j = t % L, i = (t / L) % L, bh = t / (L * L), b = bh / heads, h = bh % heads;
  const int64_t r = index[i - j + L - 1];
  const int64_t rows = (h * B + b) * L;
  float term = 0.0f;
  if (c2p) term += __fmul_rn(scale, c2p[(rows + i) * P + r]);
  if (p2c) term += __fmul_rn(scale, p2c[(rows + j) * P + r]);
  scores[t] += term;
}

// grad[h, b, row, r] = Σ over the distances d of r (ranges[2r] .. ranges[2r + 1],
// ascending) of dS[b, h, row, row − d] (content-to-position: the query's row)
// or dS[b, h, row + d, row] (position-to-content: the key's column).
__global__ void relative_gradients_kernel(const float* ds, const int64_t* ranges, float* grad, int64_t B,
                                          int64_t heads, int64_t L, int64_t P, bool by_key) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= B * heads * L * P) return;
  // Threads of one (b, h, row) take consecutive r.
  const int64_t r = t % P, row = (t / P) % L, bh = t / (P * L), b = bh / heads, h = bh % heads;
  const float* S = ds + bh * L * L;
  int64_t lo = ranges[2 * r], hi = ranges[2 * r + 1];
  // The distances whose other token lies in the sequence.
  if (by_key) {
    lo = max(lo, -row);
    hi = min(hi, L - 1 - row);
  } else {
    lo = max(lo, row - (L - 1));
    hi = min(hi, row);
  }
  float acc = 0.0f;
  for (int64_t d = lo; d <= hi; ++d) acc += by_key ? S[(row + d) * L + row] : S[row * L + row - d];
  grad[((h * B + b) * L + row) * P + r] = acc;
}

// C_h = alpha·op(A_h)·op(B_h) + beta·C_h for every head h, column-major in
// cuBLAS's sense, each operand's head h at base + h·stride.
void gemm_heads(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b,
                float beta, float* c, int64_t ldc, int64_t stride_c, int64_t heads) {
  const float alpha = 1.0f;
  check_cublas(cublasSgemmStridedBatched(handle, ta, tb, static_cast<int>(m), static_cast<int>(n),
                                         static_cast<int>(k), &alpha, a, static_cast<int>(lda), stride_a, b,
                                         static_cast<int>(ldb), stride_b, &beta, c, static_cast<int>(ldc), stride_c,
                                         static_cast<int>(heads)),
               "cublasSgemmStridedBatched (relative attention)");
}

// The parts of the relative attention's scratch (cuda_memory.h).
struct RelativeScratch {
  float* buffer;  // [B, heads, L, L]
  float* c2p;     // [heads, B, L, P]: the products (forward) or their gradients (backward)
  float* p2c;
};
RelativeScratch relative_scratch(void* scratch, int64_t B, int64_t heads, int64_t L, int64_t P) {
  char* base = static_cast<char*>(scratch);
  const size_t first = relative_attention_part_bytes(attention_scratch_bytes(B, heads, L));
  const size_t part = relative_attention_part_bytes(static_cast<size_t>(B * heads * L * P) * sizeof(float));
  return {reinterpret_cast<float*>(base), reinterpret_cast<float*>(base + first),
          reinterpret_cast<float*>(base + first + part)};
}

// c = x_h · pos_hᵀ per head ([B·L, P] row-major; column-major: posᵀ·x, m = P).
void position_products(cublasHandle_t cublas, const float* x, const float* pos, float* c, int64_t BL, int64_t P,
                       int64_t heads, int64_t D) {
  const int64_t H = heads * D;
  gemm_heads(cublas, CUBLAS_OP_T, CUBLAS_OP_N, P, BL, D, pos, H, D, x, H, D, 0.0f, c, P, BL * P, heads);
}

// dx_h += grad_h · pos_h and dpos_h = grad_hᵀ · x_h per head.
void position_gradients(cublasHandle_t cublas, const float* grad, const float* x, const float* pos, float* dx,
                        float* dpos, int64_t BL, int64_t P, int64_t heads, int64_t D) {
  const int64_t H = heads * D;
  // column-major dxᵀ [D, B·L] += posᵀ [D, P] · gradᵀ [P, B·L]
  gemm_heads(cublas, CUBLAS_OP_N, CUBLAS_OP_N, D, BL, P, pos, H, D, grad, P, BL * P, 1.0f, dx, H, D, heads);
  // column-major dposᵀ [D, P] = xᵀ [D, B·L] · grad [B·L, P]
  gemm_heads(cublas, CUBLAS_OP_N, CUBLAS_OP_T, D, P, BL, x, H, D, grad, P, BL * P, 0.0f, dpos, H, D, heads);
}

// The CPU scales kept elements by 1/(1-p) computed in float; so does this.

}  // namespace

// The scratch (attention_scratch_bytes, cuda_memory.h) holds the dropped
// probabilities (forward), then dP / dS (backward), for all heads at once: one
// [B, heads, L, L] float buffer.

namespace {

// The relative terms of a forward (attention_relative_forward), or none.
struct RelativeTerms {
  const float* pos_q;
  const float* pos_k;
  const int64_t* index;
  int64_t P;
  float* c2p;
  float* p2c;
};

void attention_forward_impl(cudaStream_t s, cublasHandle_t cublas, const float* q, const float* k, const float* v,
                            const int64_t* key_mask, int64_t B, int64_t L, int64_t heads, int64_t D, double scale,
                            const DropoutSpec& dropout, float* probs, float* ctx, void* scratch, int64_t window,
                            const RelativeTerms* rel) {
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
  if (rel != nullptr && D > 0 && (rel->pos_q || rel->pos_k)) {
    if (rel->pos_k) position_products(cublas, q, rel->pos_k, rel->c2p, B * L, rel->P, heads, D);
    if (rel->pos_q) position_products(cublas, k, rel->pos_q, rel->p2c, B * L, rel->P, heads, D);
    relative_scores_kernel<<<blocks_for(B * heads * LL), kThreads, 0, s>>>(
        probs, rel->pos_k ? rel->c2p : nullptr, rel->pos_q ? rel->p2c : nullptr, rel->index, B, heads, L, rel->P,
        static_cast<float>(scale));
    ANATOMY_CUDA_CHECK(cudaGetLastError());
  }

  const bool use_dropout = dropout.p > 0.0f;  // the CPU's test, so p = 0 takes the same path
  float* dropped = use_dropout ? static_cast<float*>(scratch) : nullptr;
  const int64_t rows = B * heads * L;
  softmax_rows_kernel<<<row_blocks(rows), kWarpsPerBlock * kWarp, 0, s>>>(
      probs, dropped, key_mask, rows, L, heads * L, dropout.p, keep_scale_of(dropout),
      dropout.seed, dropout.stream, window, rel != nullptr);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
  if (D == 0) return;

  // ctxᵀ (column-major [D, L], ld H) = Vᵀ · Wᵀ per head, i.e. row-major ctx_h = W V_h,
  // W the (dropped) probabilities.
  const float* weights = use_dropout ? dropped : probs;
  gemm_per_head(cublas, CUBLAS_OP_N, CUBLAS_OP_N, D, L, L, 1.0f, {v, H, L * H, D}, {weights, L, heads * LL, LL},
                ctx, H, L * H, D, B, heads);
}

}  // namespace

void attention_forward(cudaStream_t s, cublasHandle_t cublas, const float* q, const float* k, const float* v,
                       const int64_t* key_mask, int64_t B, int64_t L, int64_t heads, int64_t D, double scale,
                       const DropoutSpec& dropout, float* probs, float* ctx, void* scratch, int64_t window) {
  attention_forward_impl(s, cublas, q, k, v, key_mask, B, L, heads, D, scale, dropout, probs, ctx, scratch, window,
                         nullptr);
}

void attention_relative_forward(cudaStream_t s, cublasHandle_t cublas, const float* q, const float* k, const float* v,
                                const float* pos_q, const float* pos_k, const int64_t* rel_index, int64_t P,
                                const int64_t* key_mask, int64_t B, int64_t L, int64_t heads, int64_t D, double scale,
                                const DropoutSpec& dropout, float* probs, float* ctx, void* scratch) {
  if (B == 0 || L == 0 || heads == 0) return;
  const RelativeScratch parts = relative_scratch(scratch, B, heads, L, P);
  const RelativeTerms rel{pos_q, pos_k, rel_index, P, parts.c2p, parts.p2c};
  attention_forward_impl(s, cublas, q, k, v, key_mask, B, L, heads, D, scale, dropout, probs, ctx, parts.buffer, 0,
                         &rel);
}

namespace {

// The relative terms of a backward (attention_relative_backward).
struct RelativeGradients {
  const float* pos_q;
  const float* pos_k;
  const int64_t* ranges;
  int64_t P;
  float* dpos_q;
  float* dpos_k;
  float* d_c2p;
  float* d_p2c;
};

void attention_backward_impl(cudaStream_t s, cublasHandle_t cublas, const float* dctx, const float* q, const float* k,
                             const float* v, const float* probs, int64_t B, int64_t L, int64_t heads, int64_t D,
                             double scale, const DropoutSpec& dropout, float* dq, float* dk, float* dv, void* scratch,
                             const RelativeGradients* rel) {
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
  if (rel == nullptr) return;
  // The relative terms' gradients, summed from dS by distance, then through
  // the position products: into dq and dpos_k (c2p), dk and dpos_q (p2c).
  // A term: its gradient by (token, index) into d_term, then dx += d_term·pos and dpos = d_termᵀ·x.
  const auto term = [&](const float* pos, bool by_key, float* d_term, const float* x, float* dx, float* dpos) {
    relative_gradients_kernel<<<blocks_for(B * heads * L * rel->P), kThreads, 0, s>>>(buffer, rel->ranges, d_term, B,
                                                                                   heads, L, rel->P, by_key);
    ANATOMY_CUDA_CHECK(cudaGetLastError());
    position_gradients(cublas, d_term, x, pos, dx, dpos, B * L, rel->P, heads, D);
  };
  if (rel->pos_k) term(rel->pos_k, false, rel->d_c2p, q, dq, rel->dpos_k);
  if (rel->pos_q) term(rel->pos_q, true, rel->d_p2c, k, dk, rel->dpos_q);
}

}  // namespace

void attention_backward(cudaStream_t s, cublasHandle_t cublas, const float* dctx, const float* q, const float* k,
                        const float* v, const float* probs, int64_t B, int64_t L, int64_t heads, int64_t D,
                        double scale, const DropoutSpec& dropout, float* dq, float* dk, float* dv, void* scratch) {
  attention_backward_impl(s, cublas, dctx, q, k, v, probs, B, L, heads, D, scale, dropout, dq, dk, dv, scratch,
                          nullptr);
}

void attention_relative_backward(cudaStream_t s, cublasHandle_t cublas, const float* dctx, const float* q,
                                 const float* k, const float* v, const float* pos_q, const float* pos_k,
                                 const int64_t* rel_ranges, int64_t P, const float* probs, int64_t B, int64_t L,
                                 int64_t heads, int64_t D, double scale, const DropoutSpec& dropout, float* dq,
                                 float* dk, float* dv, float* dpos_q, float* dpos_k, void* scratch) {
  const int64_t H = heads * D;
  if (B == 0 || L == 0 || heads == 0 || D == 0) {
    // No tokens: the position gradients are zero (empty when D is).
    if (dpos_q) ANATOMY_CUDA_CHECK(cudaMemsetAsync(dpos_q, 0, static_cast<size_t>(P * H) * sizeof(float), s));
    if (dpos_k) ANATOMY_CUDA_CHECK(cudaMemsetAsync(dpos_k, 0, static_cast<size_t>(P * H) * sizeof(float), s));
    return;
  }
  const RelativeScratch parts = relative_scratch(scratch, B, heads, L, P);
  const RelativeGradients rel{pos_q, pos_k, rel_ranges, P, dpos_q, dpos_k, parts.c2p, parts.p2c};
  attention_backward_impl(s, cublas, dctx, q, k, v, probs, B, L, heads, D, scale, dropout, dq, dk, dv, parts.buffer,
                          &rel);
}

}  // namespace anatomy::cuda
