// cuda_memory.cpp: the sizes of cuda_memory.h that are not compile-time
// expressions: CUB's sort storage, the embedding backward's scratch layout,
// AdamW's chunk table, Adafactor's scratch.
#include "anatomy/kernels/cuda_memory.h"

#include <climits>
#include <cstring>

#include "anatomy/core/error.h"

namespace anatomy::cuda {

namespace {

size_t round_up_256(size_t bytes) { return (bytes + 255) & ~size_t{255}; }

}  // namespace

// CCCL 3.0's DispatchRadixSort (cub/device/dispatch/dispatch_radix_sort.cuh)
// for KeyT = uint64_t, ValueT = int32_t, an int item count (OffsetT =
// uint32_t), not overwriting the input, under Policy900 / Policy1000
// (cub/device/dispatch/tuning/tuning_radix_sort.cuh), which agree here:
//   - the single-tile policy is AgentRadixSortDownsweepPolicy<256, 19, uint64_t>,
//     scaled by RegBoundScaling to 9 items per thread: at most 256 · 9 items
//     take the single-tile kernel, whose size query answers 1 byte;
//   - otherwise one sweep, OnesweepPolicyKey64 = <384 threads, 30 items>, scaled
//     to 15 items (tiles of 5760), 8 radix bits, so 8 passes over 64 key bits;
//     AliasTemporaries rounds each allocation to 256 bytes and adds 255.
size_t cub_sort_pairs_bytes(int64_t T) {
  if (T <= 0) return 1;
  constexpr int64_t kSingleTileItems = 256 * 9;
  if (T <= kSingleTileItems) return 1;
  constexpr int64_t kRadixBits = 8, kDigits = int64_t{1} << kRadixBits;
  constexpr int64_t kTileItems = 384 * 15;
  constexpr int64_t kPortion = ((int64_t{1} << 28) - 1) / kTileItems * kTileItems;
  constexpr int64_t kPasses = (64 + kRadixBits - 1) / kRadixBits;
  constexpr size_t kOffset = 4, kAtomicOffset = 4, kKey = 8, kValue = 4;
  const int64_t portions = (T + kPortion - 1) / kPortion;
  const int64_t max_blocks = (std::min(T, kPortion) + kTileItems - 1) / kTileItems;
  const size_t sizes[] = {
      static_cast<size_t>(portions * kPasses * kDigits) * kOffset,    // bins
      static_cast<size_t>(max_blocks * kDigits) * kAtomicOffset,      // lookback
      static_cast<size_t>(T) * kKey,                                  // the other key buffer
      static_cast<size_t>(T) * kValue,                                // the other value buffer
      static_cast<size_t>(portions * kPasses) * kAtomicOffset,        // counters
  };
  size_t total = 0;
  for (size_t s : sizes) total += round_up_256(s);
  return total + 255;
}

EmbeddingScratchLayout::EmbeddingScratchLayout(int64_t T) {
  const auto n = static_cast<size_t>(std::max<int64_t>(T, 0));
  keys_sorted = 0;
  tokens_in = keys_sorted + round_up_256(n * sizeof(uint64_t));
  tokens_sorted = tokens_in + round_up_256(n * sizeof(int32_t));
  partials = tokens_sorted + round_up_256(n * sizeof(int32_t));
  cub = partials + round_up_256(n * kEmbeddingPartialDoublesPerToken * sizeof(double));
  cub_bytes = round_up_256(cub_sort_pairs_bytes(T));
  total = cub + cub_bytes;
}

size_t embedding_backward_scratch_bytes(int64_t T) {
  if (T <= 0) return 0;
  ANATOMY_CHECK(T <= INT_MAX, "embedding_backward: {} tokens are more than one sort handles", T);
  return EmbeddingScratchLayout(T).total;
}

int64_t adamw_chunk_table(const std::vector<ParamSegment>& segments, std::vector<unsigned char>& table) {
  std::vector<AdamWChunk> chunks;
  for (const ParamSegment& seg : segments)
    for (int64_t b = seg.offset; b < seg.offset + seg.count; b += kAdamWChunk)
      chunks.push_back(AdamWChunk{b, std::min(seg.offset + seg.count, b + kAdamWChunk), seg.weight_decay ? 1 : 0});
  table.resize(chunks.size() * sizeof(AdamWChunk));
  if (!chunks.empty()) std::memcpy(table.data(), chunks.data(), table.size());
  return static_cast<int64_t>(chunks.size());
}

size_t adafactor_scratch_bytes(int64_t n) {
  if (n <= 0) return 0;
  // slices · cols <= min(n, kAdafactorColumnPartials) for every matrix of n
  // elements: slices <= ceil(rows / 16) <= rows, and slices <= partials / cols.
  // A vector needs no column partials, but a size of n alone cannot tell.
  const int64_t column_partials = std::min<int64_t>(n, kAdafactorColumnPartials);
  return AdafactorScratch::kColumnPartials + static_cast<size_t>(column_partials) * sizeof(double);
}

}  // namespace anatomy::cuda
