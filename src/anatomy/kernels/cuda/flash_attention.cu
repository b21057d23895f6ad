// flash_attention.cu: fused multi-head attention in bf16/fp16 with float32
// accumulation, forward and backward (FlashAttention-2, Dao 2023), as declared
// in flash_attention.cuh. Products run on tensor cores through mma.sync
// m16n8k16 (16-bit inputs, float accumulators) with operands fetched from
// shared memory by ldmatrix; tiles arrive by cp.async, double-buffered.
//
// Forward: one block of 4 warps per (128 query rows, batch entry, head) for
// D <= 64 (64 rows for D = 128); each warp owns 32 query rows (two m16
// tiles, so that every K and V fragment read from shared memory feeds two
// products), walks the key tiles of 64 keeping a running max and sum of its
// rows (online softmax), and accumulates P·V in registers. Writes ctx and the
// log-sum-exp of each row.
//
// Backward, two kernels: Δ = Σ_d dO·O per row (and lse in base 2); the main
// kernel, one block per (split, batch entry, head) of 8 warps (4 for
// D = 128). A block owns whole key tiles of 128 keys (tile, tile + splits,
// ...): for each it keeps dK, dV of its keys in registers (warp w: keys
// 16w..16w+15) and walks every query tile of 64, recomputing Sᵀ = K·Qᵀ,
// Pᵀ = exp(Sᵀ − lse), dPᵀ = V·dOᵀ, dSᵀ = Pᵀ∘(dPᵀ − Δ); dSᵀ goes through
// shared memory for dQ = dS·K, shared out over all warps. dQ needs a sum over
// key tiles: when the float32 dQ of a whole (batch entry, head) fits in
// shared memory and there are enough of them to fill the GPU (BERT's
// shapes), a block owns a whole (batch entry, head), adds into shared memory
// in key-tile order and writes dq itself. Otherwise each split has its own
// float32 accumulator in scratch that only its block touches (read-add-write
// in a fixed order, the sums so far fetched by cp.async with each query tile;
// no atomics), and a third kernel adds the splits in split order. The choice
// and the number of splits depend only on the shapes, so results are
// bit-reproducible, on any device.
//
// Dropout's mask is the reference's, one Philox-4x32-10 call per four
// consecutive elements (core/random.h). A thread's accumulator elements are
// not four consecutive ones, so when L % 4 == 0 the lanes that own the
// elements of a call share it: in the forward a pair of lanes (each makes the
// calls of one of their two rows and passes the other lane its words by a
// shuffle), in the backward, where keys are the rows, a group of four lanes
// (each makes a quarter of the calls, three shuffles). That is one call per
// four elements: at B = 32, L = 512, 16 heads 34M per pass instead of 134M.
// For L % 4 != 0 (groups straddle rows) each element makes its own call, of
// which it uses one word. Even so the calls' 32x32 -> 64-bit multiplies
// (IMAD.WIDE, a slow pipe) are about 0.1 ms a pass on an H100, measured
// alone; they run in the same warps as the products, and the backward
// arranges its warps so that the two overlap (see the main kernel).
//
// With a window (ModernBERT's local layers, kWindow; no dropout), query i
// attends to the kept keys j with |i − j| <= window: a forward block visits
// only the key tiles within the window of its rows, a backward block only
// the query tiles within the window of its keys, and tiles that straddle the
// window's edge take the masked path with the distance test per element. A
// query with no kept key in its window attends uniformly to all L keys, as
// the reference does: the forward finds it by its max (still -inf after its
// window), writes the mean of V and lse +inf; the backward reads +inf as
// probability 1/L for every key and also visits the query tiles that hold
// such a row (a flag per tile, from the lse). dQ sums start from zero then.
//
// The reference (CPU backend) semantics: masked keys get probability exactly
// 0; a batch entry whose keys are all masked attends uniformly to all L keys,
// which here is "every score of that entry is 0" (a per-block flag), so that
// the gradients are those of a softmax at constant scores, as the reference's;
// dropout is the reference's mask, element (b*heads + h)*L*L + i*L + j.

#include "anatomy/kernels/cuda/flash_attention.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
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

constexpr int kTile = 64;      // keys per forward tile, query rows per backward tile
static_assert(kTile == kFlashTile, "cuda_memory.h sizes the backward's scratch with this tile");
constexpr int kThreads = 128;  // forward: 4 warps
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---------------------------------------------------------------------------
// Tensor-core and copy primitives (PTX).
// ---------------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ uint32_t pack2(float a, float b);

template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float a, float b) {
  __nv_bfloat162 v = __floats2bfloat162_rn(a, b);  // a in the low half: the lower column
  return *reinterpret_cast<uint32_t*>(&v);
}

template <>
__device__ __forceinline__ uint32_t pack2<__half>(float a, float b) {
  __half2 v = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}

// c (16x8, f32) += a (16x16, row) · b (16x8, col). Fragment layouts (PTX ISA,
// m16n8k16): lane = 4g + t; a = {A[g][2t..], A[g+8][2t..], A[g][2t+8..],
// A[g+8][2t+8..]}, b = {B[2t..][g], B[2t+8..][g]}, c = {C[g][2t], C[g][2t+1],
// C[g+8][2t], C[g+8][2t+1]}.
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 16-bit matrices; lanes 8i..8i+7 give the row addresses of matrix i,
// and register i receives, per lane 4g + t, row g, columns 2t and 2t+1 of it
// (with .trans: of its transpose).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// 16 bytes global -> shared, asynchronously; zeros when !valid (rows past L),
// so padded rows hold 0 and never NaN garbage (0 · NaN would poison sums).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
// 4 or 8 bytes, through L1 (cp.async takes sizes under 16 only with .ca).
template <int kBytes>
__device__ __forceinline__ void cp_async_small(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(smem)), "l"(gmem), "n"(kBytes),
               "r"(valid ? kBytes : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---------------------------------------------------------------------------
// Fragment addressing in a row-major shared tile of stride `ld` elements.
// The +8 padding of every row (ld = D + 8) puts the 8 rows an ldmatrix reads
// in distinct banks.
// ---------------------------------------------------------------------------

// A operand (16x16 at row r0, column c0), A = X.
template <typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* x, int ld, int r0, int c0, int lane) {
  ldsm_x4(a, x + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + c0 + (lane >> 4) * 8);
}
// A operand where A[m][k] = X[k][m] (X stored k-major): rows k0.., columns m0..
template <typename T>
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], const T* x, int ld, int k0, int m0, int lane) {
  ldsm_x4_trans(a, x + (k0 + (lane & 7) + (lane >> 4) * 8) * ld + m0 + ((lane >> 3) & 1) * 8);
}
// B operands of two n-tiles (n0, n0+8) over k0..k0+15 where B[k][n] = X[n][k]
// (X row-major by n): {b0, b1} of tile n0, {b2, b3} of tile n0+8.
template <typename T>
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const T* x, int ld, int n0, int k0, int lane) {
  ldsm_x4(b, x + (n0 + (lane & 7) + (lane >> 4) * 8) * ld + k0 + ((lane >> 3) & 1) * 8);
}
// Same where B[k][n] = X[k][n] (X row-major by k).
template <typename T>
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const T* x, int ld, int k0, int n0, int lane) {
  ldsm_x4_trans(b, x + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8);
}

// kRows rows of D 16-bit values, starting at token row0 of one (batch, head),
// into a shared tile of stride D + 8, by kBy threads (tid < kBy). g points at
// token 0 of that head; rows are `rs` elements apart (heads*D).
template <typename T, int D, int kRows = kTile, int kBy = kThreads>
__device__ __forceinline__ void load_tile(T* sm, const T* g, int64_t rs, int row0, int L, int tid) {
  constexpr int kChunks = D / 8;                 // 16-byte pieces per row
  constexpr int kRowsPerPass = kBy / kChunks;
  static_assert(kBy % kChunks == 0 && kRows % kRowsPerPass == 0);
  const int r = tid / kChunks, col = (tid % kChunks) * 8;
  const T* src = g + static_cast<int64_t>(row0 + r) * rs + col;
  const int64_t step = static_cast<int64_t>(kRowsPerPass) * rs;
#pragma unroll
  for (int i = 0; i < kRows / kRowsPerPass; ++i) {
    const bool valid = row0 + r + i * kRowsPerPass < L;
    cp_async16(sm + (r + i * kRowsPerPass) * (D + 8) + col, valid ? src + i * step : g, valid);
  }
}

// fast_exp2, any_key_kept: attention_common.cuh.

// The dropout mask's generator: dropout_keys.cuh.

// share_pairs, share_quads, the dropout modes: attention_dropout.cuh.

// ---------------------------------------------------------------------------
// Forward.
// ---------------------------------------------------------------------------

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  const int64_t* mask;
  void* ctx;
  float* lse;               // nullptr: not written (inference)
  const int64_t* offsets;   // packed sequences: entry b is rows offsets[b] .. offsets[b+1]; nullptr: [B, L]
  int L, heads;             // packed: L is the longest sequence
  float abs_scale_log2;  // |scale| · log2(e): scores in base 2, exp2 on the hardware unit
  uint32_t q_sign;       // 0x80008000 when scale < 0 (q's signs flipped instead), else 0
  int slow_tiles;        // 1: every key tile takes the masked path (scale == 0)
  int window;            // >= 0: keys within `window` of the query only (no dropout); < 0: every key
  float keep_scale;      // 1/(1-p), or 1 without dropout
  DropoutKeys dropout;
};

// Whether some (query, key) pair of rows [r0, r1] and keys [k0, k1] lies
// farther apart than the window, so that the tile needs the masked path.
__device__ __forceinline__ bool window_cuts(int r0, int r1, int k0, int k1, int window) {
  return window >= 0 && (r1 - k0 > window || k1 - r0 > window);
}

// Forward, 128 query rows per block (D <= 64; 64 for D = 128, where the
// accumulators of 32 rows would not fit in registers): each warp owns 32 rows
// as two m16 tiles, so that every K and V fragment fetched from shared memory
// feeds two products (with 16 rows a warp, ldmatrix traffic per product was
// twice as high). Key tiles of 64 with no key past L and no masked
// key (the usual case, found by the tile's barrier) skip the masking, and the
// scores stay unscaled until the exponential, which takes
// 2^(s·scale·log2e − max) as one FFMA. A negative scale is |scale| with the
// signs of q flipped (exact), so that the running max of the unscaled scores
// scales to the max of the scaled ones.
template <int D>
__host__ __device__ constexpr int fwd_mtiles() {
  return D <= 64 ? 2 : 1;
}
template <int D>
__host__ __device__ constexpr int fwd_rows() {
  return 4 * 16 * fwd_mtiles<D>();
}
template <int D>
__host__ __device__ constexpr int fwd_smem_bytes() {
  return (fwd_rows<D>() + 4 * kTile) * (D + 8) * 2 + 2 * kTile * static_cast<int>(sizeof(int64_t));
}

template <typename T, int D, int kDrop, bool kWindow>
__global__ void __launch_bounds__(kThreads, D <= 64 ? 2 : 1) flash_fwd_kernel(const FwdParams p) {
  static_assert(!kWindow || kDrop == kNoDrop, "no dropout with a window");
  constexpr int MT = fwd_mtiles<D>();
  constexpr int BM = fwd_rows<D>();
  constexpr int ld = D + 8;
  extern __shared__ __align__(16) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + BM * ld;         // 2 buffers
  T* sV = sK + 2 * kTile * ld;  // 2 buffers
  // 2 x 64 key-mask entries (0 past L), fetched with the keys.
  int64_t* sMask = reinterpret_cast<int64_t*>(sV + 2 * kTile * ld);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int bh = blockIdx.y, b = bh / p.heads, h = bh % p.heads;
  const int64_t first_row = p.offsets ? p.offsets[b] : static_cast<int64_t>(b) * p.L;
  const int L = p.offsets ? static_cast<int>(p.offsets[b + 1] - first_row) : p.L;
  const int q0 = blockIdx.x * BM;
  if (q0 >= L) return;  // packed: this sequence is shorter than the longest (the whole block leaves)
  const int64_t rs = static_cast<int64_t>(p.heads) * D;
  const int64_t off = first_row * rs + static_cast<int64_t>(h) * D;
  const T* gq = static_cast<const T*>(p.q) + off;
  const T* gk = static_cast<const T*>(p.k) + off;
  const T* gv = static_cast<const T*>(p.v) + off;
  const int64_t* mrow = p.mask ? p.mask + static_cast<int64_t>(b) * L : nullptr;
  // With a window a row without a kept key in it attends uniformly to all L
  // keys (found at the end, by its max); the entry-wide rule is not needed.
  constexpr bool windowed = kWindow;  // p.window >= 0
  const bool all_masked = !windowed && !any_key_kept(mrow, L);
  const bool always_slow = all_masked || p.slow_tiles != 0;

  auto load_kv = [&](int tile, int buf) {
    const int k0 = tile * kTile;
    load_tile<T, D>(sK + buf * kTile * ld, gk, rs, k0, L, tid);
    load_tile<T, D>(sV + buf * kTile * ld, gv, rs, k0, L, tid);
    if (mrow != nullptr && tid < kTile) cp_async_small<8>(sMask + buf * kTile + tid, mrow + k0 + tid, k0 + tid < L);
  };

  const int nk = (L + kTile - 1) / kTile;
  // The key tiles this block visits: all, or those within the window of its rows.
  const int jt_begin = windowed ? max(0, q0 - p.window) / kTile : 0;
  const int jt_end = windowed ? min(nk, (min(L - 1, q0 + BM - 1) + p.window) / kTile + 1) : nk;

#pragma unroll
  for (int i = 0; i < BM / kTile; ++i) load_tile<T, D>(sQ + i * kTile * ld, gq, rs, q0 + i * kTile, L, tid);
  load_kv(jt_begin, 0);
  cp_async_commit();

  // This thread's query rows: row(mt, r) = wrow + 16·mt + g + 8·r.
  const int wrow = q0 + warp * 16 * MT;
  // Dropout index of (row, key 0): (b*heads + h)*L*L + row*L.
  const uint64_t head_base = static_cast<uint64_t>(bh) * static_cast<uint64_t>(L) * static_cast<uint64_t>(L);
  auto drop_row = [&](int mt, int r) {
    return head_base + static_cast<uint64_t>(wrow + 16 * mt + g + 8 * r) * static_cast<uint64_t>(L);
  };

  uint32_t qa[MT][D / 16][4];
  float o[MT][D / 8][4];
  float m[MT][2], l[MT][2];  // running max of base-2 scores per row; this thread's part of the running sum
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }

  for (int jt = jt_begin; jt < jt_end; ++jt) {
    const int buf = (jt - jt_begin) & 1;
    // Tile jt has landed for every thread, and every warp is done with tile
    // jt - 1, whose buffer the next tile then fills while this one is used:
    // one barrier per tile, which also tells whether any of the tile's keys
    // is past L or masked.
    cp_async_wait<0>();
    int need = 0;
    if (tid < kTile) {
      const int key = jt * kTile + tid;
      need = key >= L || (mrow != nullptr && sMask[buf * kTile + tid] == 0);
    }
    const bool masked_tile =
        __syncthreads_or(need) != 0 || always_slow ||
        (windowed && window_cuts(q0, q0 + BM - 1, jt * kTile, jt * kTile + kTile - 1, p.window));
    if (jt + 1 < jt_end) {
      load_kv(jt + 1, buf ^ 1);
      cp_async_commit();
    }
    if (jt == jt_begin) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          load_a(qa[mt][kk], sQ, ld, warp * 16 * MT + mt * 16, kk * 16, lane);
#pragma unroll
          for (int j = 0; j < 4; ++j) qa[mt][kk][j] ^= p.q_sign;
        }
    }
    const T* ks = sK + buf * kTile * ld;
    const T* vs = sV + buf * kTile * ld;
    const int64_t* kmask = sMask + buf * kTile;

    // This tile's dropout mask first, while few registers are live: bit 4n + e
    // of keep[mt] is accumulator element s[mt][n][e] (row (mt, e >> 1), key
    // jt*64 + 8n + 2·t4 + (e & 1)). kDropGroups (L % 4 == 0): a lane pair
    // shares the calls (share_pairs), 8 per lane and m-tile, one per 4
    // elements; kDropEach: a call per element.
    uint32_t keep[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) keep[mt] = 0xffffffffu;
    if constexpr (kDrop == kDropGroups) {
      const int j = t4 & 1;  // this lane's calls: row (mt, j), keys 8n + 4·(t4 >> 1) + {0..3}
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint64_t c0 = (drop_row(mt, j) + static_cast<uint64_t>(jt * kTile + 4 * (t4 >> 1))) >> 2;
        uint32_t calls = 0u;
#pragma unroll
        for (int n = 0; n < 8; ++n) calls |= keep4(p.dropout, c0 + 2 * n) << (4 * n);
        keep[mt] = share_pairs(calls, j);
      }
    } else if constexpr (kDrop == kDropEach) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint64_t base_a = drop_row(mt, 0) + static_cast<uint64_t>(jt * kTile + 2 * t4);
        const uint64_t base_b = drop_row(mt, 1) + static_cast<uint64_t>(jt * kTile + 2 * t4);
        uint32_t bits = 0u;
#pragma unroll 4
        for (int i = 0; i < 32; ++i) {
          const int n = i >> 2, e = i & 3;
          const uint64_t idx = ((e >> 1) ? base_b : base_a) + static_cast<uint64_t>(n * 8 + (e & 1));
          bits |= static_cast<uint32_t>(keep_element(p.dropout, idx)) << i;
        }
        keep[mt] = bits;
      }
    }

    // S = Q·Kᵀ: 32 rows (two m-tiles) x 64 keys per warp; each K fragment feeds both m-tiles.
    float s[MT][8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bb[4];
        load_b_nk(bb, ks, ld, np * 16, kk * 16, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<T>(s[mt][2 * np], qa[mt][kk], bb[0], bb[1]);
          mma16816<T>(s[mt][2 * np + 1], qa[mt][kk], bb[2], bb[3]);
        }
      }
    }

    // Fast tiles keep the unscaled scores (cs = |scale|·log2e applied in the
    // exponential); masked tiles scale them here, -inf for keys past L and
    // masked keys (0 for all keys of an all-masked entry), and use cs = 1.
    float cs = p.abs_scale_log2;
    if (masked_tile) {
      cs = 1.0f;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = n * 8 + 2 * t4 + (e & 1);
          const int key = jt * kTile + col;
          const bool key_ok = key < L && (all_masked || mrow == nullptr || kmask[col] != 0);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const bool ok = key_ok && (!windowed || abs(wrow + 16 * mt + g + 8 * (e >> 1) - key) <= p.window);
            s[mt][n][e] = ok ? (all_masked ? 0.0f : s[mt][n][e] * p.abs_scale_log2) : -INFINITY;
          }
        }
      }
    }

    // The new running max (rows shared by the 4 lanes of a quad), in base-2 units.
    float ref[MT][2], alpha[MT][2];
    bool rescale = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < 8; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float new_m = fmaxf(m[mt][r], mx * cs);
        // A row whose keys so far are all masked has max -inf: subtract 0 instead
        // (its exponentials are 0 anyway) so that no -inf - -inf = NaN appears.
        ref[mt][r] = new_m == -INFINITY ? 0.0f : new_m;
        alpha[mt][r] = new_m == m[mt][r] ? 1.0f : fast_exp2(m[mt][r] - ref[mt][r]);
        rescale |= new_m != m[mt][r];
        m[mt][r] = new_m;
        l[mt][r] *= alpha[mt][r];
      }
    }
    // Rows whose max did not move keep their accumulators (alpha = 1 exactly);
    // after the first tiles that is most tiles, for the whole warp.
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
          o[mt][i][0] *= alpha[mt][0];
          o[mt][i][1] *= alpha[mt][0];
          o[mt][i][2] *= alpha[mt][1];
          o[mt][i][3] *= alpha[mt][1];
        }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pv = fast_exp2(fmaf(s[mt][n][e], cs, -ref[mt][e >> 1]));
          l[mt][e >> 1] += pv;  // the softmax sum is over undropped probabilities
          // Dropped elements become 0; kept ones are scaled by 1/(1-p) once, at the end.
          s[mt][n][e] = (kDrop == kNoDrop || ((keep[mt] >> (n * 4 + e)) & 1u)) ? pv : 0.0f;
        }
      }
    }

    // O += P·V: P's accumulator fragments are, pairwise, A fragments over 16
    // keys; each V fragment feeds both m-tiles.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        a[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t bb[4];
        load_b_kn(bb, vs, ld, kk * 16, dp * 16, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<T>(o[mt][2 * dp], a[mt], bb[0], bb[1]);
          mma16816<T>(o[mt][2 * dp + 1], a[mt], bb[2], bb[3]);
        }
      }
    }
  }

  // With a window, rows that met no kept key (max still -inf) attend
  // uniformly to all L keys: their context is the mean of V over the entry,
  // summed here in a fixed order (column c by the threads c, c + D, ...,
  // each over every (kThreads / D)-th key, then those partial sums in order).
  float* s_mean = reinterpret_cast<float*>(smem);  // [kThreads] partial sums, then [D] means
  bool uniform_rows = false;
  if constexpr (windowed) {
    bool mine = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) mine |= m[mt][r] == -INFINITY && wrow + 16 * mt + g + 8 * r < L;
    uniform_rows = __syncthreads_or(mine) != 0;  // also: every warp is done with sQ, sK, sV
    if (uniform_rows) {
      constexpr int kPhases = kThreads / D;
      const int c = tid % D, phase = tid / D;
      float sum = 0.0f;
      for (int j = phase; j < L; j += kPhases) sum += static_cast<float>(gv[static_cast<int64_t>(j) * rs + c]);
      s_mean[tid] = sum;
      __syncthreads();
      if (tid < D) {
        float total = 0.0f;
        for (int i = 0; i < kPhases; ++i) total += s_mean[i * D + tid];
        s_mean[kThreads + tid] = total / static_cast<float>(L);
      }
      __syncthreads();
    }
  }

  // Row sums across the quad, normalise, write ctx and the log-sum-exp.
  T* gctx = static_cast<T*>(p.ctx) + off;
  float* lse = p.lse ? p.lse + static_cast<int64_t>(bh) * L : nullptr;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 1);
      l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 2);
    }
    const int row_a = wrow + 16 * mt + g, row_b = row_a + 8;
    // Every row has at least one unmasked key (or attends uniformly), so l >= 1;
    // with a window, a row with none (max -inf) takes the mean of V.
    const bool uni_a = uniform_rows && m[mt][0] == -INFINITY, uni_b = uniform_rows && m[mt][1] == -INFINITY;
    const float inv_a = uni_a ? 0.0f : p.keep_scale / l[mt][0], inv_b = uni_b ? 0.0f : p.keep_scale / l[mt][1];
    const float* mean = s_mean + kThreads;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const int d = i * 8 + 2 * t4;
      if (row_a < L)
        *reinterpret_cast<uint32_t*>(gctx + row_a * rs + d) =
            uni_a ? pack2<T>(mean[d], mean[d + 1]) : pack2<T>(o[mt][i][0] * inv_a, o[mt][i][1] * inv_a);
      if (row_b < L)
        *reinterpret_cast<uint32_t*>(gctx + row_b * rs + d) =
            uni_b ? pack2<T>(mean[d], mean[d + 1]) : pack2<T>(o[mt][i][2] * inv_b, o[mt][i][3] * inv_b);
    }
    if (t4 == 0) {
      if (lse != nullptr && row_a < L) lse[row_a] = uni_a ? INFINITY : (m[mt][0] + log2f(l[mt][0])) * kLn2;
      if (lse != nullptr && row_b < L) lse[row_b] = uni_b ? INFINITY : (m[mt][1] + log2f(l[mt][1])) * kLn2;
    }
  }
}

// ---------------------------------------------------------------------------
// Backward.
// ---------------------------------------------------------------------------

// Δ[b, h, t] = Σ_d dO[b, t, h, d] · O[b, t, h, d] (float sums of 16-bit
// values): the row term of the softmax backward, since Σ_j P∘dP = dO·O also
// with dropout (O is the dropped probabilities times V). D/8 lanes per row,
// 8 elements (16 bytes) each.
template <typename T, int D>
__global__ void __launch_bounds__(256) row_dot_kernel(const T* dout, const T* out, const float* lse, float* delta,
                                                      float* lse2, int64_t rows, int L, int heads) {
  constexpr int G = D / 8;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = gid / G;  // row = (b*L + t)*heads + h, memory order
  const int part = static_cast<int>(gid % G);
  float acc = 0.0f;
  if (row < rows) {
    const uint4 x = *reinterpret_cast<const uint4*>(dout + row * D + part * 8);
    const uint4 y = *reinterpret_cast<const uint4*>(out + row * D + part * 8);
    const T* xs = reinterpret_cast<const T*>(&x);
    const T* ys = reinterpret_cast<const T*>(&y);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc += static_cast<float>(xs[i]) * static_cast<float>(ys[i]);
  }
#pragma unroll
  for (int o = G / 2; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (row < rows && part == 0) {
    const int64_t h = row % heads, bt = row / heads, t = bt % L, b = bt / L;
    const int64_t i = (b * heads + h) * L + t;
    delta[i] = acc;
    lse2[i] = lse[i] * kLog2e;  // base 2, as the backward uses it
  }
}

struct BwdParams {
  const void* q;
  const void* k;
  const void* v;
  const void* dout;
  const int64_t* mask;
  const float* lse;
  const float* delta;
  const float* lse2;  // lse · log2(e)
  float* dq_accum;  // [splits, B*heads, L, D]
  void* dk;
  void* dv;
  int L, heads, splits, bh_count;
  float scale_log2, scale;
  float keep_scale;   // 1/(1-p), or 1 without dropout
  DropoutKeys dropout;
  void* dq;  // written by the kernel itself when it keeps dq in shared memory
  // >= 0: the forward's window (no dropout). Query tiles within it are
  // visited, and those that uniform_tiles ([bh, query tiles]) marks: they
  // hold a row with no kept key in its window (lse +inf), whose
  // probabilities are 1/L for every key, 2^-uniform_lse2 (log2 L).
  int window;
  float uniform_lse2;
  const uint8_t* uniform_tiles;
};

// bwd_keep_bits: attention_dropout.cuh.

// Backward with key tiles of 16 keys a warp, 8 warps (128 keys) for D <= 64,
// 4 warps (64 keys) for D = 128; query tiles of 64. dQ = dS·K for a query
// tile is shared out over all warps (warp w: queries 16·(w % 4), columns
// (w / 4)·D/2 .. for 8 warps). Twice the keys per block halve the dQ traffic
// and the Q, dO loads per key. Two ways of summing dQ over key tiles:
// kResident: the block owns a whole (batch entry, head) and keeps the float32
// dQ of all its query rows in shared memory (rows of D floats, 8-float
// groups swizzled by row so that a warp's float2 accesses spread over the
// banks), each element read-added-written by the one thread that owns it, in
// key-tile order; at the end the block writes dq itself. Otherwise the split
// accumulators in scratch. A warp whose 16 keys are all below L and unmasked
// (the usual case) skips the masking; dV is accumulated before dPᵀ is
// computed, so that the packed P is dead by then (fewer live registers).
template <int D>
__host__ __device__ constexpr int bwd_warps() {
  return D <= 64 ? 8 : 4;
}
template <int D>
__host__ __device__ constexpr int bwd_base_bytes() {
  constexpr int kN = 16 * bwd_warps<D>();
  // K, V; 2 x Q, 2 x dO; dSᵀ (kN x 72); 2 x (lse, Δ) of 64 floats.
  return (2 * kN + 4 * kTile) * (D + 8) * 2 + kN * (kTile + 8) * 2 + 4 * kTile * static_cast<int>(sizeof(float));
}

template <typename T, int D, int kDrop, bool kResident, bool kWindow>
__global__ void __launch_bounds__(32 * bwd_warps<D>(), 1) flash_bwd_kernel(const BwdParams p) {
  static_assert(!kWindow || kDrop == kNoDrop, "no dropout with a window");
  constexpr int kW = bwd_warps<D>();
  constexpr int kNT = 32 * kW;            // threads
  constexpr int kN = 16 * kW;             // keys per tile
  constexpr int ld = D + 8;
  constexpr int lds = kTile + 8;          // dSᵀ stride
  constexpr int kDqCols = D / (kW / 4);   // dQ columns per warp
  constexpr int kDqN = kDqCols / 8;       // and n-tiles
  static_assert(kW % 4 == 0 && kDqN % 2 == 0 && kNT >= 2 * kTile);
  extern __shared__ __align__(16) unsigned char smem[];
  T* sK = reinterpret_cast<T*>(smem);
  T* sV = sK + kN * ld;
  T* sQ = sV + kN * ld;           // 2 buffers
  T* sdO = sQ + 2 * kTile * ld;   // 2 buffers
  T* sdS = sdO + 2 * kTile * ld;  // [kN keys][64 queries + 8]
  float* sLse = reinterpret_cast<float*>(sdS + kN * lds);  // 2 x 64, base 2 (lse · log2 e), 0 past L
  float* sDelta = sLse + 2 * kTile;                            // 2 x 64
  // kResident: [ceil(L/64)·64 rows][D], element (r, c) at r·D + (c ^ 8·(r & 3)).
  // Otherwise 2 x [64 query rows][D + 8]: this split's dQ sums so far for the
  // query tile, fetched with it (the padding spreads a warp's rows over the banks).
  float* sAcc = sDelta + 2 * kTile;
  constexpr int lda = D + 8;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int L = p.L;
  const int split = kResident ? 0 : static_cast<int>(blockIdx.x);
  const int splits = kResident ? 1 : p.splits;
  const int bh = blockIdx.y, b = bh / p.heads, h = bh % p.heads;
  const int64_t rs = static_cast<int64_t>(p.heads) * D;
  const int64_t off = static_cast<int64_t>(b) * L * rs + static_cast<int64_t>(h) * D;
  const T* gq = static_cast<const T*>(p.q) + off;
  const T* gk = static_cast<const T*>(p.k) + off;
  const T* gv = static_cast<const T*>(p.v) + off;
  const T* gdo = static_cast<const T*>(p.dout) + off;
  const float* glse = p.lse2 + static_cast<int64_t>(bh) * L;
  const float* gdelta = p.delta + static_cast<int64_t>(bh) * L;
  float* acc = kResident ? nullptr
                         : p.dq_accum + (static_cast<int64_t>(split) * p.bh_count + bh) * static_cast<int64_t>(L) * D;
  const int64_t* mrow = p.mask ? p.mask + static_cast<int64_t>(b) * L : nullptr;
  constexpr bool windowed = kWindow;  // p.window >= 0
  const bool all_masked = !windowed && !any_key_kept(mrow, L);
  const uint64_t head_base = static_cast<uint64_t>(bh) * static_cast<uint64_t>(L) * static_cast<uint64_t>(L);
  const float c2 = p.scale_log2;

  auto load_q = [&](int tile, int buf, bool with_sums) {
    const int q0 = tile * kTile;
    load_tile<T, D, kTile, kNT>(sQ + buf * kTile * ld, gq, rs, q0, L, tid);
    load_tile<T, D, kTile, kNT>(sdO + buf * kTile * ld, gdo, rs, q0, L, tid);
    if constexpr (!kResident) {
      if (with_sums) {
        constexpr int kChunks = D / 4;  // 16-byte pieces per row of floats
        constexpr int kRowsPerPass = kNT / kChunks;
        const int r = tid / kChunks, col = (tid % kChunks) * 4;
        const float* src = acc + static_cast<int64_t>(q0 + r) * D + col;
        float* dst = sAcc + (buf * kTile + r) * lda + col;
#pragma unroll
        for (int i = 0; i < kTile / kRowsPerPass; ++i) {
          const bool valid = q0 + r + i * kRowsPerPass < L;
          cp_async16(dst + i * kRowsPerPass * lda, valid ? src + i * kRowsPerPass * D : acc, valid);
        }
      }
    }
    // Query rows past L get lse = Δ = 0 (and q = dO = 0): whatever their
    // probabilities, they meet dO = 0 in dV, dP = 0 and Δ = 0 in dS, so they add nothing.
    if (tid < kTile) {
      const bool valid = q0 + tid < L;
      cp_async_small<4>(sLse + buf * kTile + tid, valid ? glse + q0 + tid : glse, valid);
    } else if (tid < 2 * kTile) {
      const int i = tid - kTile;
      const bool valid = q0 + i < L;
      cp_async_small<4>(sDelta + buf * kTile + i, valid ? gdelta + q0 + i : gdelta, valid);
    }
  };

  const int nq = (L + kTile - 1) / kTile;
  const int nkt = (L + kN - 1) / kN;
  const int qr = 16 * (warp & 3);             // dQ: this warp's query rows within the tile
  const int dc = (warp >> 2) * kDqCols;       // and first column
  const uint8_t* uniform_tiles = windowed ? p.uniform_tiles + static_cast<int64_t>(bh) * nq : nullptr;
  if constexpr (kResident) {
    // With a window, not every key tile meets every query tile: the sums start at 0.
    if constexpr (windowed) {
      for (int i = tid; i < nq * kTile * D; i += kNT) sAcc[i] = 0.0f;
    }
  }
  for (int jt = split; jt < nkt; jt += splits) {
    const int k0 = jt * kN;
    const int key_a = k0 + warp * 16 + g, key_b = key_a + 8;  // this thread's two keys
    const bool valid_a = key_a < L && (all_masked || mrow == nullptr || mrow[key_a] != 0);
    const bool valid_b = key_b < L && (all_masked || mrow == nullptr || mrow[key_b] != 0);
    // Whether this warp's keys need the masked path (some key past L or masked, or all masked).
    const bool slow = all_masked || __any_sync(0xffffffffu, !(valid_a && valid_b));
    // First key tile of this block: write the dQ sums, later ones add. With a
    // window the sums start at 0 (zeroed scratch or shared memory) and every tile adds.
    const bool first = jt == split && !windowed;
    // The query tiles this key tile visits: all, or those within the window
    // of its keys and those holding a uniform row.
    const int it_lo = windowed ? max(0, k0 - p.window) / kTile : 0;
    const int it_hi = windowed ? min(nq - 1, (min(L - 1, k0 + kN - 1) + p.window) / kTile) : nq - 1;
    auto next_tile = [&](int it) {
      if constexpr (windowed) {
        for (++it; it < nq; ++it)
          if ((it >= it_lo && it <= it_hi) || uniform_tiles[it] != 0) break;
        return it;
      } else {
        return it + 1;
      }
    };
    __syncthreads();  // every warp is done with the previous key tile's K, V and buffers

    const int it_first = next_tile(-1);
    load_tile<T, D, kN, kNT>(sK, gk, rs, k0, L, tid);
    load_tile<T, D, kN, kNT>(sV, gv, rs, k0, L, tid);
    load_q(it_first, 0, !first);
    cp_async_commit();

    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.0f;

    // kDropGroups with 8 warps: warps 4-7 make a tile's dropout bits ahead (below).
    uint32_t keep_next = 0u;
    if constexpr (kDrop == kDropGroups && kW == 8) {
      if (warp >= 4) keep_next = bwd_keep_bits<kDrop>(p.dropout, head_base, L, k0 + warp * 16, 0, g, t4);
    }

    for (int it = it_first, it_next = 0, step = 0; it < nq; it = it_next, ++step) {
      const int buf = step & 1;
      it_next = next_tile(it);
      // Query tile it has landed, and every warp is done with the tile before
      // (its buffers and dSᵀ), so the next tile can fill them while this one is used.
      cp_async_wait<0>();
      __syncthreads();
      if (it_next < nq) {
        load_q(it_next, buf ^ 1, !first);
        cp_async_commit();
      }
      // Whether this warp's 16 keys x the tile's 64 queries need the masked
      // path: its keys' own reasons, a pair beyond the window, a uniform row.
      const bool tile_slow =
          slow || (windowed && (window_cuts(it * kTile, it * kTile + kTile - 1, k0 + warp * 16, k0 + warp * 16 + 15,
                                            p.window) ||
                                uniform_tiles[it] != 0));
      const T* qs = sQ + buf * kTile * ld;
      const T* dos = sdO + buf * kTile * ld;
      const float* lse_s = sLse + buf * kTile;
      const float* delta_s = sDelta + buf * kTile;

      // The forward's dropout mask for this warp's 16 keys x 64 queries: bit
      // 4n + e is element s[n][e] below (key e < 2 ? key_a : key_b, query
      // it*64 + 8n + 2·t4 + (e & 1)). The generator's integer multiplies take
      // about as long as a tile's products, on another pipe, and the compiler
      // puts a block's calls before its products; with 8 warps in step
      // (barriers), warps 0-3 make this tile's bits here, at the start of the
      // tile, and warps 4-7 made them in the dQ phase of the previous one, so
      // that on each scheduler (warps w and w + 4) one warp's calls meet the
      // other's products. Otherwise: here, first, while few registers are live.
      uint32_t keep = 0xffffffffu;
      if constexpr (kDrop == kDropGroups && kW == 8) {
        keep = warp < 4 ? bwd_keep_bits<kDrop>(p.dropout, head_base, L, k0 + warp * 16, it * kTile, g, t4) : keep_next;
      } else if constexpr (kDrop != kNoDrop) {
        keep = bwd_keep_bits<kDrop>(p.dropout, head_base, L, k0 + warp * 16, it * kTile, g, t4);
      }

      // Sᵀ = K·Qᵀ: this warp's 16 keys x 64 queries.
      float s[8][4];
#pragma unroll
      for (int n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[4];
        load_a(a, sK, ld, warp * 16, kk * 16, lane);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t bb[4];
          load_b_nk(bb, qs, ld, np * 16, kk * 16, lane);
          mma16816<T>(s[2 * np], a, bb[0], bb[1]);
          mma16816<T>(s[2 * np + 1], a, bb[2], bb[3]);
        }
      }
      // Pᵀ = 2^(scale·log2e·S − lse·log2e) in place; on the masked path 0 for
      // masked keys (and keys past L), and scores 0 for an all-masked entry.
      if (!tile_slow) {
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          const float2 lv = *reinterpret_cast<const float2*>(lse_s + n * 8 + 2 * t4);
#pragma unroll
          for (int e = 0; e < 4; ++e) s[n][e] = fast_exp2(fmaf(s[n][e], c2, -((e & 1) ? lv.y : lv.x)));
        }
      } else if constexpr (!windowed) {
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          const float2 lv = *reinterpret_cast<const float2*>(lse_s + n * 8 + 2 * t4);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float lse2 = (e & 1) ? lv.y : lv.x;
            const float x = all_masked ? -lse2 : fmaf(s[n][e], c2, -lse2);
            s[n][e] = fast_exp2(((e >> 1) ? valid_b : valid_a) ? x : -INFINITY);
          }
        }
      } else {
        // Windowed: keys within the window that the mask keeps; a uniform row
        // (lse +inf) gives every key below L probability 1/L.
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          const float2 lv = *reinterpret_cast<const float2*>(lse_s + n * 8 + 2 * t4);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float lse2 = (e & 1) ? lv.y : lv.x;
            const int query = it * kTile + n * 8 + 2 * t4 + (e & 1);
            const int key = (e >> 1) ? key_b : key_a;
            const bool kept = (e >> 1) ? valid_b : valid_a;
            float x = -INFINITY;
            if (lse2 == INFINITY)
              x = key < L ? -p.uniform_lse2 : -INFINITY;
            else if (kept && abs(query - key) <= p.window)
              x = fmaf(s[n][e], c2, -lse2);
            s[n][e] = fast_exp2(x);
          }
        }
      }

      // dV += (P∘keep)ᵀ·dO (1/(1-p) applied once at the end), first, so that
      // the packed P is dead before dPᵀ is live.
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        uint32_t pk[4];  // register j: elements s[2kk + (j >> 1)][2(j & 1) ..]
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int n = 2 * kk + (j >> 1), e = 2 * (j & 1);
          float p0 = s[n][e], p1 = s[n][e + 1];
          if constexpr (kDrop != kNoDrop) {
            p0 = ((keep >> (n * 4 + e)) & 1u) ? p0 : 0.0f;
            p1 = ((keep >> (n * 4 + e + 1)) & 1u) ? p1 : 0.0f;
          }
          pk[j] = pack2<T>(p0, p1);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t bb[4];
          load_b_kn(bb, dos, ld, kk * 16, dp * 16, lane);
          mma16816<T>(dv[2 * dp], pk, bb[0], bb[1]);
          mma16816<T>(dv[2 * dp + 1], pk, bb[2], bb[3]);
        }
      }

      // dPᵀ = V·dOᵀ.
      float dpt[8][4];
#pragma unroll
      for (int n = 0; n < 8; ++n) dpt[n][0] = dpt[n][1] = dpt[n][2] = dpt[n][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[4];
        load_a(a, sV, ld, warp * 16, kk * 16, lane);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t bb[4];
          load_b_nk(bb, dos, ld, np * 16, kk * 16, lane);
          mma16816<T>(dpt[2 * np], a, bb[0], bb[1]);
          mma16816<T>(dpt[2 * np + 1], a, bb[2], bb[3]);
        }
      }

      // dSᵀ = Pᵀ∘(dPᵀ∘keep/(1-p) − Δ), packed as A fragments like P.
      uint32_t dsp[4][4];
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const float2 dl = *reinterpret_cast<const float2*>(delta_s + n * 8 + 2 * t4);
        float dsv[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float delta = (e & 1) ? dl.y : dl.x;
          if constexpr (kDrop != kNoDrop) {
            const bool kept = (keep >> (n * 4 + e)) & 1u;
            dsv[e] = s[n][e] * fmaf(dpt[n][e], kept ? p.keep_scale : 0.0f, -delta);
          } else {
            dsv[e] = s[n][e] * (dpt[n][e] - delta);
          }
        }
        dsp[n >> 1][(n & 1) * 2] = pack2<T>(dsv[0], dsv[1]);
        dsp[n >> 1][(n & 1) * 2 + 1] = pack2<T>(dsv[2], dsv[3]);
      }

      // dK += dSᵀ·Q (the scale applied at the end); dSᵀ to shared memory for dQ.
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint32_t(&a)[4] = dsp[kk];
        *reinterpret_cast<uint32_t*>(sdS + (warp * 16 + g) * lds + kk * 16 + 2 * t4) = a[0];
        *reinterpret_cast<uint32_t*>(sdS + (warp * 16 + g + 8) * lds + kk * 16 + 2 * t4) = a[1];
        *reinterpret_cast<uint32_t*>(sdS + (warp * 16 + g) * lds + kk * 16 + 8 + 2 * t4) = a[2];
        *reinterpret_cast<uint32_t*>(sdS + (warp * 16 + g + 8) * lds + kk * 16 + 8 + 2 * t4) = a[3];
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t bb[4];
          load_b_kn(bb, qs, ld, kk * 16, dp * 16, lane);
          mma16816<T>(dk[2 * dp], a, bb[0], bb[1]);
          mma16816<T>(dk[2 * dp + 1], a, bb[2], bb[3]);
        }
      }
      __syncthreads();
      if constexpr (kDrop == kDropGroups && kW == 8) {
        if (warp >= 4 && it_next < nq)
          keep_next = bwd_keep_bits<kDrop>(p.dropout, head_base, L, k0 + warp * 16, it_next * kTile, g, t4);
      }

      // dQ (this tile's part) = dS·K over the tile's kN keys: this warp's 16
      // queries x kDqCols columns.
      float dq[kDqN][4];
#pragma unroll
      for (int i = 0; i < kDqN; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        uint32_t a[4];
        load_a_trans(a, sdS, lds, kk * 16, qr, lane);
#pragma unroll
        for (int dp = 0; dp < kDqN / 2; ++dp) {
          uint32_t bb[4];
          load_b_kn(bb, sK, ld, kk * 16, dc + dp * 16, lane);
          mma16816<T>(dq[2 * dp], a, bb[0], bb[1]);
          mma16816<T>(dq[2 * dp + 1], a, bb[2], bb[3]);
        }
      }
      const int ra = qr + g, rb = ra + 8;  // rows within the tile
      if constexpr (kResident) {
        // Each element has one owner thread for every key tile, which adds in key-tile order.
        float* rowa = sAcc + (it * kTile + ra) * D;
        float* rowb = sAcc + (it * kTile + rb) * D;
        const int swz = 8 * (g & 3);  // (row & 3) == (g & 3) for both rows
#pragma unroll
        for (int i = 0; i < kDqN; ++i) {
          const int d = (dc + i * 8 + 2 * t4) ^ swz;
          float2* pa = reinterpret_cast<float2*>(rowa + d);
          float2* pb = reinterpret_cast<float2*>(rowb + d);
          float2 va = make_float2(dq[i][0], dq[i][1]), vb = make_float2(dq[i][2], dq[i][3]);
          if (!first) {
            const float2 xa = *pa, xb = *pb;
            va.x += xa.x;
            va.y += xa.y;
            vb.x += xb.x;
            vb.y += xb.y;
          }
          *pa = va;
          *pb = vb;
        }
      } else {
        // Into this split's accumulator: only this block touches it, in key-tile
        // order; the sums so far came in with this query tile (sAcc), so no load
        // waits here.
        const int qa_row = it * kTile + ra, qb_row = it * kTile + rb;
        const float* prev = sAcc + buf * kTile * lda;
#pragma unroll
        for (int i = 0; i < kDqN; ++i) {
          const int d = dc + i * 8 + 2 * t4;
          float2 va = make_float2(dq[i][0], dq[i][1]), vb = make_float2(dq[i][2], dq[i][3]);
          if (!first) {
            const float2 pa = *reinterpret_cast<const float2*>(prev + ra * lda + d);
            const float2 pb = *reinterpret_cast<const float2*>(prev + rb * lda + d);
            va.x += pa.x;
            va.y += pa.y;
            vb.x += pb.x;
            vb.y += pb.y;
          }
          if (qa_row < L) *reinterpret_cast<float2*>(acc + static_cast<int64_t>(qa_row) * D + d) = va;
          if (qb_row < L) *reinterpret_cast<float2*>(acc + static_cast<int64_t>(qb_row) * D + d) = vb;
        }
      }
    }

    // dK = scale · Σ dSᵀQ, dV = 1/(1-p) · Σ (P∘keep)ᵀdO for this warp's keys.
    T* gdk = static_cast<T*>(p.dk) + off;
    T* gdv = static_cast<T*>(p.dv) + off;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const int d = i * 8 + 2 * t4;
      if (key_a < L) {
        *reinterpret_cast<uint32_t*>(gdk + key_a * rs + d) = pack2<T>(dk[i][0] * p.scale, dk[i][1] * p.scale);
        *reinterpret_cast<uint32_t*>(gdv + key_a * rs + d) =
            pack2<T>(dv[i][0] * p.keep_scale, dv[i][1] * p.keep_scale);
      }
      if (key_b < L) {
        *reinterpret_cast<uint32_t*>(gdk + key_b * rs + d) = pack2<T>(dk[i][2] * p.scale, dk[i][3] * p.scale);
        *reinterpret_cast<uint32_t*>(gdv + key_b * rs + d) =
            pack2<T>(dv[i][2] * p.keep_scale, dv[i][3] * p.keep_scale);
      }
    }
  }

  if constexpr (kResident) {
    // dq = scale · Σ over key tiles, 8 consecutive columns (16 bytes) a thread.
    __syncthreads();
    T* gdq = static_cast<T*>(p.dq) + off;
    constexpr int kChunks = D / 8;
    for (int i = tid; i < L * kChunks; i += kNT) {
      const int r = i / kChunks, c = (i % kChunks) * 8;
      const float* src = sAcc + r * D + (c ^ (8 * (r & 3)));
      const float4 x = *reinterpret_cast<const float4*>(src);
      const float4 y = *reinterpret_cast<const float4*>(src + 4);
      const float sc = p.scale;
      *reinterpret_cast<uint4*>(gdq + r * rs + c) =
          make_uint4(pack2<T>(x.x * sc, x.y * sc), pack2<T>(x.z * sc, x.w * sc), pack2<T>(y.x * sc, y.y * sc),
                     pack2<T>(y.z * sc, y.w * sc));
    }
  }
}

// dq[b, t, h, d] = scale · Σ_split accum[split, b*heads + h, t, d], splits in
// order; 4 consecutive d per thread. rows = B*heads*L < 2^31 (checked).
template <typename T, int D>
__global__ void __launch_bounds__(256) dq_sum_kernel(const float* accum, T* dq, int rows, int splits, int L, int heads,
                                                     float scale) {
  constexpr int kQuads = D / 4;
  const int64_t n = static_cast<int64_t>(rows) * D;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * kQuads) return;
  const int row = static_cast<int>(i / kQuads), d = static_cast<int>(i % kQuads) * 4;  // row = bh*L + t
  float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s = 0; s < splits; ++s) {
    const float4 v = *reinterpret_cast<const float4*>(accum + s * n + i * 4);
    sum.x += v.x;
    sum.y += v.y;
    sum.z += v.z;
    sum.w += v.w;
  }
  const int bh = row / L, t = row - bh * L, b = bh / heads, h = bh - b * heads;
  const int64_t out = ((static_cast<int64_t>(b) * L + t) * heads + h) * D + d;
  *reinterpret_cast<uint2*>(dq + out) =
      make_uint2(pack2<T>(sum.x * scale, sum.y * scale), pack2<T>(sum.z * scale, sum.w * scale));
}

// The windowed backward's flags: uniform_tiles[bh, t] = 1 where a row of
// query tile t has lse +inf (no kept key within its window).
__global__ void __launch_bounds__(kTile) uniform_tiles_kernel(const float* lse, uint8_t* flags, int L, int nq) {
  const int t = static_cast<int>(blockIdx.x), bh = static_cast<int>(blockIdx.y);
  const int row = t * kTile + static_cast<int>(threadIdx.x);
  const bool uniform = row < L && lse[static_cast<int64_t>(bh) * L + row] == INFINITY;
  const int any = __syncthreads_or(uniform);
  if (threadIdx.x == 0) flags[static_cast<int64_t>(bh) * nq + t] = any != 0 ? 1 : 0;
}

// ---------------------------------------------------------------------------
// Host side.
// ---------------------------------------------------------------------------

// Backward: keys per tile, splits of the key tiles (enough blocks for about
// two per SM of a 132-SM GPU, at most one per key tile), and whether dQ stays
// in shared memory: when the whole dQ of a (batch entry, head) fits next to
// the tiles in the 227 KB a block may have on an sm_90 device, and there are
// enough (batch entry, head) pairs to fill the GPU with one block each.
// Functions of the shapes only, so results do not depend on the device; they
// live in cuda_memory.h (flash_backward_*), since the scratch depends on them.
constexpr int64_t kMaxSmem = kFlashMaxSmem;
template <int D>
constexpr bool host_sizes_match() {
  return flash_backward_keys(D) == 16 * bwd_warps<D>() && flash_backward_base_smem(D) == bwd_base_bytes<D>();
}
static_assert(host_sizes_match<32>() && host_sizes_match<64>() && host_sizes_match<128>(),
              "cuda_memory.h's backward tiles are the kernel's");
int64_t backward_splits(int64_t bh, int64_t L, int64_t D) { return flash_backward_splits(bh, L, D); }
int64_t resident_bytes(int64_t L, int64_t D) { return flash_backward_resident_smem(L, D); }
bool backward_resident(int64_t bh, int64_t L, int64_t D) { return flash_backward_resident(bh, L, D); }
// Scratch of the backward: Δ, lse · log2 e (rows each), then the split dq
// accumulators unless dq stays in shared memory.
FlashScratchLayout scratch_layout(int64_t bh, int64_t L, int64_t D) { return flash_attention_scratch_layout(bh, L, D); }

void check_args(const char* what, int64_t B, int64_t L, int64_t heads, int64_t D, const DropoutSpec& dropout,
                std::initializer_list<const void*> ptrs, int64_t window = -1) {
  if (!flash_attention_supported(D)) fail("{}: head size {} is not supported (32, 64 or 128)", what, D);
  if (window >= 0 && dropout.p > 0.0f)
    fail("{}: a window with dropout on the probabilities ({}) is not supported", what, dropout.p);
  if (window > (int64_t{1} << 24)) fail("{}: window {} too large", what, window);
  if (L > (int64_t{1} << 24) || B * heads > 65535 || B * L * heads >= (int64_t{1} << 31))
    fail("{}: shape B={} L={} heads={} too large", what, B, L, heads);
  check_attention_dropout(what, dropout.p);
  check_aligned16(what, ptrs);
}

template <typename T, int D, int kDrop, bool kWindow = false>
void launch_forward(cudaStream_t s, const FwdParams& p, int64_t B) {
  constexpr int bytes = fwd_smem_bytes<D>();
  auto kernel = flash_fwd_kernel<T, D, kDrop, kWindow>;
  static std::atomic<uint64_t> configured{0};  // per <T, D, kDrop>, i.e. per kernel
  configure_shared_memory(kernel, bytes, configured);
  const dim3 grid(static_cast<unsigned>((p.L + fwd_rows<D>() - 1) / fwd_rows<D>()), static_cast<unsigned>(B * p.heads));
  kernel<<<grid, kThreads, bytes, s>>>(p);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

template <typename T, int D, int kDrop, bool kWindow = false>
void launch_backward(cudaStream_t s, const BwdParams& p, const void* dctx, const void* ctx, float* delta, void* dq,
                     int64_t B) {
  const int64_t rows = B * p.L * p.heads;
  {
    constexpr int threads = 256;
    const int64_t blocks = (rows * (D / 8) + threads - 1) / threads;
    row_dot_kernel<T, D><<<static_cast<unsigned>(blocks), threads, 0, s>>>(
        static_cast<const T*>(dctx), static_cast<const T*>(ctx), p.lse, delta, const_cast<float*>(p.lse2), rows, p.L,
        p.heads);
    ANATOMY_CUDA_CHECK(cudaGetLastError());
  }
  constexpr int threads = 32 * bwd_warps<D>();
  if (backward_resident(p.bh_count, p.L, D)) {
    // One block per (batch entry, head); dq written by the kernel.
    auto kernel = flash_bwd_kernel<T, D, kDrop, true, kWindow>;
    static std::atomic<uint64_t> configured{0};
    configure_shared_memory(kernel, static_cast<int>(kMaxSmem), configured);
    const int bytes = static_cast<int>(resident_bytes(p.L, D));
    kernel<<<dim3(1, static_cast<unsigned>(p.bh_count)), threads, bytes, s>>>(p);
    ANATOMY_CUDA_CHECK(cudaGetLastError());
    return;
  }
  {
    constexpr int bytes = bwd_base_bytes<D>() + 2 * kTile * (D + 8) * static_cast<int>(sizeof(float));
    auto kernel = flash_bwd_kernel<T, D, kDrop, false, kWindow>;
    static std::atomic<uint64_t> configured{0};
    configure_shared_memory(kernel, bytes, configured);
    const dim3 grid(static_cast<unsigned>(p.splits), static_cast<unsigned>(p.bh_count));
    kernel<<<grid, threads, bytes, s>>>(p);
    ANATOMY_CUDA_CHECK(cudaGetLastError());
  }
  {
    constexpr int threads_sum = 256;
    const int64_t blocks = (rows * (D / 4) + threads_sum - 1) / threads_sum;
    dq_sum_kernel<T, D><<<static_cast<unsigned>(blocks), threads_sum, 0, s>>>(
        p.dq_accum, static_cast<T*>(dq), static_cast<int>(rows), p.splits, p.L, p.heads, p.scale);
    ANATOMY_CUDA_CHECK(cudaGetLastError());
  }
}

// Calls f.template operator()<T, D, kDrop>() for the runtime choices.
template <typename F>
void dispatch(AttnType t, int64_t D, bool dropout, int64_t L, F&& f) {
  auto with_type = [&]<typename T>() {
    auto with_d = [&]<int kD>() {
      if (!dropout)
        f.template operator()<T, kD, kNoDrop>();
      else if (L % 4 == 0)
        f.template operator()<T, kD, kDropGroups>();
      else
        f.template operator()<T, kD, kDropEach>();
    };
    if (D == 32)
      with_d.template operator()<32>();
    else if (D == 64)
      with_d.template operator()<64>();
    else
      with_d.template operator()<128>();
  };
  if (t == AttnType::BF16)
    with_type.template operator()<__nv_bfloat16>();
  else
    with_type.template operator()<__half>();
}

}  // namespace

void flash_attention_row_terms(cudaStream_t s, AttnType t, const void* dctx, const void* ctx, const float* lse,
                               int64_t B, int64_t L, int64_t heads, int64_t D, float* delta, float* lse2) {
  if (B == 0 || L == 0 || heads == 0) return;
  if (!flash_attention_supported(D)) fail("flash_attention_row_terms: head size {} is not supported", D);
  const int64_t rows = B * L * heads;
  constexpr int threads = 256;
  const int64_t blocks = (rows * (D / 8) + threads - 1) / threads;
  auto run = [&]<typename T, int kD>() {
    row_dot_kernel<T, kD><<<static_cast<unsigned>(blocks), threads, 0, s>>>(
        static_cast<const T*>(dctx), static_cast<const T*>(ctx), lse, delta, lse2, rows, static_cast<int>(L),
        static_cast<int>(heads));
  };
  const bool bf16 = t == AttnType::BF16;
  if (D == 32) bf16 ? run.template operator()<__nv_bfloat16, 32>() : run.template operator()<__half, 32>();
  else if (D == 64) bf16 ? run.template operator()<__nv_bfloat16, 64>() : run.template operator()<__half, 64>();
  else bf16 ? run.template operator()<__nv_bfloat16, 128>() : run.template operator()<__half, 128>();
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void flash_attention_forward(cudaStream_t s, AttnType t, const void* q, const void* k, const void* v,
                             const int64_t* key_mask, int64_t B, int64_t L, int64_t heads, int64_t D, float scale,
                             const DropoutSpec& dropout, void* ctx, float* lse, int64_t window) {
  if (B == 0 || L == 0 || heads == 0) return;
  check_args("flash_attention_forward", B, L, heads, D, dropout, {q, k, v, ctx}, window);
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
  p.keep_scale = keep_scale_of(dropout);  // as the reference, in float
  p.dropout = make_dropout_keys(dropout);
  p.abs_scale_log2 = std::fabs(scale) * kLog2e;
  p.q_sign = scale < 0.0f ? 0x80008000u : 0u;
  p.slow_tiles = scale == 0.0f ? 1 : 0;
  p.window = window < 0 ? -1 : static_cast<int>(window);
  dispatch(t, D, use_dropout, L, [&]<typename T, int kD, int kDrop>() {
    if constexpr (kDrop == kNoDrop) {
      if (window >= 0) return launch_forward<T, kD, kDrop, true>(s, p, B);
    }
    launch_forward<T, kD, kDrop>(s, p, B);
  });
}

void flash_attention_forward_packed(cudaStream_t s, AttnType t, const void* q, const void* k, const void* v,
                                    const int64_t* offsets, int64_t B, int64_t longest, int64_t rows, int64_t heads,
                                    int64_t D, float scale, void* ctx) {
  if (B == 0 || longest == 0 || heads == 0) return;
  check_args("flash_attention_forward_packed", B, longest, heads, D, DropoutSpec{}, {q, k, v, ctx});
  FwdParams p{};
  p.q = q;
  p.k = k;
  p.v = v;
  p.ctx = ctx;
  p.offsets = offsets;
  p.L = static_cast<int>(longest);
  p.heads = static_cast<int>(heads);
  p.keep_scale = 1.0f;
  p.dropout = make_dropout_keys(DropoutSpec{});
  p.abs_scale_log2 = std::fabs(scale) * kLog2e;
  p.q_sign = scale < 0.0f ? 0x80008000u : 0u;
  p.slow_tiles = scale == 0.0f ? 1 : 0;
  p.window = -1;
  dispatch(t, D, false, longest, [&]<typename T, int kD, int kDrop>() { launch_forward<T, kD, kDrop>(s, p, B); });
}

void flash_attention_backward(cudaStream_t s, AttnType t, const void* dctx, const void* q, const void* k, const void* v,
                              const void* ctx, const float* lse, const int64_t* key_mask, int64_t B, int64_t L,
                              int64_t heads, int64_t D, float scale, const DropoutSpec& dropout, void* dq, void* dk,
                              void* dv, void* scratch, int64_t window) {
  if (B == 0 || L == 0 || heads == 0) return;
  check_args("flash_attention_backward", B, L, heads, D, dropout, {dctx, q, k, v, ctx, dq, dk, dv, scratch}, window);
  const bool use_dropout = dropout.p > 0.0f;
  const int64_t bh = B * heads;
  const FlashScratchLayout layout = scratch_layout(bh, L, D);
  char* base = static_cast<char*>(scratch);
  float* delta = reinterpret_cast<float*>(base);
  float* lse2 = reinterpret_cast<float*>(base + layout.rows);
  float* accum = reinterpret_cast<float*>(base + 2 * layout.rows);
  BwdParams p{};
  p.q = q;
  p.k = k;
  p.v = v;
  p.dout = dctx;
  p.mask = key_mask;
  p.lse = lse;
  p.delta = delta;
  p.lse2 = lse2;
  p.dq_accum = accum;
  p.dk = dk;
  p.dv = dv;
  p.dq = dq;
  p.L = static_cast<int>(L);
  p.heads = static_cast<int>(heads);
  p.splits = static_cast<int>(backward_splits(bh, L, D));
  p.bh_count = static_cast<int>(bh);
  p.scale_log2 = scale * kLog2e;
  p.scale = scale;
  p.keep_scale = keep_scale_of(dropout);
  p.dropout = make_dropout_keys(dropout);
  p.window = -1;
  if (window >= 0) {
    // The flags after the flash backward's scratch (flash_window_scratch_bytes);
    // the split accumulators start at 0, since a key tile adds only to the
    // query tiles it visits.
    const int64_t nq = (L + kTile - 1) / kTile;
    auto* flags = reinterpret_cast<uint8_t*>(base + layout.total);
    uniform_tiles_kernel<<<dim3(static_cast<unsigned>(nq), static_cast<unsigned>(bh)), kTile, 0, s>>>(
        lse, flags, static_cast<int>(L), static_cast<int>(nq));
    ANATOMY_CUDA_CHECK(cudaGetLastError());
    if (layout.accum > 0) ANATOMY_CUDA_CHECK(cudaMemsetAsync(accum, 0, layout.accum, s));
    p.window = static_cast<int>(window);
    p.uniform_lse2 = std::log2(static_cast<float>(L));
    p.uniform_tiles = flags;
  }
  dispatch(t, D, use_dropout, L, [&]<typename T, int kD, int kDrop>() {
    if constexpr (kDrop == kNoDrop) {
      if (window >= 0) return launch_backward<T, kD, kDrop, true>(s, p, dctx, ctx, delta, dq, B);
    }
    launch_backward<T, kD, kDrop>(s, p, dctx, ctx, delta, dq, B);
  });
}

}  // namespace anatomy::cuda
