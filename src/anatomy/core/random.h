// random.h: counter-based random numbers (Philox-4x32-10, Salmon et al. 2011).
// A random value is a pure function of (seed, stream, index), so the CPU and
// GPU backends produce the same dropout masks and initial weights, a backward
// pass can replay a forward pass's mask instead of storing it, and results do
// not depend on thread scheduling.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ANATOMY_HD __host__ __device__ __forceinline__
#else
#define ANATOMY_HD inline
#endif

namespace anatomy {

struct Philox4 {
  uint32_t v[4];
};

ANATOMY_HD Philox4 philox4x32(uint64_t key64, uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3) {
  uint32_t k0 = static_cast<uint32_t>(key64), k1 = static_cast<uint32_t>(key64 >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 24 random bits.
ANATOMY_HD float uniform_from_bits(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

// The uniform number for element `index` of random stream `stream` under `seed`.
ANATOMY_HD float random_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  Philox4 r = philox4x32(seed, static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                         static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32));
  return uniform_from_bits(r.v[0]);
}

// Standard normal for element `index` of `stream` (Box-Muller on two uniforms).
ANATOMY_HD double random_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  Philox4 r = philox4x32(seed, static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                         static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32));
  // 53-bit uniforms in (0, 1] and [0, 1).
  double u1 = (static_cast<double>((static_cast<uint64_t>(r.v[0]) << 21) ^ r.v[1]) + 1.0) * 0x1p-53;
  double u2 = static_cast<double>((static_cast<uint64_t>(r.v[2]) << 21) ^ r.v[3]) * 0x1p-53;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

// Dropout. One Philox call gives the masks of four consecutive elements:
// element `index` of `stream` is kept when the uniform from word (index & 3)
// of Philox-4x32-10 at counter (index >> 2, stream) under key `seed` is >= p.
// (random_uniform, by contrast, uses word 0 of the call at counter `index`.)
// Groups of four are aligned on the element index, so a kernel that owns the
// elements 4c .. 4c + 3 makes one generator call for all of them.

// The four Philox words of dropout counter `counter` (elements 4·counter .. 4·counter + 3).
ANATOMY_HD Philox4 dropout_philox(uint64_t seed, uint64_t stream, uint64_t counter) {
  return philox4x32(seed, static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32),
                    static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32));
}

// Keep bits of elements 4·counter .. 4·counter + 3: bit w (0..3) for element 4·counter + w.
ANATOMY_HD uint32_t dropout_keep4(uint64_t seed, uint64_t stream, uint64_t counter, float p) {
  const Philox4 r = dropout_philox(seed, stream, counter);
  uint32_t bits = 0;
  for (int w = 0; w < 4; ++w) bits |= static_cast<uint32_t>(uniform_from_bits(r.v[w]) >= p) << w;
  return bits;
}

// Whether element `index` of `stream` is kept (dropout probability p).
ANATOMY_HD bool dropout_keep(uint64_t seed, uint64_t stream, uint64_t index, float p) {
  const Philox4 r = dropout_philox(seed, stream, index >> 2);
  const uint32_t w = static_cast<uint32_t>(index & 3);
  const uint32_t bits = w == 0 ? r.v[0] : w == 1 ? r.v[1] : w == 2 ? r.v[2] : r.v[3];
  return uniform_from_bits(bits) >= p;
}

// The attention probabilities' mask of the CUDA backend's Hopper kernels
// (kernels/cuda/hopper_attention.cu): one Philox call per eight consecutive
// elements, each compared as a 16-bit number, which halves the generator's
// work against dropout_keep4. Element `index` of `stream` is kept when half
// (index & 1) (0: the low 16 bits) of word ((index >> 1) & 3) of Philox-4x32-10
// at counter (index >> 3, stream) under key `seed` is >= ceil(p·65536). So an
// element is kept with probability 1 - ceil(p·65536)/65536 (0.899994 for
// p = 0.1; PyTorch's flash attention compares 8-bit numbers: 0.898); kept
// values are scaled by 1/(1-p) as everywhere.
ANATOMY_HD uint32_t attention_drop_threshold16(float p) {
  return static_cast<uint32_t>(std::ceil(static_cast<double>(p) * 65536.0));
}
// Keep bits of elements 8·counter .. 8·counter + 7: bit e for element 8·counter + e.
ANATOMY_HD uint32_t attention_keep8(uint64_t seed, uint64_t stream, uint64_t counter, float p) {
  const Philox4 r = dropout_philox(seed, stream, counter);
  const uint32_t t = attention_drop_threshold16(p);
  uint32_t bits = 0;
  for (int e = 0; e < 8; ++e) {
    const uint32_t half = (r.v[e >> 1] >> (16 * (e & 1))) & 0xFFFFu;
    bits |= static_cast<uint32_t>(half >= t) << e;
  }
  return bits;
}
// Whether element `index` is kept (attention_keep8's mask).
ANATOMY_HD bool attention_keep(uint64_t seed, uint64_t stream, uint64_t index, float p) {
  return (attention_keep8(seed, stream, index >> 3, p) >> (index & 7)) & 1u;
}

}  // namespace anatomy
