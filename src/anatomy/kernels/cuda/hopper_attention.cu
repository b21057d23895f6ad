// hopper_attention.cu: the attention forward and backward of
// hopper_attention.cuh on Hopper's warpgroup matrix instructions
// (wgmma.mma_async, sm_90a).
//
// One block of two warpgroups (256 threads) per (128 query rows, batch entry,
// head); warpgroup w owns query rows 64w .. 64w + 63 of the block. Q stays in
// shared memory for the whole block; the key tiles of 64 keys arrive by
// cp.async, K and V double-buffered, so that tile j + 1 loads while tile j is
// used. Per tile each warpgroup
//   - computes S = Q·Kᵀ (64 x 64, float32) with four m64n64k16 instructions
//     whose operands both come from shared memory (Q and K are K-major: d is
//     the contiguous index of both);
//   - keeps a running max and sum of each row (online softmax in base 2, as
//     flash_attention.cu), applies the dropout mask to the probabilities;
//   - accumulates O += P·V with four m64n64k16 instructions whose A operand
//     (P, rounded to 16 bits) comes from registers: the accumulator layout of
//     S is, per 16 keys, the register layout of an A operand. V is the B
//     operand read N-major (d contiguous), which wgmma transposes itself.
// Shared tiles use the 128-byte swizzle: a 64-element row is 128 bytes, its
// 16-byte chunk c stored at chunk c ^ (row % 8), tiles 1024-byte aligned, as
// the instruction's shared-memory descriptors expect.
//
// Register layout of a warpgroup's m64nN accumulator (PTX ISA, wgmma): warp
// w (0..3) of the group holds rows 16w .. 16w + 15; lane 4g + t holds, for
// each n8 block i, (row 16w + g, columns 8i + 2t, 8i + 2t + 1) in elements
// 4i, 4i + 1 and (row 16w + g + 8, the same columns) in 4i + 2, 4i + 3.
//
// The dropout mask is attention_keep8's (core/random.h): one Philox-4x32-10
// call per eight consecutive keys of a row, compared as 16-bit numbers
// (keep_run8: two calls when L % 8 != 0 makes a group straddle). The eight
// keys 8i .. 8i + 7 of a row are one n8 block, two keys in each lane of a
// quad; lane t makes the calls of blocks t and t + 4 of both its rows and
// the quad swaps bytes with four shuffles. The generator is the forward's
// largest cost after the products (0.14 ms a pass at batch 32 with one call
// per four keys, the reference's scheme), hence the eight.
#include "anatomy/kernels/cuda/hopper_attention.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "anatomy/core/error.h"
#include "anatomy/kernels/cuda/attention_common.cuh"
#include "anatomy/kernels/cuda/attention_dropout.cuh"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/dropout_keys.cuh"
#include "anatomy/kernels/cuda/shared_memory_config.cuh"

// wgmma exists only in the architecture-specific sm_90a code; the plain
// compute_90 / sm_90 build of this file has empty kernels that are never run.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ANATOMY_WGMMA 1
#else
#define ANATOMY_WGMMA 0
#endif

namespace anatomy::cuda {

namespace {

constexpr int kD = 64;                       // head size
constexpr int kGroups = 2;                   // warpgroups per block
constexpr int kThreads = 128 * kGroups;      // 256
constexpr int kRows = 64 * kGroups;          // query rows per block
constexpr int kKeys = 64;                    // keys per tile
constexpr int kRowBytes = kD * 2;            // 128: one swizzle row
constexpr int kTileBytes = kKeys * kRowBytes;  // 8 KiB
constexpr int kQBytes = kRows * kRowBytes;     // 16 KiB
// Q, K[2], V[2], then the key mask of two tiles (int64), all past a 1 KiB
// alignment pad.
constexpr int kSmemBytes = 1024 + kQBytes + 4 * kTileBytes + 2 * kKeys * 8;
constexpr float kLog2e = 1.4426950408889634f;
[[maybe_unused]] constexpr float kLn2 = 0.6931471805599453f;

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  const int64_t* mask;
  void* ctx;
  float* lse;
  int L, heads;
  float abs_scale_log2;  // |scale|·log2(e)
  uint32_t q_sign;       // 0x80008000 when scale < 0: q's signs flipped instead
  int slow_tiles;        // scale == 0: every tile takes the masked path
  float keep_scale;      // 1/(1-p), or 1
  DropoutKeys dropout;
  uint32_t* keep_bits;   // nullptr, or the mask as bits: [B*heads, L, keep_words] (hopper_attention_keep_words)
  int keep_words;
};

__device__ int g_wgmma_probe = 0;

__global__ void wgmma_probe_kernel() { g_wgmma_probe = ANATOMY_WGMMA ? 1 : -1; }

#if ANATOMY_WGMMA

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 8 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// Shared memory written through the generic proxy (cp.async, st.shared) that
// the tensor cores read next: each writing thread fences before the barrier.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

// Keeps the compiler from moving accumulator reads or writes across the
// asynchronous instructions that own the registers.
__device__ __forceinline__ void fence_regs(float (&d)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Shared-memory matrix descriptor, 128-byte swizzle: start address, leading
// and stride byte offsets (all >> 4).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | static_cast<uint64_t>(lbo >> 4) << 16 |
         static_cast<uint64_t>(sbo >> 4) << 32 | uint64_t{1} << 62;
}

#define ANATOMY_WGMMA_D32                                                                                    \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define ANATOMY_WGMMA_D32_OUT(d)                                                                              \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),   \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),   \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// The three products the kernels issue, for the 16-bit type TYPE (bf16 or
// f16), each wrapped so that one asm string serves both types. Immediates
// after the descriptors: scale A, scale B (1: no negation), then transpose
// A (shared A only) and transpose B (1: the operand is MN-major).
// d (64x64 f32) (+)= A (64x16, K-major, shared) · B (16x64, K-major, shared).
#define ANATOMY_WGMMA_SS(TYPE)                                                                             \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." #TYPE "." #TYPE " " ANATOMY_WGMMA_D32         \
               ", %32, %33, p, 1, 1, 0, 0;\n}\n"                                                           \
               : ANATOMY_WGMMA_D32_OUT(d)                                                                  \
               : "l"(a), "l"(b), "r"(accumulate))
// d (64x64 f32) += A (64x16, registers) · B (16x64, N-major, shared).
#define ANATOMY_WGMMA_RS_TB(TYPE)                                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                                  \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." #TYPE "." #TYPE " " ANATOMY_WGMMA_D32         \
               ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                             \
               : ANATOMY_WGMMA_D32_OUT(d)                                                                  \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b))
// d (64x32 f32) (+)= A (64x16, M-major, shared) · B (16x32, N-major, shared).
#define ANATOMY_WGMMA_SS_N32_TT(TYPE)                                                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                                \
               "wgmma.mma_async.sync.aligned.m64n32k16.f32." #TYPE "." #TYPE " " ANATOMY_WGMMA_D16         \
               ", %16, %17, p, 1, 1, 1, 1;\n}\n"                                                           \
               : ANATOMY_WGMMA_D16_OUT(d)                                                                  \
               : "l"(a), "l"(b), "r"(accumulate))

#define ANATOMY_WGMMA_D16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define ANATOMY_WGMMA_D16_OUT(d)                                                                                 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),     \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])

template <typename T>
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) ANATOMY_WGMMA_SS(bf16);
  else ANATOMY_WGMMA_SS(f16);
}
template <typename T>
__device__ __forceinline__ void wgmma_rs_tb(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) ANATOMY_WGMMA_RS_TB(bf16);
  else ANATOMY_WGMMA_RS_TB(f16);
}
template <typename T>
__device__ __forceinline__ void wgmma_ss_n32_tt(float (&d)[16], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) ANATOMY_WGMMA_SS_N32_TT(bf16);
  else ANATOMY_WGMMA_SS_N32_TT(f16);
}

template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// Rows row0 .. row0 + nrows - 1 (of L) of a [*, L, heads*64] tensor at
// `g` (already offset to the head) into a swizzled shared tile; rows past L
// are zeros.
template <int kTileRows>
__device__ __forceinline__ void load_rows(uint32_t tile, const uint16_t* g, int64_t rs, int row0, int L, int tid) {
  constexpr int kChunks = kTileRows * 8;
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int id = tid + i * kThreads;
    const int r = id >> 3, c = id & 7;
    const bool valid = row0 + r < L;
    const uint16_t* src = valid ? g + static_cast<int64_t>(row0 + r) * rs + c * 8 : g;
    cp_async16(tile + r * kRowBytes + ((c ^ (r & 7)) << 4), src, valid);
  }
}

// XORs `sign` into the 16-byte chunks of a tile that load_rows<kTileRows> had
// thread `tid` fetch (its own copies are complete after its wait).
template <int kTileRows>
__device__ __forceinline__ void flip_signs(unsigned char* tile, int tid, uint32_t sign) {
  constexpr int kChunks = kTileRows * 8;
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int id = tid + i * kThreads;
    const int r = id >> 3, c = id & 7;
    uint4* chunk = reinterpret_cast<uint4*>(tile + r * kRowBytes + ((c ^ (r & 7)) << 4));
    uint4 x = *chunk;
    x.x ^= sign;
    x.y ^= sign;
    x.z ^= sign;
    x.w ^= sign;
    *chunk = x;
  }
}

__device__ __forceinline__ void fence_regs(float (&d)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ void fence_regs(uint32_t (&a)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
}

// The forward's mask of key tile `tile` (64 keys) as bits, for the backward:
// word 2·tile (keys 0..31 of the tile) and 2·tile + 1 (32..63) of rows row_a
// and row_a + 8, bit k for key k of the word. `keep` has bit 4i + e for key
// 8i + 2·t4 + (e & 1) of row_a (e < 2) or row_a + 8; the quad's four lanes
// OR their bits together and each stores one of the four words.
__device__ __forceinline__ void store_keep_bits(uint32_t* bits, int words, int bh, int L, int row_a, int tile,
                                                uint32_t keep, int t4) {
  uint32_t w[4] = {0u, 0u, 0u, 0u};  // row_a keys 0..31, 32..63; row_b the same
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int shift = 8 * (i & 3) + 2 * t4;
    w[i >> 2] |= ((keep >> (4 * i)) & 3u) << shift;
    w[2 + (i >> 2)] |= ((keep >> (4 * i + 2)) & 3u) << shift;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    w[j] |= __shfl_xor_sync(0xffffffffu, w[j], 1);
    w[j] |= __shfl_xor_sync(0xffffffffu, w[j], 2);
  }
  const int row = row_a + 8 * (t4 >> 1);
  const uint32_t mine = t4 == 0 ? w[0] : t4 == 1 ? w[1] : t4 == 2 ? w[2] : w[3];
  if (row < L) bits[(static_cast<int64_t>(bh) * L + row) * words + 2 * tile + (t4 & 1)] = mine;
}

#endif  // ANATOMY_WGMMA

template <typename T, bool kDrop>
__global__ void __launch_bounds__(kThreads, 2) hopper_fwd_kernel(const FwdParams p) {
#if ANATOMY_WGMMA
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (base - raw);
  const uint32_t sQ = base, sK = base + kQBytes, sV = sK + 2 * kTileBytes;
  int64_t* sMask = reinterpret_cast<int64_t*>(smem + kQBytes + 4 * kTileBytes);

  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  // One-dimensional grid, the query blocks of a (batch entry, head) adjacent
  // (so that they share its keys in L2), and no 65535 limit on B·heads.
  const int L = p.L, q_blocks = (L + kRows - 1) / kRows;
  const int bh = static_cast<int>(blockIdx.x / q_blocks), b = bh / p.heads, h = bh % p.heads;
  const int q0 = static_cast<int>(blockIdx.x % q_blocks) * kRows;
  const int64_t rs = static_cast<int64_t>(p.heads) * kD;
  const int64_t off = static_cast<int64_t>(b) * L * rs + static_cast<int64_t>(h) * kD;
  const uint16_t* gq = static_cast<const uint16_t*>(p.q) + off;
  const uint16_t* gk = static_cast<const uint16_t*>(p.k) + off;
  const uint16_t* gv = static_cast<const uint16_t*>(p.v) + off;
  const int64_t* mrow = p.mask ? p.mask + static_cast<int64_t>(b) * L : nullptr;

  const bool all_masked = !any_key_kept(mrow, L);
  const bool always_slow = all_masked || p.slow_tiles != 0;

  auto load_kv = [&](int tile, int buf) {
    const int k0 = tile * kKeys;
    load_rows<kKeys>(sK + buf * kTileBytes, gk, rs, k0, L, tid);
    load_rows<kKeys>(sV + buf * kTileBytes, gv, rs, k0, L, tid);
    if (mrow != nullptr && tid < kKeys) {
      const bool valid = k0 + tid < L;
      cp_async8(smem_u32(sMask + buf * kKeys + tid), valid ? mrow + k0 + tid : mrow, valid);
    }
  };
  load_rows<kRows>(sQ, gq, rs, q0, L, tid);
  load_kv(0, 0);
  cp_async_commit();

  // q's sign bits flipped in shared memory for a negative scale (exact), so
  // that the scores' running max scales to the max of the scaled scores.
  const int nk = (L + kKeys - 1) / kKeys;
  const int row_a = q0 + 64 * wg + 16 * warp + g, row_b = row_a + 8;  // this thread's two query rows
  const uint64_t head_base = static_cast<uint64_t>(bh) * static_cast<uint64_t>(L) * static_cast<uint64_t>(L);
  // This lane's dropout calls: keys 8i .. 8i + 7 of rows row_a and row_b for
  // the blocks i = t4 and t4 + 4 (each group of eight keys of a row is held by
  // the quad's four lanes, two keys each).
  const uint64_t drop_a = head_base + static_cast<uint64_t>(row_a) * static_cast<uint64_t>(L) + 8 * t4;
  const uint64_t drop_b = drop_a + 8 * static_cast<uint64_t>(L);
  float o[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

  const uint64_t q_desc = smem_desc(sQ + wg * 64 * kRowBytes, 16, 1024);

  for (int jt = 0; jt < nk; ++jt) {
    const int buf = jt & 1;
    cp_async_wait_all();
    if (jt == 0 && p.q_sign != 0u) flip_signs<kRows>(smem, tid, p.q_sign);  // the chunks this thread loaded
    fence_async_shared();
    int need = 0;
    if (tid < kKeys) {
      const int key = jt * kKeys + tid;
      need = key >= L || (mrow != nullptr && sMask[buf * kKeys + tid] == 0);
    }
    const bool masked_tile = __syncthreads_or(need) != 0 || always_slow;
    if (jt + 1 < nk) {
      load_kv(jt + 1, buf ^ 1);
      cp_async_commit();
    }

    // S = Q·Kᵀ.
    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.0f;
    const uint32_t k_tile = sK + buf * kTileBytes;
    fence_regs(s);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk)
      wgmma_ss<T>(s, q_desc + ((kk * 32) >> 4), smem_desc(k_tile + kk * 32, 16, 1024), kk);
    wgmma_commit();
    // The dropout bits while the tensor cores compute S (the generator's
    // multiplies are on the integer pipe): bit 4i + e of `keep` is
    // accumulator element 4i + e.
    uint32_t keep = 0xffffffffu;
    if constexpr (kDrop) {
      const uint64_t k0 = static_cast<uint64_t>(jt) * kKeys;
      // Byte j of `mine`: the eight keep bits of (row a, block t4), (row a, block t4 + 4), (row b, block t4),
      // (row b, block t4 + 4).
      const uint32_t mine = keep_run8(p.dropout, drop_a + k0) | keep_run8(p.dropout, drop_a + k0 + 32) << 8 |
                            keep_run8(p.dropout, drop_b + k0) << 16 | keep_run8(p.dropout, drop_b + k0 + 32) << 24;
      // From lane s of the quad, blocks s and s + 4: this lane's keys are bits 2·t4, 2·t4 + 1 of each
      // byte, at accumulator bits 4i + {0, 1} (row a) and 4i + {2, 3} (row b).
      keep = 0u;
#pragma unroll
      for (int src = 0; src < 4; ++src) {
        const uint32_t x = __shfl_sync(0xffffffffu, mine, (lane & ~3) | src) >> (2 * t4);
        keep |= (x & 3u) << (4 * src) | ((x >> 8) & 3u) << (4 * src + 16) | ((x >> 16) & 3u) << (4 * src + 2) |
                ((x >> 24) & 3u) << (4 * src + 18);
      }
      if (p.keep_bits != nullptr) store_keep_bits(p.keep_bits, p.keep_words, bh, L, row_a, jt, keep, t4);
    }

    wgmma_wait_all();
    fence_regs(s);

    float cs = p.abs_scale_log2;
    if (masked_tile) {
      cs = 1.0f;
      const int64_t* kmask = sMask + buf * kKeys;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = 8 * i + 2 * t4 + e;
          const bool key_ok = jt * kKeys + col < L && (all_masked || mrow == nullptr || kmask[col] != 0);
          s[4 * i + e] = key_ok ? (all_masked ? 0.0f : s[4 * i + e] * p.abs_scale_log2) : -INFINITY;
          s[4 * i + 2 + e] = key_ok ? (all_masked ? 0.0f : s[4 * i + 2 + e] * p.abs_scale_log2) : -INFINITY;
        }
      }
    }

    // New running maxima of the two rows (shared by the 4 lanes of a quad).
    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      mx_a = fmaxf(mx_a, fmaxf(s[4 * i], s[4 * i + 1]));
      mx_b = fmaxf(mx_b, fmaxf(s[4 * i + 2], s[4 * i + 3]));
    }
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
    const float new_a = fmaxf(m_a, mx_a * cs), new_b = fmaxf(m_b, mx_b * cs);
    // A row whose keys so far are all masked has max -inf: subtract 0 instead.
    const float ref_a = new_a == -INFINITY ? 0.0f : new_a, ref_b = new_b == -INFINITY ? 0.0f : new_b;
    const float alpha_a = new_a == m_a ? 1.0f : fast_exp2(m_a - ref_a);
    const float alpha_b = new_b == m_b ? 1.0f : fast_exp2(m_b - ref_b);
    m_a = new_a;
    m_b = new_b;
    l_a *= alpha_a;
    l_b *= alpha_b;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      o[4 * i] *= alpha_a;
      o[4 * i + 1] *= alpha_a;
      o[4 * i + 2] *= alpha_b;
      o[4 * i + 3] *= alpha_b;
    }

    // Probabilities (the sum over undropped ones), then the mask, as A operands.
    uint32_t a[4][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float pv[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = fast_exp2(fmaf(s[4 * i + e], cs, (e < 2) ? -ref_a : -ref_b));
        if (e < 2) l_a += x; else l_b += x;
        pv[e] = (!kDrop || ((keep >> (4 * i + e)) & 1u)) ? x : 0.0f;
      }
      // n8 block i is half of the A operand of keys 16·(i/2) .. : registers
      // {0, 1} for the even block, {2, 3} for the odd one.
      a[i >> 1][2 * (i & 1)] = pack2<T>(pv[0], pv[1]);
      a[i >> 1][2 * (i & 1) + 1] = pack2<T>(pv[2], pv[3]);
    }

    // O += P·V.
    const uint32_t v_tile = sV + buf * kTileBytes;
    fence_regs(o);
    fence_regs(a);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) wgmma_rs_tb<T>(o, a[kk], smem_desc(v_tile + kk * 16 * kRowBytes, 1024, 1024));
    wgmma_commit();
    wgmma_wait_all();
    fence_regs(o);
  }

  // Row sums across the quad, normalise, write ctx and the log-sum-exp.
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
  const float inv_a = p.keep_scale / l_a, inv_b = p.keep_scale / l_b;
  T* gctx = static_cast<T*>(p.ctx) + off;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int d = 8 * i + 2 * t4;
    if (row_a < L) *reinterpret_cast<uint32_t*>(gctx + row_a * rs + d) = pack2<T>(o[4 * i] * inv_a, o[4 * i + 1] * inv_a);
    if (row_b < L)
      *reinterpret_cast<uint32_t*>(gctx + row_b * rs + d) = pack2<T>(o[4 * i + 2] * inv_b, o[4 * i + 3] * inv_b);
  }
  if (t4 == 0 && p.lse != nullptr) {
    float* lse = p.lse + static_cast<int64_t>(bh) * L;
    if (row_a < L) lse[row_a] = (m_a + log2f(l_a)) * kLn2;
    if (row_b < L) lse[row_b] = (m_b + log2f(l_b)) * kLn2;
  }
#else
  (void)p;
#endif
}

// ---------------------------------------------------------------------------
// Backward: one block of two warpgroups per (batch entry, head), which walks
// the key blocks of 128 keys in order (warpgroup w owns keys 64w .. 64w + 63
// of the block: dK and dV of those in registers) and, for each, every query
// tile of 64 (Q, dO, the row terms double-buffered), keeping dQ of all L rows
// in shared memory (float32, L <= kBwdMaxL): no other block touches this
// (batch entry, head), so dQ is summed in key-block order, deterministically.
// Per query tile a warpgroup computes Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (64 keys x
// 64 queries, both operands K-major in shared memory), P = exp2(Sᵀ·scale·log2e
// − lse·log2e) (0 for masked keys), dS = P∘(dP∘keep/(1-p) − Δ), then
// dV += (P∘keep/(1-p))ᵀ·dO and dK += dSᵀ·Q from registers (dO and Q read
// N-major), and stores dSᵀ (16-bit) to shared memory; after a barrier,
// warpgroup w computes columns 32w .. 32w + 31 of this tile's dQ = dS·K over
// the block's 128 keys (dS read M-major, K N-major) and adds them into the
// shared dQ. With dropout the mask comes from the forward's bits (cp.async
// with each query tile's rows, 16 bytes a row for the block's 128 keys),
// unpacked while the tensor cores compute Sᵀ and dPᵀ; the backward has no
// generator of its own.
// ---------------------------------------------------------------------------

constexpr int kBwdKeys = 128;                          // keys per block step (64 per warpgroup)
constexpr int kBwdRows = 64;                           // query rows per tile
constexpr int kBwdMaxL = 512;                          // dQ of L rows in shared memory
constexpr int kBwdKBytes = kBwdKeys * kRowBytes;       // 16 KiB: K or V of a key block, or dSᵀ
constexpr int kBwdQBytes = kBwdRows * kRowBytes;       // 8 KiB: a Q or dO tile
constexpr int kBwdFixedBytes =
    1024 + 3 * kBwdKBytes + 4 * kBwdQBytes + 4 * kBwdRows * 4 + kBwdKeys * 4 + 2 * kBwdRows * 16;

constexpr int bwd_smem_bytes(int L) {
  return kBwdFixedBytes + ((L + kBwdRows - 1) / kBwdRows) * kBwdRows * kD * 4;
}

struct BwdParams {
  const void* q;
  const void* k;
  const void* v;
  const void* dout;
  const int64_t* mask;
  const float* lse2;   // lse·log2(e) [B, heads, L]
  const float* delta;  // Σ_d dO·O [B, heads, L]
  void* dq;
  void* dk;
  void* dv;
  int64_t grad_rs;  // elements from one token's row of dq, dk, dv to the next
  int L, heads;
  float scale, scale_log2;
  float keep_scale;
  DropoutKeys dropout;
  const uint32_t* keep_bits;  // nullptr (regenerate the mask), or the forward's bits
  int keep_words;
};

template <typename T, bool kDrop>
__global__ void __launch_bounds__(kThreads, 1) hopper_bwd_kernel(const BwdParams p) {
#if ANATOMY_WGMMA
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (base - raw);
  const uint32_t sK = base, sV = sK + kBwdKBytes, sS = sV + kBwdKBytes;  // sS: dSᵀ [128 keys][64 queries]
  const uint32_t sQ = sS + kBwdKBytes, sO = sQ + 2 * kBwdQBytes;        // Q, dO: 2 buffers each
  float* sLse2 = reinterpret_cast<float*>(smem + 3 * kBwdKBytes + 4 * kBwdQBytes);  // [2][64]
  float* sDelta = sLse2 + 2 * kBwdRows;                                               // [2][64]
  int* sKeyOk = reinterpret_cast<int*>(sDelta + 2 * kBwdRows);                        // [128]
  uint32_t* sBits = reinterpret_cast<uint32_t*>(sKeyOk + kBwdKeys);                   // [2][64 rows][4 words]
  float* sdQ = reinterpret_cast<float*>(sBits + 2 * kBwdRows * 4);                     // [L rows][64], swizzled

  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int L = p.L;
  const int64_t rs = static_cast<int64_t>(p.heads) * kD;
  const int64_t off = static_cast<int64_t>(b) * L * rs + static_cast<int64_t>(h) * kD;
  const int64_t goff = static_cast<int64_t>(b) * L * p.grad_rs + static_cast<int64_t>(h) * kD;
  const uint16_t* gq = static_cast<const uint16_t*>(p.q) + off;
  const uint16_t* gk = static_cast<const uint16_t*>(p.k) + off;
  const uint16_t* gv = static_cast<const uint16_t*>(p.v) + off;
  const uint16_t* gdo = static_cast<const uint16_t*>(p.dout) + off;
  const float* glse2 = p.lse2 + static_cast<int64_t>(bh) * L;
  const float* gdelta = p.delta + static_cast<int64_t>(bh) * L;
  const int64_t* mrow = p.mask ? p.mask + static_cast<int64_t>(b) * L : nullptr;

  const bool all_masked = !any_key_kept(mrow, L);
  const int nq = (L + kBwdRows - 1) / kBwdRows, nkb = (L + kBwdKeys - 1) / kBwdKeys;
  for (int i = tid; i < nq * kBwdRows * kD; i += kThreads) sdQ[i] = 0.0f;

  int kb_now = 0;  // the key block whose mask bits load_query_tile fetches
  auto load_query_tile = [&](int it, int buf) {
    const int q0 = it * kBwdRows;
    load_rows<kBwdRows>(sQ + buf * kBwdQBytes, gq, rs, q0, L, tid);
    load_rows<kBwdRows>(sO + buf * kBwdQBytes, gdo, rs, q0, L, tid);
    if (p.keep_bits != nullptr && tid >= 2 * kBwdRows && tid < 3 * kBwdRows) {
      // The forward's mask bits of these 64 queries and this key block's 128 keys: 16 bytes a row.
      const int i = tid - 2 * kBwdRows;
      const bool valid = q0 + i < L;
      const uint32_t* src = p.keep_bits + (static_cast<int64_t>(bh) * L + (valid ? q0 + i : 0)) * p.keep_words + 4 * kb_now;
      cp_async16(smem_u32(sBits + (buf * kBwdRows + i) * 4), src, valid);
    }
    if (tid < 2 * kBwdRows) {
      const int i = tid & (kBwdRows - 1);
      const bool valid = q0 + i < L;
      const float* src = tid < kBwdRows ? glse2 : gdelta;
      float* dst = (tid < kBwdRows ? sLse2 : sDelta) + buf * kBwdRows + i;
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)),
                   "l"(valid ? src + q0 + i : src), "r"(valid ? 4 : 0)
                   : "memory");
    }
  };

  const int key_a = 64 * wg + 16 * warp + g;  // this thread's keys within the block: key_a, key_a + 8

  for (int kb = 0; kb < nkb; ++kb) {
    const int k0 = kb * kBwdKeys;
    kb_now = kb;
    load_rows<kBwdKeys>(sK, gk, rs, k0, L, tid);
    load_rows<kBwdKeys>(sV, gv, rs, k0, L, tid);
    if (tid < kBwdKeys) {
      const int key = k0 + tid;
      sKeyOk[tid] = key < L && (all_masked || mrow == nullptr || mrow[key] != 0);
    }
    load_query_tile(0, 0);
    cp_async_commit();

    float dk[32], dv[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) dk[i] = dv[i] = 0.0f;

    for (int it = 0; it < nq; ++it) {
      const int buf = it & 1;
      cp_async_wait_all();
      fence_async_shared();
      __syncthreads();
      if (it + 1 < nq) {
        load_query_tile(it + 1, buf ^ 1);
        cp_async_commit();
      }
      const uint32_t q_tile = sQ + buf * kBwdQBytes, o_tile = sO + buf * kBwdQBytes;

      // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ for this warpgroup's 64 keys.
      float st[32], dpt[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) st[i] = dpt[i] = 0.0f;
      fence_regs(st);
      fence_regs(dpt);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk)
        wgmma_ss<T>(st, smem_desc(sK + wg * 64 * kRowBytes + kk * 32, 16, 1024), smem_desc(q_tile + kk * 32, 16, 1024),
                    kk);
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk)
        wgmma_ss<T>(dpt, smem_desc(sV + wg * 64 * kRowBytes + kk * 32, 16, 1024),
                    smem_desc(o_tile + kk * 32, 16, 1024), kk);
      wgmma_commit();
      // The forward's mask bits while the tensor cores work: bit 4i + e of `keep` is element 4i + e.
      uint32_t keep = 0xffffffffu;
      if constexpr (kDrop) {
        {
          // Word (2·wg + warp/2) of query q holds keys 32·(2·wg + warp/2) .. of the block: key_a at bit
          // 16·(warp & 1) + g, key_a + 8 eight above.
          const uint32_t* words = sBits + buf * kBwdRows * 4 + 2 * wg + (warp >> 1);
          const int bit = 16 * (warp & 1) + g;
          keep = 0u;
#pragma unroll
          for (int i = 0; i < 8; ++i) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const uint32_t w = words[(8 * i + 2 * t4 + e) * 4] >> bit;
              keep |= (w & 1u) << (4 * i + e);
              keep |= ((w >> 8) & 1u) << (4 * i + 2 + e);
            }
          }
        }
      }
      wgmma_wait_all();
      fence_regs(st);
      fence_regs(dpt);

      const bool ok_a = sKeyOk[key_a] != 0, ok_b = sKeyOk[key_a + 8] != 0;
      const float* lse2 = sLse2 + buf * kBwdRows;
      const float* delta = sDelta + buf * kBwdRows;
      uint32_t pa[4][4], sa[4][4];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        float pd[4], ds[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qc = 8 * i + 2 * t4 + (e & 1);
          const bool ok = (e < 2) ? ok_a : ok_b;
          const float x = all_masked ? 0.0f : st[4 * i + e] * p.scale_log2;
          const float pr = ok ? fast_exp2(x - lse2[qc]) : 0.0f;
          const bool kept = !kDrop || ((keep >> (4 * i + e)) & 1u);
          pd[e] = kept ? pr * p.keep_scale : 0.0f;
          ds[e] = pr * ((kept ? dpt[4 * i + e] * p.keep_scale : 0.0f) - delta[qc]);
        }
        pa[i >> 1][2 * (i & 1)] = pack2<T>(pd[0], pd[1]);
        pa[i >> 1][2 * (i & 1) + 1] = pack2<T>(pd[2], pd[3]);
        sa[i >> 1][2 * (i & 1)] = pack2<T>(ds[0], ds[1]);
        sa[i >> 1][2 * (i & 1) + 1] = pack2<T>(ds[2], ds[3]);
      }

      // dV += (P∘keep)ᵀ·dO, dK += dSᵀ·Q.
      fence_regs(dv);
      fence_regs(dk);
      fence_regs(pa);
      fence_regs(sa);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBwdRows / 16; ++kk)
        wgmma_rs_tb<T>(dv, pa[kk], smem_desc(o_tile + kk * 16 * kRowBytes, 1024, 1024));
#pragma unroll
      for (int kk = 0; kk < kBwdRows / 16; ++kk)
        wgmma_rs_tb<T>(dk, sa[kk], smem_desc(q_tile + kk * 16 * kRowBytes, 1024, 1024));
      wgmma_commit();
      // dSᵀ to shared memory while they run: row key_a (and + 8), queries
      // 8i + 2·t4 + {0, 1} are 4 bytes in 16-byte chunk i.
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int r0 = key_a, r1 = key_a + 8;
        *reinterpret_cast<uint32_t*>(smem + (sS - base) + r0 * kRowBytes + ((i ^ (r0 & 7)) << 4) + 4 * t4) =
            sa[i >> 1][2 * (i & 1)];
        *reinterpret_cast<uint32_t*>(smem + (sS - base) + r1 * kRowBytes + ((i ^ (r1 & 7)) << 4) + 4 * t4) =
            sa[i >> 1][2 * (i & 1) + 1];
      }
      fence_async_shared();
      wgmma_wait_all();
      fence_regs(dv);
      fence_regs(dk);
      __syncthreads();

      // dQ[:, 32·wg ..] of this query tile += dS·K over the block's 128 keys.
      float dq[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) dq[i] = 0.0f;
      fence_regs(dq);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBwdKeys / 16; ++kk)
        wgmma_ss_n32_tt<T>(dq, smem_desc(sS + kk * 16 * kRowBytes, 1024, 1024),
                           smem_desc(sK + kk * 16 * kRowBytes + 64 * wg, 1024, 1024), kk);
      wgmma_commit();
      wgmma_wait_all();
      fence_regs(dq);
      // Row r of the tile, column d: sdQ[(q0 + r)·64 + (d ^ 8·(r & 7))] (8-float
      // groups swizzled by row, so that a warp's float2 accesses spread).
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = 16 * warp + g + 8 * half;
          const int d = 32 * wg + 8 * i + 2 * t4;
          float2* cell = reinterpret_cast<float2*>(sdQ + (it * kBwdRows + r) * kD + (d ^ (8 * (r & 7))));
          float2 x = *cell;
          x.x += dq[4 * i + 2 * half];
          x.y += dq[4 * i + 2 * half + 1];
          *cell = x;
        }
      }
    }

    // dK (times the scale) and dV of this warpgroup's keys.
    T* gdk = static_cast<T*>(p.dk) + goff;
    T* gdv = static_cast<T*>(p.dv) + goff;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int d = 8 * i + 2 * t4;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int key = k0 + key_a + 8 * half;
        if (key < L) {
          *reinterpret_cast<uint32_t*>(gdk + key * p.grad_rs + d) =
              pack2<T>(dk[4 * i + 2 * half] * p.scale, dk[4 * i + 2 * half + 1] * p.scale);
          *reinterpret_cast<uint32_t*>(gdv + key * p.grad_rs + d) = pack2<T>(dv[4 * i + 2 * half], dv[4 * i + 2 * half + 1]);
        }
      }
    }
    __syncthreads();  // every warpgroup is done with K, V and dSᵀ before the next block's loads
  }

  // dQ = scale · Σ dS·K, 8 columns a thread.
  T* gdq = static_cast<T*>(p.dq) + goff;
  for (int i = tid; i < L * (kD / 8); i += kThreads) {
    const int r = i >> 3, d = (i & 7) * 8;
    const float* src = sdQ + r * kD + (d ^ (8 * (r & 7)));
    uint4 out;
    out.x = pack2<T>(src[0] * p.scale, src[1] * p.scale);
    out.y = pack2<T>(src[2] * p.scale, src[3] * p.scale);
    out.z = pack2<T>(src[4] * p.scale, src[5] * p.scale);
    out.w = pack2<T>(src[6] * p.scale, src[7] * p.scale);
    *reinterpret_cast<uint4*>(gdq + r * p.grad_rs + d) = out;
  }
#else
  (void)p;
#endif
}

template <typename T, bool kDrop>
void launch_backward(cudaStream_t s, const BwdParams& p, int64_t B) {
  auto kernel = hopper_bwd_kernel<T, kDrop>;
  static std::atomic<uint64_t> configured{0};
  configure_shared_memory(kernel, bwd_smem_bytes(kBwdMaxL), configured);
  kernel<<<static_cast<unsigned>(B * p.heads), kThreads, bwd_smem_bytes(p.L), s>>>(p);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

template <typename T, bool kDrop>
void launch_forward(cudaStream_t s, const FwdParams& p, int64_t B) {
  auto kernel = hopper_fwd_kernel<T, kDrop>;
  static std::atomic<uint64_t> configured{0};
  configure_shared_memory(kernel, kSmemBytes, configured);
  const dim3 grid(static_cast<unsigned>((p.L + kRows - 1) / kRows * B * p.heads));
  kernel<<<grid, kThreads, kSmemBytes, s>>>(p);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool hopper_attention_available(int64_t D) {
  if (D != kD) return false;
  // Per process: the sm_90a code runs only on a device of compute capability
  // 9.0 (the runtime picks it over the plain sm_90 build there).
  static const bool available = [] {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess || prop.major != 9 || prop.minor != 0) return false;
    wgmma_probe_kernel<<<1, 1>>>();
    int flag = 0;
    if (cudaGetLastError() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpyFromSymbol(&flag, g_wgmma_probe, sizeof flag) != cudaSuccess)
      return false;
    return flag == 1;
  }();
  return available;
}

bool hopper_attention_backward_supported(int64_t D, int64_t L) { return D == kD && L >= 1 && L <= kBwdMaxL; }

void hopper_attention_backward(cudaStream_t s, AttnType t, const void* dctx, const void* q, const void* k,
                               const void* v, const void* ctx, const float* lse, const int64_t* key_mask, int64_t B,
                               int64_t L, int64_t heads, int64_t D, float scale, const DropoutSpec& dropout, void* dq,
                               void* dk, void* dv, void* scratch, int64_t grad_row_stride, const uint32_t* keep_bits) {
  if (B == 0 || L == 0 || heads == 0) return;
  if (!hopper_attention_backward_supported(D, L))
    fail("hopper_attention_backward: head size {} and length {} are not supported (64 and at most {})", D, L,
         kBwdMaxL);
  if (B * heads > (int64_t{1} << 31) - 1) fail("hopper_attention_backward: B={} heads={} too large", B, heads);
  check_attention_dropout("hopper_attention_backward", dropout.p);
  if (grad_row_stride % 8 != 0 || grad_row_stride < heads * D)
    fail("hopper_attention_backward: gradient row stride {} (needs a multiple of 8, at least {})", grad_row_stride,
         heads * D);
  check_aligned16("hopper_attention_backward", {dctx, q, k, v, ctx, dq, dk, dv, scratch});
  const size_t row_terms = hopper_attention_scratch_bytes(B, L, heads) / 2;
  float* delta = static_cast<float*>(scratch);
  float* lse2 = reinterpret_cast<float*>(static_cast<char*>(scratch) + row_terms);
  flash_attention_row_terms(s, t, dctx, ctx, lse, B, L, heads, D, delta, lse2);
  BwdParams p{};
  p.q = q;
  p.k = k;
  p.v = v;
  p.dout = dctx;
  p.mask = key_mask;
  p.lse2 = lse2;
  p.delta = delta;
  p.dq = dq;
  p.dk = dk;
  p.dv = dv;
  p.grad_rs = grad_row_stride;
  p.L = static_cast<int>(L);
  p.heads = static_cast<int>(heads);
  p.scale = scale;
  p.scale_log2 = scale * kLog2e;
  p.keep_scale = keep_scale_of(dropout);
  p.dropout = make_dropout_keys(dropout);
  p.keep_bits = dropout.p > 0.0f ? keep_bits : nullptr;
  p.keep_words = static_cast<int>(attention_keep_words(L));
  if (dropout.p > 0.0f && keep_bits == nullptr)
    fail("hopper_attention_backward: dropout needs the forward's mask bits");
  if (p.keep_bits != nullptr && reinterpret_cast<uintptr_t>(p.keep_bits) % 16 != 0)
    fail("hopper_attention_backward: the mask bits must be 16-byte aligned");
  auto run = [&]<typename T>() {
    if (dropout.p > 0.0f) launch_backward<T, true>(s, p, B);
    else launch_backward<T, false>(s, p, B);
  };
  t == AttnType::BF16 ? run.template operator()<__nv_bfloat16>() : run.template operator()<__half>();
}

void hopper_attention_forward(cudaStream_t s, AttnType t, const void* q, const void* k, const void* v,
                              const int64_t* key_mask, int64_t B, int64_t L, int64_t heads, int64_t D, float scale,
                              const DropoutSpec& dropout, void* ctx, float* lse, uint32_t* keep_bits) {
  if (B == 0 || L == 0 || heads == 0) return;
  if (D != kD) fail("hopper_attention_forward: head size {} is not supported (64 only)", D);
  if (L > (int64_t{1} << 24) || B * L * heads >= (int64_t{1} << 31))
    fail("hopper_attention_forward: shape B={} L={} heads={} too large", B, L, heads);
  check_attention_dropout("hopper_attention_forward", dropout.p);
  check_aligned16("hopper_attention_forward", {q, k, v, ctx});
  FwdParams p{};
  p.q = q;
  p.k = k;
  p.v = v;
  p.mask = key_mask;
  p.ctx = ctx;
  p.lse = lse;
  p.L = static_cast<int>(L);
  p.heads = static_cast<int>(heads);
  p.abs_scale_log2 = std::fabs(scale) * kLog2e;
  p.q_sign = scale < 0.0f ? 0x80008000u : 0u;
  p.slow_tiles = scale == 0.0f ? 1 : 0;
  p.keep_scale = keep_scale_of(dropout);
  p.dropout = make_dropout_keys(dropout);
  p.keep_bits = dropout.p > 0.0f ? keep_bits : nullptr;
  p.keep_words = static_cast<int>(attention_keep_words(L));
  const bool drop = dropout.p > 0.0f;
  if (t == AttnType::BF16) {
    drop ? launch_forward<__nv_bfloat16, true>(s, p, B) : launch_forward<__nv_bfloat16, false>(s, p, B);
  } else {
    drop ? launch_forward<__half, true>(s, p, B) : launch_forward<__half, false>(s, p, B);
  }
}

}  // namespace anatomy::cuda
