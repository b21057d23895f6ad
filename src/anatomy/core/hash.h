// hash.h: FNV-1a, 64 bits: a fast, stable (same on every machine and run)
// hash of bytes, for cache file names, the tokenizer's tables and checks that
// ranks hold the same bytes. Not for anything adversarial.
#pragma once

#include <cstdint>
#include <string_view>

namespace anatomy {

constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ull;
constexpr uint64_t kFnv1aPrime = 0x100000001b3ull;

// One byte into the running hash h (start from kFnv1aBasis).
constexpr uint64_t fnv1a_step(uint64_t h, unsigned char byte) { return (h ^ byte) * kFnv1aPrime; }

constexpr uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = kFnv1aBasis;
  for (char c : bytes) h = fnv1a_step(h, static_cast<unsigned char>(c));
  return h;
}

}  // namespace anatomy
