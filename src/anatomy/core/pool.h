// pool.h: the device memory pool behind the ledger. Segments are taken from
// the device (cudaMalloc on a GPU) in multiples of 2 MiB, the granularity in
// which the driver maps memory, and blocks are carved out of them best-fit and
// merged again when freed. Segments are kept until memory runs short, so after
// the first step a training step never reaches cudaMalloc.
//
// The policy is plain host code and deterministic: given the same sequence of
// requests it makes the same segments. The estimator (anatomy/memory_plan.h)
// replays a run's requests on a pool over a simulated device
// (make_simulated_segments), so it predicts the bytes the real pool takes
// from the GPU, not only the bytes the ledger lists.
#pragma once

#include <cstddef>
#include <compare>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <memory>

#include "anatomy/core/ledger.h"

namespace anatomy {

// Where segments come from.
class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  // nullptr when the device has no room for `bytes` more.
  virtual void* map(size_t bytes) = 0;
  virtual void unmap(void* ptr, size_t bytes) = 0;
};

// A simulated device of `capacity` bytes (unlimited when <= 0): addresses are
// made up and never dereferenced.
std::unique_ptr<SegmentSource> make_simulated_segments(int64_t capacity = 0);

constexpr size_t kPoolAlignment = 512;                 // every block starts and ends on this
constexpr size_t kSegmentGranularity = size_t{2} << 20;  // segments are multiples of 2 MiB

class BlockPool {
 public:
  explicit BlockPool(std::unique_ptr<SegmentSource> source);
  ~BlockPool();  // returns every segment to the source
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // nullptr when neither the pool nor the device has room (after returning
  // the pool's wholly free segments to the device and trying once more).
  void* allocate(size_t bytes);
  void release(void* ptr);

  int64_t reserved() const { return reserved_; }        // bytes in segments
  int64_t reserved_peak() const { return reserved_peak_; }
  int64_t allocated() const { return allocated_; }      // bytes in live blocks (rounded sizes)
  // Returns wholly free segments to the device.
  void release_free_segments();

 private:
  struct Block {
    size_t size;
    bool free;
    uintptr_t segment;  // start of the segment it lies in
  };
  struct Segment {
    size_t size;
    uint64_t number;    // creation order
  };
  // Free blocks are ordered by (size, segment number, offset in the segment):
  // best fit, ties broken by position relative to the segments, never by raw
  // address, so that a simulated device and a GPU choose the same blocks.
  struct FreeKey {
    size_t size;
    uint64_t segment_number;
    size_t offset;
    auto operator<=>(const FreeKey&) const = default;
  };
  FreeKey key_of(uintptr_t start, const Block& b) const;
  void insert_free(uintptr_t start, Block& b);
  void erase_free(uintptr_t start, const Block& b);
  bool map_segment(size_t bytes);

  std::unique_ptr<SegmentSource> source_;
  std::map<uintptr_t, Segment> segments_;  // by start address
  std::map<uintptr_t, Block> blocks_;      // by start: every byte of every segment, in order
  std::set<std::pair<FreeKey, uintptr_t>> free_;
  uint64_t next_segment_number_ = 0;
  int64_t reserved_ = 0, reserved_peak_ = 0, allocated_ = 0;
};

// A DeviceAllocator over a BlockPool (the ledger's view of it).
std::unique_ptr<DeviceAllocator> make_pool_allocator(std::unique_ptr<SegmentSource> source);

}  // namespace anatomy
