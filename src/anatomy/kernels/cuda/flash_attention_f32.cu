// flash_attention_f32.cu: fused multi-head attention in float32, forward and
// backward (FlashAttention-2, Dao 2023), as declared in flash_attention_f32.cuh.
// Every product is plain FP32 FMA on the CUDA cores (no tensor cores, no TF32),
// register-tiled as in a SIMT SGEMM: each thread owns an 8 x 8 (forward) or
// 8 x 4 / 4 x 8 (backward) block of an output in registers and, per step of
// the inner dimension, reads one row piece of each operand from shared memory
// 16 bytes at a time. The distinct 16-byte words of a warp's load lie in
// distinct banks (the other lanes get broadcasts); in the forward, lanes 2i
// and 2i + 1 (or 2i and 2i + 2) of every load read the same address, which
// shared memory returns at twice the rate.
//
// Forward: one block of 128 threads per (128 query rows, batch entry, head).
// Thread (row group rg = 0..15, column group cg = 0..7) owns query rows
// 64·hr + 4·rg + {0..3} (hr = 0, 1) and, of each tile of 64 keys, keys
// 32·hc + 4·cg + {0..3} (hc = 0, 1): an 8x8 block of the scores S = Q·Kᵀ. Q is
// kept transposed in shared memory for the whole block, each K tile transposed
// (so that both operands are read along the row index). The 8 lanes of a row
// group keep a running max and sum of their rows (online softmax, in base 2);
// the probabilities go through shared memory, transposed, for O += P·V, where
// the thread owns the same 8 rows and the columns 32·hd + 4·cg + {0..3} of O.
// The next K tile is loaded into registers while P·V runs, the V tile by
// cp.async while S is computed: two barriers per key tile. Writes ctx and the
// log-sum-exp of each row.
//
// Backward, three kernels: Δ = Σ_d dO·O per row; the main kernel; the sum of
// dQ over splits. The main kernel has one block of 128 threads per (split,
// batch entry, head); a block owns whole key tiles of 64 (tile split, split +
// splits, ...), and for each keeps dK, dV of its keys in registers while it
// walks every query tile of 64, recomputing Sᵀ = K·Qᵀ and P = exp2(S·scale·log2e
// − lse·log2e), dPᵀ = V·dOᵀ, dS = P∘(dP∘keep/(1-p) − Δ); P∘keep and dS go
// through shared memory for dV += (P∘keep)ᵀ·dO, dK += dSᵀ·Q and this key
// tile's part of dQ = dS·K. K and V are held transposed for the block, Q and
// dO as they are (Sᵀ and dPᵀ read them along d, four values per load). dQ
// needs a sum over key tiles, i.e. over blocks: each split has its own float32
// partial (laid out as dq) that only its block touches (written by its first
// key tile, read-add-written by the next ones, each element by the thread
// that wrote it), and the last kernel adds the splits in split order and
// applies the scale. The number of splits depends only on the shapes, so
// results are bit-reproducible on any device.
//
// Dropout's mask is the reference's, one Philox-4x32-10 call per four
// consecutive elements (core/random.h): in both kernels a thread owns runs of
// four consecutive keys of one query, aligned on multiples of 4, so when
// L % 4 == 0 each run is one call; otherwise a run straddles two calls and
// takes both (two calls per four elements).
//
// The reference (CPU backend) semantics: masked keys get probability exactly
// 0; a batch entry whose keys are all masked attends uniformly to all L keys,
// which here is "every score of that entry is 0" (a per-block flag), so that
// the gradients are those of a softmax at constant scores, as the reference's.

#include "anatomy/kernels/cuda/flash_attention_f32.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "anatomy/core/error.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/attention_common.cuh"
#include "anatomy/kernels/cuda/attention_dropout.cuh"
#include "anatomy/kernels/cuda/dropout_keys.cuh"
#include "anatomy/kernels/cuda/shared_memory_config.cuh"

namespace anatomy::cuda {

namespace {

constexpr int kThreads = 128;           // both main kernels: 4 warps
constexpr int kKeys = 64;               // keys per tile
constexpr int kFwdRows = 128;           // query rows per forward block (8 per thread)
constexpr int kLdP = kFwdRows + 4;      // forward Pᵀ tile stride: conflict-free 16-byte stores
constexpr int kBwdRows = 64;            // query rows per backward step (4 per thread)
constexpr int kLdS = kKeys + 4;         // backward P, dS [query][key] stride
constexpr int kLdKt = kKeys + 4;        // backward Kᵀ [d][key] stride (read along keys by 8 rows at once)
constexpr int kTargetBlocks = 264;      // two blocks per SM of a 132-SM GPU (a constant: splits depend on shapes only)
static_assert(kKeys == kFlashF32Keys && kTargetBlocks == kFlashF32TargetBlocks,
              "cuda_memory.h sizes the backward's scratch with these");
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---------------------------------------------------------------------------
// Dropout: the reference's mask (core/random.h), as in flash_attention.cu.
// Element `index` of `stream` is kept when the uniform from word (index & 3)
// of Philox-4x32-10 at counter (index >> 2, stream) under key `seed` is >= p.
// What does not depend on the counter is worked out once on the host: the
// round keys, the first round's product of the stream word, the comparison as
// an integer one.
// ---------------------------------------------------------------------------

// DropoutKeys, make_dropout_keys, keep4: dropout_keys.cuh.

// keep_run4: attention_dropout.cuh.

// ---------------------------------------------------------------------------
// Primitives.
// ---------------------------------------------------------------------------

// fast_exp2, any_key_kept: attention_common.cuh.

__device__ __forceinline__ float4 zero4() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }

// Four consecutive floats of global memory: one 16-byte load when `vec` (the
// tensors are 16-byte aligned), else four.
__device__ __forceinline__ float4 load4(const float* p, bool vec) {
  if (vec) return *reinterpret_cast<const float4*>(p);
  return make_float4(p[0], p[1], p[2], p[3]);
}
__device__ __forceinline__ void store4(float* p, float4 x, bool vec) {
  if (vec) {
    *reinterpret_cast<float4*>(p) = x;
  } else {
    p[0] = x.x;
    p[1] = x.y;
    p[2] = x.z;
    p[3] = x.w;
  }
}
__device__ __forceinline__ float4 lds4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void sts4(float* p, float4 x) { *reinterpret_cast<float4*>(p) = x; }

// 16 bytes global -> shared: asynchronously (cp.async, zeros when !valid) when
// `vec`, else through registers. `src` must be a valid address even when !valid.
__device__ __forceinline__ void copy4_async(float* dst, const float* src, bool valid, bool vec) {
#if defined(__CUDA_ARCH__)
  if (vec) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                     static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
                 "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
    return;
  }
#endif
  sts4(dst, valid ? load4(src, vec) : zero4());
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

__device__ __forceinline__ float shfl_xor(float x, int mask) { return __shfl_xor_sync(0xffffffffu, x, mask); }

__device__ __forceinline__ float comp(const float4& x, int i) { return i == 0 ? x.x : i == 1 ? x.y : i == 2 ? x.z : x.w; }

// ---------------------------------------------------------------------------
// Forward.
// ---------------------------------------------------------------------------

struct FwdParams {
  const float* q;
  const float* k;
  const float* v;
  const int64_t* mask;
  float* ctx;
  float* lse;
  int L, heads;
  float scale_log2;  // scale · log2(e): scores in base 2, exp2 on the hardware unit
  float keep_scale;  // 1/(1-p), or 1 without dropout
  bool vec;          // every tensor 16-byte aligned
  DropoutKeys dropout;
};

// Qᵀ [D][128], Kᵀ [D][64], V [64][D], Pᵀ [64][132] floats; 64 key flags (int).
template <int D>
constexpr int fwd_smem_bytes() {
  return (D * kFwdRows + D * kKeys + kKeys * D + kKeys * kLdP + kKeys) * 4;
}

template <int D, bool kDropout>
__global__ void __launch_bounds__(kThreads, 2) f32_fwd_kernel(const FwdParams p) {
  constexpr int kChunks = D / 4;                       // 16-byte pieces per row
  constexpr int kKPerThread = kKeys * kChunks / kThreads;  // K pieces per thread per tile (D/8)
  constexpr int kDC = D / 32;                          // float4 column groups of O per thread
  static_assert(D == 32 || D == 64, "head size");
  extern __shared__ __align__(16) unsigned char smem[];
  float* sQt = reinterpret_cast<float*>(smem);  // [D][kFwdRows]
  float* sKt = sQt + D * kFwdRows;              // [D][kKeys]
  float* sV = sKt + D * kKeys;                  // [kKeys][D]
  float* sPt = sV + kKeys * D;                  // [kKeys][kLdP]
  int* sFlag = reinterpret_cast<int*>(sPt + kKeys * kLdP);  // [kKeys]: key kept (and < L)

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // Column group cg: lane bits 0, 2, 3; row group rg: lane bits 1, 4 and the
  // warp. In every 16-byte shared load, lanes 2i and 2i + 1 (operands along
  // rows: Qᵀ, Pᵀ) or 2i and 2i + 2 (along columns: Kᵀ, V) read the same
  // address, which the hardware returns at twice the rate. The 8 lanes of a
  // row group are those that differ in bits 0, 2, 3 (shuffles over 1, 4, 8).
  const int cg = (lane & 1) | ((lane >> 1) & 6), rg = warp * 4 + ((lane >> 1) & 1) + ((lane >> 3) & 2);
  const int L = p.L;
  const int bh = blockIdx.y, b = bh / p.heads, h = bh - b * p.heads;
  const int q0 = blockIdx.x * kFwdRows;
  const int64_t rs = static_cast<int64_t>(p.heads) * D;
  const int64_t off = static_cast<int64_t>(b) * L * rs + static_cast<int64_t>(h) * D;
  const float* gq = p.q + off;
  const float* gk = p.k + off;
  const float* gv = p.v + off;
  const int64_t* mrow = p.mask ? p.mask + static_cast<int64_t>(b) * L : nullptr;
  const bool all_masked = !any_key_kept(mrow, L);
  const bool vec = p.vec;

  // Q, transposed: thread t takes row q0 + t (a warp's 32 rows fill the 32 banks).
  {
    const int row = q0 + tid;
    const bool valid = row < L;
    const float* src = gq + (valid ? static_cast<int64_t>(row) * rs : 0);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const float4 x = valid ? load4(src + 4 * c, vec) : zero4();
      sQt[(4 * c + 0) * kFwdRows + tid] = x.x;
      sQt[(4 * c + 1) * kFwdRows + tid] = x.y;
      sQt[(4 * c + 2) * kFwdRows + tid] = x.z;
      sQt[(4 * c + 3) * kFwdRows + tid] = x.w;
    }
  }

  // A K tile through registers into Kᵀ: piece i of thread t is key (t & 31) +
  // 32·(i & 1), chunk (t >> 5) + 4·(i >> 1); with the key flags.
  float4 kreg[kKPerThread];
  int flag = 0;
  auto fetch_k = [&](int tile) {
    const int k0 = tile * kKeys;
#pragma unroll
    for (int i = 0; i < kKPerThread; ++i) {
      const int key = k0 + (tid & 31) + 32 * (i & 1), c = (tid >> 5) + 4 * (i >> 1);
      kreg[i] = key < L ? load4(gk + static_cast<int64_t>(key) * rs + 4 * c, vec) : zero4();
    }
    if (tid < kKeys) {
      const int key = k0 + tid;
      flag = key < L && (all_masked || mrow == nullptr || mrow[key] != 0);
    }
  };
  auto store_k = [&]() {
#pragma unroll
    for (int i = 0; i < kKPerThread; ++i) {
      const int key = (tid & 31) + 32 * (i & 1), c = (tid >> 5) + 4 * (i >> 1);
      sKt[(4 * c + 0) * kKeys + key] = kreg[i].x;
      sKt[(4 * c + 1) * kKeys + key] = kreg[i].y;
      sKt[(4 * c + 2) * kKeys + key] = kreg[i].z;
      sKt[(4 * c + 3) * kKeys + key] = kreg[i].w;
    }
    if (tid < kKeys) sFlag[tid] = flag;
  };
  // A V tile by cp.async (zeros past L).
  auto fetch_v = [&](int tile) {
    const int k0 = tile * kKeys;
#pragma unroll
    for (int i = 0; i < kKPerThread; ++i) {
      const int flat = tid + kThreads * i, key = flat / kChunks, c = flat % kChunks;
      const bool valid = k0 + key < L;
      copy4_async(sV + key * D + 4 * c, valid ? gv + static_cast<int64_t>(k0 + key) * rs + 4 * c : gv, valid, vec);
    }
    cp_async_commit();
  };

  fetch_k(0);
  store_k();
  __syncthreads();

  const int nk = (L + kKeys - 1) / kKeys;
  const uint64_t head_base = static_cast<uint64_t>(bh) * static_cast<uint64_t>(L) * static_cast<uint64_t>(L);
  float o[8][4 * kDC];
#pragma unroll
  for (int r = 0; r < 8; ++r)
#pragma unroll
    for (int c = 0; c < 4 * kDC; ++c) o[r][c] = 0.0f;
  float m[8], l[8];  // running max (base-2 scores) and this thread's part of the running sum, per row
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }

  for (int jt = 0; jt < nk; ++jt) {
    const int k0 = jt * kKeys;
    fetch_v(jt);

    // This tile's dropout mask first, while few registers are live: bit 8r + c
    // for s[r][c] below. Keys 4·cg + {0..3} (+ 32) of a row are one run.
    uint64_t keep = ~uint64_t{0};
    if constexpr (kDropout) {
      keep = 0;
#pragma unroll 4  // eight independent generator calls at a time (registers)
      for (int r = 0; r < 8; ++r) {
        const int row = q0 + 64 * (r >> 2) + 4 * rg + (r & 3);
        const uint64_t base = head_base + static_cast<uint64_t>(row) * static_cast<uint64_t>(L) +
                              static_cast<uint64_t>(k0 + 4 * cg);
        const uint32_t bits = keep_run4(p.dropout, base) | keep_run4(p.dropout, base + 32) << 4;
        keep |= static_cast<uint64_t>(bits) << (8 * r);
      }
    }

    // S = Q·Kᵀ: rows 64·(r >> 2) + 4·rg + (r & 3), keys 32·(c >> 2) + 4·cg + (c & 3).
    float s[8][8];
#pragma unroll
    for (int r = 0; r < 8; ++r)
#pragma unroll
      for (int c = 0; c < 8; ++c) s[r][c] = 0.0f;
    {
      // Software-pipelined: the operands of step d + 1 are loaded while step d's products run.
      const float* qp = sQt + 4 * rg;
      const float* kp = sKt + 4 * cg;
      float4 qa = lds4(qp), qb = lds4(qp + 64), ka = lds4(kp), kb = lds4(kp + 32);
#pragma unroll 2
      for (int d = 0; d < D; ++d) {
        const int dn = (d + 1) & (D - 1);  // the last step reloads step 0 (unused)
        const float4 na = lds4(qp + dn * kFwdRows), nb = lds4(qp + dn * kFwdRows + 64);
        const float4 ma = lds4(kp + dn * kKeys), mb = lds4(kp + dn * kKeys + 32);
        const float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
        const float kv[8] = {ka.x, ka.y, ka.z, ka.w, kb.x, kb.y, kb.z, kb.w};
#pragma unroll
        for (int r = 0; r < 8; ++r)
#pragma unroll
          for (int c = 0; c < 8; ++c) s[r][c] = fmaf(qv[r], kv[c], s[r][c]);
        qa = na;
        qb = nb;
        ka = ma;
        kb = mb;
      }
    }

    // Scale to base 2, mask (keys past L and masked keys -inf; an entry with
    // every key masked has all scores 0), the new running max of each row
    // (over the 8 lanes of the row group), rescale, exponentiate.
    const int4 fa = *reinterpret_cast<const int4*>(sFlag + 4 * cg);
    const int4 fb = *reinterpret_cast<const int4*>(sFlag + 32 + 4 * cg);
    const int fl[8] = {fa.x, fa.y, fa.z, fa.w, fb.x, fb.y, fb.z, fb.w};
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      float mx = m[r];
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const float x = fl[c] ? (all_masked ? 0.0f : s[r][c] * p.scale_log2) : -INFINITY;
        s[r][c] = x;
        mx = fmaxf(mx, x);
      }
      mx = fmaxf(mx, shfl_xor(mx, 1));
      mx = fmaxf(mx, shfl_xor(mx, 4));
      mx = fmaxf(mx, shfl_xor(mx, 8));
      // A row with no kept key so far has max -inf: subtract 0 instead (its
      // exponentials are 0 anyway), so that no -inf - -inf = NaN appears.
      const float ref = mx == -INFINITY ? 0.0f : mx;
      const float alpha = fast_exp2(m[r] - ref);
      m[r] = mx;
      l[r] *= alpha;
#pragma unroll
      for (int c = 0; c < 4 * kDC; ++c) o[r][c] *= alpha;
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const float e = fast_exp2(s[r][c] - ref);
        l[r] += e;  // the softmax sum is over undropped probabilities
        s[r][c] = e;
      }
    }
    if constexpr (kDropout) {
      // Dropped elements become 0; kept ones are scaled by 1/(1-p) once, at the end.
#pragma unroll
      for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c)
          if (((keep >> (8 * r + c)) & 1u) == 0) s[r][c] = 0.0f;
    }
    // Pᵀ to shared memory: key j, rows 64·hr + 4·rg + {0..3} as one 16-byte store.
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const int j = 32 * (c >> 2) + 4 * cg + (c & 3);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
        sts4(sPt + j * kLdP + 64 * hr + 4 * rg,
             make_float4(s[4 * hr][c], s[4 * hr + 1][c], s[4 * hr + 2][c], s[4 * hr + 3][c]));
    }

    if (jt + 1 < nk) fetch_k(jt + 1);  // lands while P·V runs
    cp_async_wait_all();
    __syncthreads();  // Pᵀ and V visible; every warp done with Kᵀ

    // O += P·V: rows as S, columns 32·hd + 4·cg + {0..3}.
    {
      // Software-pipelined as S.
      const float* pp = sPt + 4 * rg;
      const float* vp = sV + 4 * cg;
      float4 pa = lds4(pp), pb = lds4(pp + 64), va[kDC];
#pragma unroll
      for (int hd = 0; hd < kDC; ++hd) va[hd] = lds4(vp + 32 * hd);
#pragma unroll 2
      for (int j = 0; j < kKeys; ++j) {
        const int jn = (j + 1) & (kKeys - 1);  // the last step reloads step 0 (unused)
        const float4 na = lds4(pp + jn * kLdP), nb = lds4(pp + jn * kLdP + 64);
        float4 nv[kDC];
#pragma unroll
        for (int hd = 0; hd < kDC; ++hd) nv[hd] = lds4(vp + jn * D + 32 * hd);
        const float pv[8] = {pa.x, pa.y, pa.z, pa.w, pb.x, pb.y, pb.z, pb.w};
#pragma unroll
        for (int r = 0; r < 8; ++r)
#pragma unroll
          for (int hd = 0; hd < kDC; ++hd) {
            o[r][4 * hd] = fmaf(pv[r], va[hd].x, o[r][4 * hd]);
            o[r][4 * hd + 1] = fmaf(pv[r], va[hd].y, o[r][4 * hd + 1]);
            o[r][4 * hd + 2] = fmaf(pv[r], va[hd].z, o[r][4 * hd + 2]);
            o[r][4 * hd + 3] = fmaf(pv[r], va[hd].w, o[r][4 * hd + 3]);
          }
        pa = na;
        pb = nb;
#pragma unroll
        for (int hd = 0; hd < kDC; ++hd) va[hd] = nv[hd];
      }
    }
    if (jt + 1 < nk) store_k();
    __syncthreads();  // next Kᵀ visible; every warp done with Pᵀ and V
  }

  // Row sums over the 8 lanes of the row group (a butterfly: every lane gets
  // the same bits), normalise, write ctx and the log-sum-exp (natural log).
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    l[r] += shfl_xor(l[r], 1);
    l[r] += shfl_xor(l[r], 4);
    l[r] += shfl_xor(l[r], 8);
  }
  float* gctx = p.ctx + off;
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int row = q0 + 64 * (r >> 2) + 4 * rg + (r & 3);
    if (row >= L) continue;
    // Every row has a kept key (or attends uniformly), so l >= 1.
    const float inv = p.keep_scale / l[r];
#pragma unroll
    for (int hd = 0; hd < kDC; ++hd)
      store4(gctx + static_cast<int64_t>(row) * rs + 32 * hd + 4 * cg,
             make_float4(o[r][4 * hd] * inv, o[r][4 * hd + 1] * inv, o[r][4 * hd + 2] * inv, o[r][4 * hd + 3] * inv),
             vec);
    if (cg == 0) p.lse[static_cast<int64_t>(bh) * L + row] = (m[r] + log2f(l[r])) * kLn2;
  }
}

// ---------------------------------------------------------------------------
// Backward.
// ---------------------------------------------------------------------------

// Δ[b, h, t] = Σ_d dO[b, t, h, d] · O[b, t, h, d]: the row term of the softmax
// backward (Σ_j P∘dP = dO·O, also with dropout, O being the dropped
// probabilities times V). D/4 lanes per row, 4 elements each, summed by a
// butterfly of fixed shape.
template <int D>
__global__ void __launch_bounds__(256) f32_row_dot_kernel(const float* dout, const float* out, float* delta,
                                                          int64_t rows, int L, int heads, bool vec) {
  constexpr int G = D / 4;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = gid / G;  // (b*L + t)*heads + h, memory order
  const int part = static_cast<int>(gid % G);
  float acc = 0.0f;
  if (row < rows) {
    const float4 x = load4(dout + row * D + 4 * part, vec), y = load4(out + row * D + 4 * part, vec);
    acc = x.x * y.x;
    acc = fmaf(x.y, y.y, acc);
    acc = fmaf(x.z, y.z, acc);
    acc = fmaf(x.w, y.w, acc);
  }
#pragma unroll
  for (int o = G / 2; o > 0; o /= 2) acc += shfl_xor(acc, o);
  if (row < rows && part == 0) {
    const int64_t h = row % heads, bt = row / heads, t = bt % L, b = bt / L;
    delta[(b * heads + h) * L + t] = acc;
  }
}

struct BwdParams {
  const float* q;
  const float* k;
  const float* v;
  const float* dout;
  const int64_t* mask;
  const float* lse;
  const float* delta;  // [B*heads, L]
  float* dq_part;      // [splits][B, L, heads*D]
  float* dk;
  float* dv;
  int64_t part_stride;  // B*L*heads*D
  int64_t grad_rs;      // elements from one token's dq (dk, dv) to the next: heads*D, or 3·heads*D interleaved
  int L, heads, splits;
  float scale_log2, scale;
  float keep_scale;  // 1/(1-p), or 1 without dropout
  bool vec;
  DropoutKeys dropout;
};

// Kᵀ [D][68], Vᵀ [D][64], Q and dO [64][D + 4], P∘keep and dS [64][68]; lse·log2e and Δ [64].
template <int D>
constexpr int bwd_smem_bytes() {
  return (D * kLdKt + D * kKeys + 2 * kBwdRows * (D + 4) + 2 * kBwdRows * kLdS + 2 * kBwdRows) * 4;
}

// acc[4·j + a][e] += Σ_q x[q·kLdS + 4·(kTpg·j) + a] · y[q·ldy + e] over the 64
// queries of a backward step (dV += (P∘keep)ᵀ·dO, dK += dSᵀ·Q): x and y point at
// this thread's first column; kNkg groups of 4 keys, kTpg = 16 / kNkg groups
// apart. Software-pipelined: query q + 1's operands load while q's products run.
template <int kNkg>
__device__ __forceinline__ void rank_update(float (&acc)[4 * kNkg][4], const float* x, const float* y, int ldy) {
  constexpr int kTpg = 16 / kNkg;
  float4 xv[kNkg], yv = lds4(y);
#pragma unroll
  for (int j = 0; j < kNkg; ++j) xv[j] = lds4(x + 4 * kTpg * j);
#pragma unroll 4
  for (int q = 0; q < kBwdRows; ++q) {
    const int qn = (q + 1) & (kBwdRows - 1);  // the last step reloads query 0 (unused)
    float4 xn[kNkg];
#pragma unroll
    for (int j = 0; j < kNkg; ++j) xn[j] = lds4(x + qn * kLdS + 4 * kTpg * j);
    const float4 yn = lds4(y + qn * ldy);
#pragma unroll
    for (int j = 0; j < kNkg; ++j)
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[4 * j + a][e] = fmaf(comp(xv[j], a), comp(yv, e), acc[4 * j + a][e]);
#pragma unroll
    for (int j = 0; j < kNkg; ++j) xv[j] = xn[j];
    yv = yn;
  }
}

template <int D, bool kDropout>
__global__ void __launch_bounds__(kThreads, 2) f32_bwd_kernel(const BwdParams p) {
  constexpr int kChunks = D / 4;
  constexpr int kLdQ = D + 4;           // ≡ 4 (mod 32): 8 consecutive rows at one column hit 8 distinct bank quads
  constexpr int kTpg = 512 / D;         // dK/dV: lanes per d group (8 or 16), i.e. key groups of 4 per pass
  constexpr int kNkg = 16 / kTpg;       // dK/dV: key groups of 4 per thread (2 or 1)
  constexpr int kNd = D / 8;            // dQ: d's per thread (8 or 4), 8 apart
  static_assert(D == 32 || D == 64, "head size");
  extern __shared__ __align__(16) unsigned char smem[];
  float* sKt = reinterpret_cast<float*>(smem);  // [D][kLdKt]
  float* sVt = sKt + D * kLdKt;                 // [D][kKeys]
  float* sQ = sVt + D * kKeys;                  // [64][kLdQ]
  float* sdO = sQ + kBwdRows * kLdQ;            // [64][kLdQ]
  float* sP = sdO + kBwdRows * kLdQ;            // [64 queries][kLdS]: P∘keep
  float* sdS = sP + kBwdRows * kLdS;            // [64 queries][kLdS]: dS (without the scale)
  float* sLse = sdS + kBwdRows * kLdS;          // [64]: lse·log2e, 0 past L
  float* sDelta = sLse + kBwdRows;              // [64]: Δ, 0 past L

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // Sᵀ, dPᵀ (and dQ): key group kg (keys 32·ha + 4·kg + {0..3}, ha = 0, 1), or
  // d's kg + 8·i for dQ; queries qg + 16·bq (bq = 0..3).
  const int kg = lane & 7, qg = (lane >> 3) + 4 * warp;
  // dK, dV: keys 4·(kgi + kTpg·j) + {0..3} (j < kNkg), d's 4·dgrp + {0..3}.
  const int kgi = lane % kTpg, dgrp = lane / kTpg + (32 / kTpg) * warp;
  const int L = p.L;
  const int split = blockIdx.x;
  const int bh = blockIdx.y, b = bh / p.heads, h = bh - b * p.heads;
  const int64_t rs = static_cast<int64_t>(p.heads) * D;
  const int64_t off = static_cast<int64_t>(b) * L * rs + static_cast<int64_t>(h) * D;
  const float* gq = p.q + off;
  const float* gk = p.k + off;
  const float* gv = p.v + off;
  const float* gdo = p.dout + off;
  const int64_t goff = static_cast<int64_t>(b) * L * p.grad_rs + static_cast<int64_t>(h) * D;  // into dk, dv
  const float* glse = p.lse + static_cast<int64_t>(bh) * L;
  const float* gdelta = p.delta + static_cast<int64_t>(bh) * L;
  float* part = p.dq_part + static_cast<int64_t>(split) * p.part_stride + off;
  const int64_t* mrow = p.mask ? p.mask + static_cast<int64_t>(b) * L : nullptr;
  const bool all_masked = !any_key_kept(mrow, L);
  const bool vec = p.vec;
  const uint64_t head_base = static_cast<uint64_t>(bh) * static_cast<uint64_t>(L) * static_cast<uint64_t>(L);
  const int nt = (L + kKeys - 1) / kKeys;  // key tiles = query tiles (64 each)

  // Q and dO rows of query tile `tile` (zeros past L), asynchronously when aligned.
  auto load_rows = [&](float* dst, const float* g, int tile) {
    const int q0 = tile * kBwdRows;
#pragma unroll
    for (int i = 0; i < kBwdRows * kChunks / kThreads; ++i) {
      const int flat = tid + kThreads * i, r = flat / kChunks, c = flat % kChunks;
      const bool valid = q0 + r < L;
      copy4_async(dst + r * kLdQ + 4 * c, valid ? g + static_cast<int64_t>(q0 + r) * rs + 4 * c : g, valid, vec);
    }
  };
  // This thread's value of the lse (threads 0..63) or Δ (64..127) row of query tile `tile`.
  auto row_value = [&](int tile) {
    const int i = tid & (kBwdRows - 1), q = tile * kBwdRows + i;
    if (q >= L) return 0.0f;  // rows past L: lse = Δ = 0 with q = dO = 0, so they add nothing
    return tid < kBwdRows ? glse[q] * kLog2e : gdelta[q];
  };
  auto store_row_value = [&](float x) {
    if (tid < kBwdRows)
      sLse[tid] = x;
    else
      sDelta[tid - kBwdRows] = x;
  };

  int pass = 0;
  for (int kt = split; kt < nt; kt += p.splits, ++pass) {
    const int k0 = kt * kKeys;
    // Kᵀ and Vᵀ of this key tile (the previous pass's readers finished at its last barrier).
    {
      const int key = tid & (kKeys - 1), c0 = tid / kKeys;  // a warp's 32 keys fill the 32 banks
      const bool valid = k0 + key < L;
      const float* ks = gk + (valid ? static_cast<int64_t>(k0 + key) * rs : 0);
      const float* vs = gv + (valid ? static_cast<int64_t>(k0 + key) * rs : 0);
#pragma unroll
      for (int i = 0; i < kChunks / 2; ++i) {
        const int c = c0 + 2 * i;
        const float4 x = valid ? load4(ks + 4 * c, vec) : zero4();
        const float4 y = valid ? load4(vs + 4 * c, vec) : zero4();
        sKt[(4 * c + 0) * kLdKt + key] = x.x;
        sKt[(4 * c + 1) * kLdKt + key] = x.y;
        sKt[(4 * c + 2) * kLdKt + key] = x.z;
        sKt[(4 * c + 3) * kLdKt + key] = x.w;
        sVt[(4 * c + 0) * kKeys + key] = y.x;
        sVt[(4 * c + 1) * kKeys + key] = y.y;
        sVt[(4 * c + 2) * kKeys + key] = y.z;
        sVt[(4 * c + 3) * kKeys + key] = y.w;
      }
    }
    // Which of this thread's 8 Sᵀ keys are kept (bit 4·ha + a).
    uint32_t kept = 0;
#pragma unroll
    for (int ki = 0; ki < 8; ++ki) {
      const int key = k0 + 32 * (ki >> 2) + 4 * kg + (ki & 3);
      const bool ok = key < L && (all_masked || mrow == nullptr || mrow[key] != 0);
      kept |= static_cast<uint32_t>(ok) << ki;
    }
    load_rows(sQ, gq, 0);
    load_rows(sdO, gdo, 0);
    cp_async_commit();
    store_row_value(row_value(0));
    cp_async_wait_all();
    __syncthreads();

    float dk[4 * kNkg][4], dv[4 * kNkg][4];  // [key 4·j + a][d e]
#pragma unroll
    for (int i = 0; i < 4 * kNkg; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.0f;

    for (int it = 0; it < nt; ++it) {
      const int q0 = it * kBwdRows;
      const bool more = it + 1 < nt;
      const float next_row_value = more ? row_value(it + 1) : 0.0f;  // stored once the current one is used

      // The forward's dropout mask for this thread's elements first, while few
      // registers are live: bit ki + 8·bq for s[ki][bq] below. Keys
      // 4·kg + {0..3} (+ 32) of a query are one run.
      uint32_t keep = 0xFFFFFFFFu;
      if constexpr (kDropout) {
        keep = 0;
#pragma unroll
        for (int bq = 0; bq < 4; ++bq) {
          const uint64_t base = head_base + static_cast<uint64_t>(q0 + qg + 16 * bq) * static_cast<uint64_t>(L) +
                                static_cast<uint64_t>(k0 + 4 * kg);
          keep |= (keep_run4(p.dropout, base) | keep_run4(p.dropout, base + 32) << 4) << (8 * bq);
        }
      }

      // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: key 32·(ki >> 2) + 4·kg + (ki & 3), query qg + 16·bq.
      float s[8][4], dp[8][4];
#pragma unroll
      for (int ki = 0; ki < 8; ++ki)
#pragma unroll
        for (int bq = 0; bq < 4; ++bq) s[ki][bq] = dp[ki][bq] = 0.0f;
#pragma unroll 2
      for (int d0 = 0; d0 < D; d0 += 4) {
        float4 qv[4];
#pragma unroll
        for (int bq = 0; bq < 4; ++bq) qv[bq] = lds4(sQ + (qg + 16 * bq) * kLdQ + d0);
#pragma unroll
        for (int dd = 0; dd < 4; ++dd) {
          const float4 ka = lds4(sKt + (d0 + dd) * kLdKt + 4 * kg), kb = lds4(sKt + (d0 + dd) * kLdKt + 32 + 4 * kg);
          const float kv[8] = {ka.x, ka.y, ka.z, ka.w, kb.x, kb.y, kb.z, kb.w};
#pragma unroll
          for (int ki = 0; ki < 8; ++ki)
#pragma unroll
            for (int bq = 0; bq < 4; ++bq) s[ki][bq] = fmaf(kv[ki], comp(qv[bq], dd), s[ki][bq]);
        }
      }
#pragma unroll 2
      for (int d0 = 0; d0 < D; d0 += 4) {
        float4 ov[4];
#pragma unroll
        for (int bq = 0; bq < 4; ++bq) ov[bq] = lds4(sdO + (qg + 16 * bq) * kLdQ + d0);
#pragma unroll
        for (int dd = 0; dd < 4; ++dd) {
          const float4 va = lds4(sVt + (d0 + dd) * kKeys + 4 * kg), vb = lds4(sVt + (d0 + dd) * kKeys + 32 + 4 * kg);
          const float vv[8] = {va.x, va.y, va.z, va.w, vb.x, vb.y, vb.z, vb.w};
#pragma unroll
          for (int ki = 0; ki < 8; ++ki)
#pragma unroll
            for (int bq = 0; bq < 4; ++bq) dp[ki][bq] = fmaf(vv[ki], comp(ov[bq], dd), dp[ki][bq]);
        }
      }

      // P = exp2(S·scale·log2e − lse·log2e) (0 for masked keys; S = 0 in an
      // entry with every key masked), dS = P∘(dP∘keep/(1-p) − Δ); s becomes
      // P∘keep (1/(1-p) applied to dV at the end), dp becomes dS.
#pragma unroll
      for (int bq = 0; bq < 4; ++bq) {
        const int qr = qg + 16 * bq;
        const float lse2 = sLse[qr], delta = sDelta[qr];
#pragma unroll
        for (int ki = 0; ki < 8; ++ki) {
          const float x = all_masked ? 0.0f : s[ki][bq] * p.scale_log2;
          const float pr = ((kept >> ki) & 1u) ? fast_exp2(x - lse2) : 0.0f;
          float dpv = dp[ki][bq];
          float pk = pr;
          if constexpr (kDropout) {
            const bool kk = (keep >> (ki + 8 * bq)) & 1u;
            dpv = kk ? dpv * p.keep_scale : 0.0f;
            pk = kk ? pr : 0.0f;
          }
          s[ki][bq] = pk;
          dp[ki][bq] = pr * (dpv - delta);
        }
#pragma unroll
        for (int ha = 0; ha < 2; ++ha) {
          sts4(sP + qr * kLdS + 32 * ha + 4 * kg,
               make_float4(s[4 * ha][bq], s[4 * ha + 1][bq], s[4 * ha + 2][bq], s[4 * ha + 3][bq]));
          sts4(sdS + qr * kLdS + 32 * ha + 4 * kg,
               make_float4(dp[4 * ha][bq], dp[4 * ha + 1][bq], dp[4 * ha + 2][bq], dp[4 * ha + 3][bq]));
        }
      }
      __syncthreads();  // P∘keep and dS visible

      // dV += (P∘keep)ᵀ·dO.
      rank_update<kNkg>(dv, sP + 4 * kgi, sdO + 4 * dgrp, kLdQ);
      __syncthreads();  // every warp done with dO: the next tile's may come in
      if (more) {
        load_rows(sdO, gdo, it + 1);
        cp_async_commit();
      }

      // dK += dSᵀ·Q (the scale applied at the end).
      rank_update<kNkg>(dk, sdS + 4 * kgi, sQ + 4 * dgrp, kLdQ);
      __syncthreads();  // every warp done with Q and the lse/Δ rows
      if (more) {
        load_rows(sQ, gq, it + 1);
        cp_async_commit();
        store_row_value(next_row_value);
      }

      // This key tile's part of dQ = dS·K: queries qg + 16·bq, d's kg + 8·i.
      // Later passes add to the partial this thread wrote in the earlier ones
      // (loaded first, added last, so the loads wait behind the products).
      float prev[4][kNd];
      if (pass > 0) {
#pragma unroll
        for (int bq = 0; bq < 4; ++bq) {
          const int q = q0 + qg + 16 * bq;
#pragma unroll
          for (int i = 0; i < kNd; ++i)
            prev[bq][i] = q < L ? part[static_cast<int64_t>(q) * rs + kg + 8 * i] : 0.0f;
        }
      }
      float acc[4][kNd];
#pragma unroll
      for (int bq = 0; bq < 4; ++bq)
#pragma unroll
        for (int i = 0; i < kNd; ++i) acc[bq][i] = 0.0f;
#pragma unroll 2
      for (int j0 = 0; j0 < kKeys; j0 += 4) {
        float4 a4[4], k4[kNd];
#pragma unroll
        for (int bq = 0; bq < 4; ++bq) a4[bq] = lds4(sdS + (qg + 16 * bq) * kLdS + j0);
#pragma unroll
        for (int i = 0; i < kNd; ++i) k4[i] = lds4(sKt + (kg + 8 * i) * kLdKt + j0);
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
#pragma unroll
          for (int bq = 0; bq < 4; ++bq)
#pragma unroll
            for (int i = 0; i < kNd; ++i) acc[bq][i] = fmaf(comp(a4[bq], jj), comp(k4[i], jj), acc[bq][i]);
      }
#pragma unroll
      for (int bq = 0; bq < 4; ++bq) {
        const int q = q0 + qg + 16 * bq;
        if (q >= L) continue;
#pragma unroll
        for (int i = 0; i < kNd; ++i)
          part[static_cast<int64_t>(q) * rs + kg + 8 * i] = pass > 0 ? prev[bq][i] + acc[bq][i] : acc[bq][i];
      }
      cp_async_wait_all();
      __syncthreads();  // next Q, dO, lse, Δ visible; every warp done with dS
    }

    // dK = scale · Σ dSᵀQ, dV = 1/(1-p) · Σ (P∘keep)ᵀdO for this thread's keys.
#pragma unroll
    for (int j = 0; j < kNkg; ++j) {
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        const int key = k0 + 4 * (kgi + kTpg * j) + a;
        if (key >= L) continue;
        const int i = 4 * j + a;
        const int64_t at = static_cast<int64_t>(key) * p.grad_rs + 4 * dgrp;
        store4(p.dk + goff + at,
               make_float4(dk[i][0] * p.scale, dk[i][1] * p.scale, dk[i][2] * p.scale, dk[i][3] * p.scale), vec);
        store4(p.dv + goff + at,
               make_float4(dv[i][0] * p.keep_scale, dv[i][1] * p.keep_scale, dv[i][2] * p.keep_scale,
                           dv[i][3] * p.keep_scale),
               vec);
      }
    }
  }
}

// dq[i] = scale · Σ_split partial[split][i], splits in order; 4 elements per
// thread. The partials are rows of `width` (heads·D) floats; dq's rows are
// `dq_rs` apart (width, or 3·width when interleaved with dk and dv).
__global__ void __launch_bounds__(256) f32_dq_sum_kernel(const float* part, float* dq, int64_t n, int64_t width,
                                                         int64_t dq_rs, int splits, float scale, bool vec) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i >= n) return;  // n and width are multiples of 4 (D is)
  float4 sum = load4(part + i, vec);
  for (int s = 1; s < splits; ++s) {
    const float4 x = load4(part + s * n + i, vec);
    sum.x += x.x;
    sum.y += x.y;
    sum.z += x.z;
    sum.w += x.w;
  }
  const int64_t row = i / width;
  store4(dq + row * dq_rs + (i - row * width), make_float4(sum.x * scale, sum.y * scale, sum.z * scale, sum.w * scale),
         vec);
}

// ---------------------------------------------------------------------------
// Host side.
// ---------------------------------------------------------------------------

// Splits of the key tiles in the backward: about kTargetBlocks blocks, each
// with the same number of key tiles. A function of the shapes only, in
// cuda_memory.h since the scratch depends on it.
int64_t backward_splits(int64_t bh, int64_t L) { return flash_f32_backward_splits(bh, L); }

bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* ptr : ptrs)
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  return true;
}

void check_args(const char* what, int64_t B, int64_t L, int64_t heads, int64_t D, const DropoutSpec& dropout) {
  if (!flash_attention_f32_supported(D)) fail("{}: head size {} is not supported (32 or 64)", what, D);
  if (L > (int64_t{1} << 24) || B * heads > 65535 || B * L * heads * D >= (int64_t{1} << 40))
    fail("{}: shape B={} L={} heads={} too large", what, B, L, heads);
  check_attention_dropout(what, dropout.p);
}

template <int D, bool kDropout>
void launch_forward(cudaStream_t s, const FwdParams& p, int64_t B) {
  constexpr int bytes = fwd_smem_bytes<D>();
  auto kernel = f32_fwd_kernel<D, kDropout>;
  static std::atomic<uint64_t> configured{0};
  configure_shared_memory(kernel, bytes, configured);
  const dim3 grid(static_cast<unsigned>((p.L + kFwdRows - 1) / kFwdRows), static_cast<unsigned>(B * p.heads));
  kernel<<<grid, kThreads, bytes, s>>>(p);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

template <int D, bool kDropout>
void launch_backward(cudaStream_t s, const BwdParams& p, const float* dctx, const float* ctx, float* delta, float* dq,
                     int64_t B) {
  const int64_t rows = B * p.L * p.heads;
  {
    auto kernel = f32_row_dot_kernel<D>;
    const unsigned blocks = static_cast<unsigned>((rows * (D / 4) + 255) / 256);
    kernel<<<blocks, 256, 0, s>>>(dctx, ctx, delta, rows, p.L, p.heads, p.vec);
    ANATOMY_CUDA_CHECK(cudaGetLastError());
  }
  {
    constexpr int bytes = bwd_smem_bytes<D>();
    auto kernel = f32_bwd_kernel<D, kDropout>;
    static std::atomic<uint64_t> configured{0};
    configure_shared_memory(kernel, bytes, configured);
    const dim3 grid(static_cast<unsigned>(p.splits), static_cast<unsigned>(B * p.heads));
    kernel<<<grid, kThreads, bytes, s>>>(p);
    ANATOMY_CUDA_CHECK(cudaGetLastError());
  }
  {
    auto kernel = f32_dq_sum_kernel;
    const unsigned blocks = static_cast<unsigned>((p.part_stride / 4 + 255) / 256);
    kernel<<<blocks, 256, 0, s>>>(p.dq_part, dq, p.part_stride, static_cast<int64_t>(p.heads) * D, p.grad_rs,
                                  p.splits, p.scale, p.vec);
    ANATOMY_CUDA_CHECK(cudaGetLastError());
  }
}

// Calls f.template operator()<D, kDropout>() for the runtime choices.
template <typename F>
void dispatch(int64_t D, bool dropout, F&& f) {
  auto with_d = [&]<int kD>() {
    if (dropout)
      f.template operator()<kD, true>();
    else
      f.template operator()<kD, false>();
  };
  if (D == 32)
    with_d.template operator()<32>();
  else
    with_d.template operator()<64>();
}

}  // namespace

void flash_attention_f32_forward(cudaStream_t s, const float* q, const float* k, const float* v,
                                 const int64_t* key_mask, int64_t B, int64_t L, int64_t heads, int64_t D, float scale,
                                 const DropoutSpec& dropout, float* ctx, float* lse) {
  if (B == 0 || L == 0 || heads == 0) return;
  check_args("flash_attention_f32_forward", B, L, heads, D, dropout);
  const bool use_dropout = dropout.p > 0.0f;  // the reference's test
  FwdParams p{};
  p.q = q;
  p.k = k;
  p.v = v;
  p.mask = key_mask;
  p.ctx = ctx;
  p.lse = lse;
  p.L = static_cast<int>(L);
  p.heads = static_cast<int>(heads);
  p.scale_log2 = scale * kLog2e;
  p.keep_scale = keep_scale_of(dropout);  // as the reference, in float
  p.vec = aligned16({q, k, v, ctx});
  p.dropout = make_dropout_keys(dropout);
  dispatch(D, use_dropout, [&]<int kD, bool kDrop>() { launch_forward<kD, kDrop>(s, p, B); });
}

void flash_attention_f32_backward(cudaStream_t s, const float* dctx, const float* q, const float* k, const float* v,
                                  const float* ctx, const float* lse, const int64_t* key_mask, int64_t B, int64_t L,
                                  int64_t heads, int64_t D, float scale, const DropoutSpec& dropout, float* dq,
                                  float* dk, float* dv, void* scratch, int64_t grad_row_stride) {
  if (B == 0 || L == 0 || heads == 0) return;
  if (grad_row_stride == 0) grad_row_stride = heads * D;
  ANATOMY_CHECK(grad_row_stride >= heads * D && grad_row_stride % 4 == 0,
                "flash_attention_f32_backward: gradient row stride {} for rows of {}", grad_row_stride, heads * D);
  check_args("flash_attention_f32_backward", B, L, heads, D, dropout);
  const bool use_dropout = dropout.p > 0.0f;
  const int64_t bh = B * heads;
  float* delta = static_cast<float*>(scratch);
  float* part = reinterpret_cast<float*>(static_cast<char*>(scratch) + flash_f32_delta_bytes(bh, L));
  BwdParams p{};
  p.q = q;
  p.k = k;
  p.v = v;
  p.dout = dctx;
  p.mask = key_mask;
  p.lse = lse;
  p.delta = delta;
  p.dq_part = part;
  p.dk = dk;
  p.dv = dv;
  p.part_stride = B * L * heads * D;
  p.grad_rs = grad_row_stride;
  p.L = static_cast<int>(L);
  p.heads = static_cast<int>(heads);
  p.splits = static_cast<int>(backward_splits(bh, L));
  p.scale_log2 = scale * kLog2e;
  p.scale = scale;
  p.keep_scale = keep_scale_of(dropout);
  p.vec = aligned16({dctx, q, k, v, ctx, dq, dk, dv, part});
  p.dropout = make_dropout_keys(dropout);
  dispatch(D, use_dropout, [&]<int kD, bool kDrop>() { launch_backward<kD, kDrop>(s, p, dctx, ctx, delta, dq, B); });
}

}  // namespace anatomy::cuda
