// dropout_keys.cuh: the dropout mask of core/random.h as the CUDA kernels
// generate it (the fused attentions, the fused residual LayerNorm, the
// element-wise dropout), with the per-launch constants precomputed on the
// host. Included from .cu only.
#pragma once

#include <cmath>
#include <cstdint>

#include "anatomy/core/random.h"
#include "anatomy/kernels/backend.h"

namespace anatomy::cuda {

// The reference's dropout mask (anatomy/core/random.h): element `index` of
// `stream` is kept when the uniform from word (index & 3) of Philox-4x32-10 at
// counter (index >> 2, stream) under key `seed` is >= p, so one generator call
// gives the bits of the four elements 4c .. 4c + 3. Everything that does not
// depend on the counter is worked out once on the host: the round keys (kernel
// parameters, so that they are operands from the constant bank rather than
// additions per round), the first round's product of the constant counter
// word (the stream), and the comparison turned into an integer one. A call
// costs 19 wide multiplies (20 in philox4x32) and no key additions; the bits
// are the reference's (checked against dropout_keep4 / dropout_keep for
// millions of counters and indices, on the host, where this compiles too).
struct DropoutKeys {
  uint32_t k0[10], k1[10];  // round keys
  uint32_t r0_c0;           // hi(M1 · stream_lo) ^ k0[0]: round 0's new word 0, before ^ counter_hi
  uint32_t r0_c1;           // lo(M1 · stream_lo): round 0's new word 1
  uint32_t r0_c3k1;         // stream_hi ^ k1[0]
  uint32_t keep_min;        // kept iff the element's word >= keep_min
  // attention_keep8's comparison (core/random.h): kept iff a 16-bit half >=
  // the threshold; both halves of keep_min16x2 hold it, for __vcmpgeu2.
  // none16: the threshold is 65536 (p > 65535/65536), nothing is kept.
  uint32_t keep_min16x2;
  uint32_t none16;
};

constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;

inline DropoutKeys make_dropout_keys(const DropoutSpec& d) {
  DropoutKeys k{};
  uint32_t a = static_cast<uint32_t>(d.seed), b = static_cast<uint32_t>(d.seed >> 32);
  for (int r = 0; r < 10; ++r) {
    k.k0[r] = a;
    k.k1[r] = b;
    a += 0x9E3779B9u;
    b += 0xBB67AE85u;
  }
  const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * static_cast<uint32_t>(d.stream);
  k.r0_c0 = static_cast<uint32_t>(p1 >> 32) ^ k.k0[0];
  k.r0_c1 = static_cast<uint32_t>(p1);
  k.r0_c3k1 = static_cast<uint32_t>(d.stream >> 32) ^ k.k1[0];
  // uniform = (w >> 8) · 2^-24 exactly, so uniform >= p  <=>  (w >> 8) >= ceil(p · 2^24)
  // <=>  w >= 256 · ceil(p · 2^24); below 2^32 for every float p < 1.
  const double t = std::ceil(static_cast<double>(d.p) * 16777216.0);
  k.keep_min = static_cast<uint32_t>(t * 256.0);
  const uint32_t t16 = attention_drop_threshold16(d.p);
  k.none16 = t16 > 0xFFFFu ? 1u : 0u;
  k.keep_min16x2 = k.none16 ? 0u : t16 | t16 << 16;
  return k;
}


// The scale of kept elements, 1/(1-p) in float as the reference computes it
// (1 without dropout).
inline float keep_scale_of(const DropoutSpec& d) { return d.p > 0.0f ? 1.0f / (1.0f - d.p) : 1.0f; }

// The four Philox-4x32-10 words of `counter` under the launch's keys.
__host__ __device__ __forceinline__ void philox_words(const DropoutKeys& K, uint64_t counter, uint32_t (&w)[4]) {
  const uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t x0 = K.r0_c0 ^ c1, x1 = K.r0_c1;
  // A 32x32 -> 64-bit product gives both halves in one instruction (IMAD.WIDE.U32).
  const uint64_t p3 = static_cast<uint64_t>(kPhiloxM0) * c0;
  uint32_t x2 = static_cast<uint32_t>(p3 >> 32) ^ K.r0_c3k1, x3 = static_cast<uint32_t>(p3);
#pragma unroll
  for (int r = 1; r < 10; ++r) {
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * x2, p0 = static_cast<uint64_t>(kPhiloxM0) * x0;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ x1 ^ K.k0[r];
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ x3 ^ K.k1[r];
    x1 = static_cast<uint32_t>(p1);
    x3 = static_cast<uint32_t>(p0);
    x0 = n0;
    x2 = n2;
  }
  w[0] = x0;
  w[1] = x1;
  w[2] = x2;
  w[3] = x3;
}

// Keep bits of elements 4·counter .. 4·counter + 3: bit w for element 4·counter + w
// (dropout_keep4 of core/random.h).
__host__ __device__ __forceinline__ uint32_t keep4(const DropoutKeys& K, uint64_t counter) {
  uint32_t x[4];
  philox_words(K, counter, x);
  return static_cast<uint32_t>(x[0] >= K.keep_min) | static_cast<uint32_t>(x[1] >= K.keep_min) << 1 |
         static_cast<uint32_t>(x[2] >= K.keep_min) << 2 | static_cast<uint32_t>(x[3] >= K.keep_min) << 3;
}

// Keep bits of elements 8·counter .. 8·counter + 7 of the attention mask of
// the Hopper kernels: bit e for element 8·counter + e (attention_keep8 of
// core/random.h).
__host__ __device__ __forceinline__ uint32_t keep8(const DropoutKeys& K, uint64_t counter) {
  uint32_t x[4];
  philox_words(K, counter, x);
  uint32_t bits = 0u;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#if defined(__CUDA_ARCH__)
    const uint32_t ge = __vcmpgeu2(x[i], K.keep_min16x2);  // 0xffff in each half that is >= the threshold
    bits |= (ge & 1u) << (2 * i) | ((ge >> 16) & 1u) << (2 * i + 1);
#else
    const uint32_t t = K.keep_min16x2 & 0xFFFFu;
    bits |= static_cast<uint32_t>((x[i] & 0xFFFFu) >= t) << (2 * i) | static_cast<uint32_t>((x[i] >> 16) >= t) << (2 * i + 1);
#endif
  }
  return K.none16 ? 0u : bits;
}

// Whether element `index` is kept: its own call, of which one word is used
// (the kernels' fallback when L % 4 != 0).
__host__ __device__ __forceinline__ bool keep_element(const DropoutKeys& K, uint64_t index) {
  return (keep4(K, index >> 2) >> (index & 3)) & 1u;
}

}  // namespace anatomy::cuda
