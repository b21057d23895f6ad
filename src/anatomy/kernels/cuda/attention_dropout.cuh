// attention_dropout.cuh: how the fused attention kernels' lanes share the
// calls of the reference's dropout mask (dropout_keys.cuh: one Philox call per
// four consecutive elements of a row of the [B, heads, L, L] probabilities) when
// a thread's accumulator elements are not four consecutive ones. Both the
// mma.sync m16n8 layout (flash_attention.cu) and a wgmma m64nN accumulator
// (hopper_attention.cu) give lane 4g + t4 the columns 8n + 2·t4 + {0, 1} of
// rows g and g + 8 of its 16-row slice; these helpers serve both. keep_run4
// gives the bits of four consecutive elements at any alignment (the float32
// flash kernels and the Hopper forward).
// Included from .cu only.
#pragma once

#include <cstdint>

#include "anatomy/kernels/cuda/dropout_keys.cuh"

namespace anatomy::cuda {

// Keep bits of the four consecutive elements index .. index + 3: bit e for
// element index + e. One call when index % 4 == 0 (always, when L % 4 == 0),
// else the two calls the run straddles.
__host__ __device__ __forceinline__ uint32_t keep_run4(const DropoutKeys& K, uint64_t index) {
  const uint32_t shift = static_cast<uint32_t>(index & 3);
  const uint32_t lo = keep4(K, index >> 2);
  if (shift == 0) return lo;
  const uint32_t hi = keep4(K, (index >> 2) + 1);
  return ((lo >> shift) | (hi << (4 - shift))) & 0xFu;
}

// attention_keep8's bits of the eight consecutive elements index .. index + 7
// (bit e for element index + e; the Hopper kernels' own mask): one call when
// aligned (L % 8 == 0), else the two it straddles.
__host__ __device__ __forceinline__ uint32_t keep_run8(const DropoutKeys& K, uint64_t index) {
  const uint32_t shift = static_cast<uint32_t>(index & 7);
  const uint32_t lo = keep8(K, index >> 3);
  if (shift == 0) return lo;
  const uint32_t hi = keep8(K, (index >> 3) + 1);
  return ((lo >> shift) | (hi << (8 - shift))) & 0xFFu;
}

// Spreading the nibbles of calls over the lanes that own their elements. A
// thread's mask has bit 4n + e for its accumulator element s[n][e]; its
// elements, in both kernels, pair up with those of its neighbours in groups of
// four consecutive dropout indices (when L % 4 == 0, so that no group
// straddles a row), one call per group, and each lane computes a share of the
// calls of its group of lanes and hands out the bits:
//
// Forward (rows = queries, columns = keys 8n + 2·t4 + {0, 1}): keys
// 8n + 4c + {0..3} are the elements of lanes t4 = 2c (words 0, 1) and 2c + 1
// (words 2, 3) in the same row. Lane j = t4 & 1 makes the 8 calls of its row
// j (row_a or row_b), n = 0..7, into nibble n of `calls`; bits 4n + 2j + {0, 1}
// (its row's elements) are its own, and its words of row j go to the partner
// at the partner's bits for that row, 4n + 2j + {0, 1}.
__device__ __forceinline__ uint32_t share_pairs(uint32_t calls, int j) {
  const uint32_t own = calls & (0x33333333u << (2 * j));
  const uint32_t give = j ? (calls << 2) & 0xCCCCCCCCu : (calls >> 2) & 0x33333333u;
  return own | __shfl_xor_sync(0xffffffffu, give, 1);
}
// Backward (rows = keys key_a = 16w + g and key_b = key_a + 8, columns =
// queries 8n + 2·t4 + {0, 1}): keys 4m .. 4m + 3 of one query are the elements
// of the four lanes g = 4m' + {0..3} (same t4, lane ids 4 apart), word g & 3,
// at the same bit 4n + e in each. Lane j = g & 3 makes the 8 calls of its
// element e = j, n = 0..7, into nibble n of `calls`: bit 4n + w of it is lane
// w's bit 4n + j. So lane j keeps bits w = j and sends lane j ^ d (d = 1..3,
// lane id ^ 4d) bits w = j ^ d, each moved to 4n + j.
__device__ __forceinline__ uint32_t share_quads(uint32_t calls, int j) {
  uint32_t keep = calls & (0x11111111u << j);
#pragma unroll
  for (int d = 1; d < 4; ++d)
    keep |= __shfl_xor_sync(0xffffffffu, ((calls >> (j ^ d)) & 0x11111111u) << j, 4 * d);
  return keep;
}

// Dropout modes of the kernels (a template parameter: no run-time branch
// around the mask's generator calls).
constexpr int kNoDrop = 0;      // no dropout
constexpr int kDropGroups = 1;  // L % 4 == 0: the lanes holding a call's four elements share it
constexpr int kDropEach = 2;    // otherwise: a call per element

// The forward's dropout mask as the backward's lanes hold it: bit 4n + e of
// the lane (g, t4) of the warp whose keys start at kw0 (= key tile start +
// 16·warp), at the query tile starting at q0, is element (key kw0 + g (+ 8 for e >= 2),
// query q0 + 8n + 2·t4 + (e & 1)). kDropGroups (L % 4 == 0): keys
// 4m .. 4m + 3 of one query are the elements of four lanes (g = 4m' + {0..3},
// same t4), which share the calls (share_quads): 8 per lane, one per 4
// elements. kDropEach: a call per element. All 32 lanes must call it.
template <int kDrop>
__device__ __forceinline__ uint32_t bwd_keep_bits(const DropoutKeys& keys, uint64_t head_base, int L, int kw0, int q0,
                                                  int g, int t4) {
  const uint64_t row0 = head_base + static_cast<uint64_t>(q0 + 2 * t4) * static_cast<uint64_t>(L);
  if constexpr (kDrop == kDropGroups) {
    // This lane's calls: element e = j of every n, i.e. query q0 + 8n + 2·t4 + (j & 1) and the
    // keys of key_a's group (j < 2) or key_b's, kw0 + 4·(g >> 2) (+ 8).
    const int j = g & 3;
    const uint64_t c0 = (row0 + static_cast<uint64_t>(j & 1) * static_cast<uint64_t>(L) +
                         static_cast<uint64_t>(kw0 + 4 * (g >> 2) + 8 * (j >> 1))) >> 2;
    const uint64_t step = 2 * static_cast<uint64_t>(L);  // 8 queries of L elements, in groups of 4
    uint32_t calls = 0u;
#pragma unroll
    for (int n = 0; n < 8; ++n) calls |= keep4(keys, c0 + step * n) << (4 * n);
    return share_quads(calls, j);
  } else {
    const int key_a = kw0 + g, key_b = key_a + 8;
    uint32_t bits = 0u;
#pragma unroll 4
    for (int i = 0; i < 32; ++i) {
      const int n = i >> 2, e = i & 3;
      const uint64_t idx = row0 + static_cast<uint64_t>(n * 8 + (e & 1)) * static_cast<uint64_t>(L) +
                           static_cast<uint64_t>((e >> 1) ? key_b : key_a);
      bits |= static_cast<uint32_t>(keep_element(keys, idx)) << i;
    }
    return bits;
  }
}

}  // namespace anatomy::cuda
