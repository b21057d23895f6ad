// pool.cpp: best-fit blocks carved from 2 MiB-granular segments.
#include "anatomy/core/pool.h"

#include <algorithm>

#include "anatomy/core/error.h"

namespace anatomy {

namespace {

size_t round_up(size_t bytes, size_t to) { return (std::max<size_t>(bytes, 1) + to - 1) / to * to; }

// Addresses far from anything real, advancing by each segment's size, so that
// segments never overlap. Nothing is ever read or written there.
class SimulatedSegments final : public SegmentSource {
 public:
  explicit SimulatedSegments(int64_t capacity) : capacity_(capacity) {}
  void* map(size_t bytes) override {
    if (capacity_ > 0 && used_ + static_cast<int64_t>(bytes) > capacity_) return nullptr;
    used_ += static_cast<int64_t>(bytes);
    void* ptr = reinterpret_cast<void*>(next_);
    next_ += bytes + kSegmentGranularity;  // a gap, so that segments are never adjacent
    return ptr;
  }
  void unmap(void*, size_t bytes) override { used_ -= static_cast<int64_t>(bytes); }

 private:
  int64_t capacity_;
  int64_t used_ = 0;
  uintptr_t next_ = uintptr_t{1} << 44;
};

}  // namespace

std::unique_ptr<SegmentSource> make_simulated_segments(int64_t capacity) {
  return std::make_unique<SimulatedSegments>(capacity);
}

BlockPool::BlockPool(std::unique_ptr<SegmentSource> source) : source_(std::move(source)) {}

BlockPool::~BlockPool() {
  for (const auto& [start, seg] : segments_) source_->unmap(reinterpret_cast<void*>(start), seg.size);
}

BlockPool::FreeKey BlockPool::key_of(uintptr_t start, const Block& b) const {
  const Segment& seg = segments_.at(b.segment);
  return FreeKey{b.size, seg.number, static_cast<size_t>(start - b.segment)};
}

void BlockPool::insert_free(uintptr_t start, Block& b) {
  b.free = true;
  free_.insert({key_of(start, b), start});
}

void BlockPool::erase_free(uintptr_t start, const Block& b) { free_.erase({key_of(start, b), start}); }

bool BlockPool::map_segment(size_t bytes) {
  void* ptr = source_->map(bytes);
  if (ptr == nullptr) return false;
  const auto start = reinterpret_cast<uintptr_t>(ptr);
  segments_[start] = Segment{bytes, next_segment_number_++};
  Block& b = blocks_[start];
  b = Block{bytes, true, start};
  insert_free(start, b);
  reserved_ += static_cast<int64_t>(bytes);
  reserved_peak_ = std::max(reserved_peak_, reserved_);
  return true;
}

void* BlockPool::allocate(size_t bytes) {
  const size_t size = round_up(bytes, kPoolAlignment);
  auto fit = free_.lower_bound({FreeKey{size, 0, 0}, 0});
  if (fit == free_.end()) {
    const size_t segment = round_up(size, kSegmentGranularity);
    if (!map_segment(segment)) {
      release_free_segments();
      if (!map_segment(segment)) return nullptr;
    }
    fit = free_.lower_bound({FreeKey{size, 0, 0}, 0});
    ANATOMY_CHECK(fit != free_.end(), "pool: a new segment of {} bytes has no block of {}", segment, size);
  }
  const uintptr_t start = fit->second;
  free_.erase(fit);
  Block& b = blocks_.at(start);
  b.free = false;
  if (b.size - size >= kPoolAlignment) {  // split: the rest stays free
    Block& rest = blocks_[start + size];
    rest = Block{b.size - size, true, b.segment};
    insert_free(start + size, rest);
    b.size = size;
  }
  allocated_ += static_cast<int64_t>(b.size);
  return reinterpret_cast<void*>(start);
}

void BlockPool::release(void* ptr) {
  uintptr_t start = reinterpret_cast<uintptr_t>(ptr);
  auto it = blocks_.find(start);
  ANATOMY_CHECK(it != blocks_.end() && !it->second.free, "pool: releasing {} which it did not give out", ptr);
  allocated_ -= static_cast<int64_t>(it->second.size);
  // Merge with the free neighbours inside the same segment.
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.free && next->second.segment == it->second.segment) {
    erase_free(next->first, next->second);
    it->second.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free && prev->second.segment == it->second.segment) {
      erase_free(prev->first, prev->second);
      prev->second.size += it->second.size;
      blocks_.erase(it);
      it = prev;
    }
  }
  insert_free(it->first, it->second);
}

void BlockPool::release_free_segments() {
  for (auto seg = segments_.begin(); seg != segments_.end();) {
    auto b = blocks_.find(seg->first);
    if (b != blocks_.end() && b->second.free && b->second.size == seg->second.size) {
      erase_free(b->first, b->second);
      blocks_.erase(b);
      source_->unmap(reinterpret_cast<void*>(seg->first), seg->second.size);
      reserved_ -= static_cast<int64_t>(seg->second.size);
      seg = segments_.erase(seg);
    } else {
      ++seg;
    }
  }
}

namespace {

class PoolAllocator final : public DeviceAllocator {
 public:
  explicit PoolAllocator(std::unique_ptr<SegmentSource> source) : pool_(std::move(source)) {}
  void* allocate(size_t bytes) override { return pool_.allocate(bytes); }
  void release(void* ptr, size_t) override { pool_.release(ptr); }
  int64_t reserved_bytes() const override { return pool_.reserved(); }
  void release_unused() override { pool_.release_free_segments(); }

 private:
  BlockPool pool_;
};

}  // namespace

std::unique_ptr<DeviceAllocator> make_pool_allocator(std::unique_ptr<SegmentSource> source) {
  return std::make_unique<PoolAllocator>(std::move(source));
}

}  // namespace anatomy
