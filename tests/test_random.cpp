// test_random.cpp: core/random.h. Philox-4x32-10 against the known-answer
// vectors of its authors (Random123's kat_vectors), so the generator itself
// cannot drift; the data and weight-init uniforms (word 0 at counter `index`);
// and the dropout mask's definition, written out here independently: element
// `index` is kept iff the uniform from word (index & 3) of the call at counter
// index >> 2 is >= p, one call for four consecutive elements. The GPU kernels
// are checked against dropout_keep by the GPU tests. Also core/hash.h's
// FNV-1a against the published FNV test vectors.
#include <gtest/gtest.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "anatomy/core/hash.h"
#include "anatomy/core/random.h"

using namespace anatomy;

namespace {

TEST(Philox, MatchesTheKnownAnswerVectors) {
  struct Kat {
    uint64_t key;
    uint32_t ctr[4], out[4];
  };
  const Kat kats[] = {
      {0, {0, 0, 0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {0xffffffffffffffffull,
       {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {(uint64_t{0x299f31d0u} << 32) | 0xa4093822u,
       {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    const Philox4 r = philox4x32(k.key, k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(r.v[w], k.out[w]) << "word " << w;
  }
}

// The uniform of element `index`: word 0 of the call at counter (index, stream).
float uniform_by_definition(uint64_t seed, uint64_t stream, uint64_t index) {
  const Philox4 r = philox4x32(seed, static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                               static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32));
  return static_cast<float>(r.v[0] >> 8) / 16777216.0f;
}

// Dropout: word index & 3 of the call at counter (index >> 2, stream).
bool keep_by_definition(uint64_t seed, uint64_t stream, uint64_t index, float p) {
  const uint64_t c = index >> 2;
  const Philox4 r = philox4x32(seed, static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32),
                               static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32));
  return static_cast<float>(r.v[index & 3] >> 8) / 16777216.0f >= p;
}

const uint64_t kStarts[] = {0, (uint64_t{1} << 32) - 37, (uint64_t{1} << 40) + 3, (uint64_t{1} << 62) + 1};

TEST(Random, UniformIsWordZeroAtCounterIndex) {
  for (uint64_t start : kStarts)
    for (uint64_t i = start; i < start + 2000; ++i) {
      ASSERT_EQ(random_uniform(42, 0x0123456789abcdefull, i), uniform_by_definition(42, 0x0123456789abcdefull, i))
          << i;
    }
}

TEST(Random, DropoutMaskTakesFourElementsFromEachCall) {
  const uint64_t streams[] = {7, (uint64_t{7} << 16) | 5, 0xfedcba9876543210ull};
  for (float p : {0.1f, 0.5f, 0.0f, 0.9f})
    for (uint64_t stream : streams)
      for (uint64_t start : kStarts)
        for (uint64_t i = start; i < start + 4000; ++i) {
          const bool keep = keep_by_definition(1234, stream, i, p);
          ASSERT_EQ(dropout_keep(1234, stream, i, p), keep) << "index " << i << " p " << p;
          ASSERT_EQ((dropout_keep4(1234, stream, i >> 2, p) >> (i & 3)) & 1u, keep ? 1u : 0u)
              << "index " << i << " p " << p;
        }
}

TEST(Random, DropoutMaskKnownBits) {
  // Seed 1234, stream 7, p = 0.1: elements 0..11 are kept except element 7.
  std::vector<int> bits;
  for (uint64_t i = 0; i < 12; ++i) bits.push_back(dropout_keep(1234, 7, i, 0.1f) ? 1 : 0);
  EXPECT_EQ(bits, (std::vector<int>{1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1}));
  EXPECT_EQ(dropout_keep4(1234, 7, 1, 0.1f), 0x7u);
}

// The Hopper attention's mask: eight elements a call, 16-bit halves of the
// words in order (low half first), kept when >= ceil(p·65536).
TEST(Random, AttentionMaskTakesEightSixteenBitHalvesFromEachCall) {
  for (float p : {0.1f, 0.5f, 0.0f, 0.9f})
    for (uint64_t stream : {uint64_t{7}, (uint64_t{3} << 16) | 1})
      for (uint64_t start : kStarts)
        for (uint64_t i = start; i < start + 4000; ++i) {
          const Philox4 r = dropout_philox(1234, stream, i >> 3);
          const uint32_t half = (r.v[(i >> 1) & 3] >> (16 * (i & 1))) & 0xFFFFu;
          const bool keep = static_cast<double>(half) >= std::ceil(static_cast<double>(p) * 65536.0);
          ASSERT_EQ(attention_keep(1234, stream, i, p), keep) << "index " << i << " p " << p;
          ASSERT_EQ((attention_keep8(1234, stream, i >> 3, p) >> (i & 7)) & 1u, keep ? 1u : 0u) << "index " << i;
        }
}

TEST(Random, AttentionMaskKeepsOneMinusTheRoundedP) {
  // p = 0.1: kept with probability 1 - 6554/65536.
  const int n = 400000;
  int kept = 0;
  for (int i = 0; i < n; ++i) kept += attention_keep(99, 3, static_cast<uint64_t>(i), 0.1f) ? 1 : 0;
  const double q = 1.0 - 6554.0 / 65536.0;
  EXPECT_NEAR(kept, n * q, 6.0 * std::sqrt(n * q * (1.0 - q)));
  EXPECT_EQ(attention_drop_threshold16(0.1f), 6554u);
  EXPECT_EQ(attention_keep8(1, 2, 3, 0.0f), 0xFFu);
}

TEST(Random, DropoutKeepsAboutOneMinusP) {
  for (float p : {0.0f, 0.1f, 0.5f, 0.9f}) {
    const int n = 200000;
    int kept = 0;
    for (int i = 0; i < n; ++i) kept += dropout_keep(99, 3, static_cast<uint64_t>(i), p) ? 1 : 0;
    if (p == 0.0f)
      EXPECT_EQ(kept, n);
    else
      EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.005) << "p " << p;
  }
}

TEST(Fnv1a, PublishedVectors) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
  EXPECT_EQ(fnv1a64("\xff\x80"), 0x0a9a2607b6f6e56aull);  // bytes above 127 taken unsigned
  uint64_t h = kFnv1aBasis;
  for (char c : std::string_view("foobar")) h = fnv1a_step(h, static_cast<unsigned char>(c));
  EXPECT_EQ(h, fnv1a64("foobar"));
}

}  // namespace
