// test_pool.cpp: the device memory pool (core/pool.h): segments in 2 MiB
// steps, best-fit reuse, merging of freed neighbours, giving segments back
// when the device is full, and the same choices on two devices whose
// addresses differ (what lets the estimator predict a GPU's pool).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "anatomy/core/pool.h"

namespace anatomy {
namespace {

constexpr size_t MiB = size_t{1} << 20;

TEST(Pool, SegmentsComeIn2MiBStepsAndBlocksIn512Bytes) {
  BlockPool pool(make_simulated_segments());
  void* a = pool.allocate(100);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(pool.reserved(), static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(pool.allocated(), 512);
  void* b = pool.allocate(1000);  // fits in the first segment's rest
  EXPECT_EQ(pool.reserved(), static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(pool.allocated(), 512 + 1024);
  void* c = pool.allocate(3 * MiB + 1);  // a segment of its own, rounded to 4 MiB
  EXPECT_EQ(pool.reserved(), static_cast<int64_t>(6 * MiB));
  pool.release(a);
  pool.release(b);
  pool.release(c);
  EXPECT_EQ(pool.allocated(), 0);
  EXPECT_EQ(pool.reserved(), static_cast<int64_t>(6 * MiB)) << "segments are kept for reuse";
  EXPECT_EQ(pool.reserved_peak(), static_cast<int64_t>(6 * MiB));
}

TEST(Pool, FreedNeighboursMergeSoALargerRequestReusesThem) {
  BlockPool pool(make_simulated_segments());
  void* a = pool.allocate(MiB / 2);
  void* b = pool.allocate(MiB / 2);
  void* c = pool.allocate(MiB / 2);
  pool.release(a);
  pool.release(b);
  void* d = pool.allocate(MiB);  // a and b merged
  EXPECT_EQ(d, a);
  EXPECT_EQ(pool.reserved(), static_cast<int64_t>(2 * MiB));
  pool.release(c);
  pool.release(d);
  void* whole = pool.allocate(2 * MiB);
  EXPECT_EQ(whole, a) << "the whole segment is one free block again";
  pool.release(whole);
}

TEST(Pool, BestFitPicksTheSmallestFreeBlockThatFits) {
  BlockPool pool(make_simulated_segments());
  void* big = pool.allocate(4 * MiB);
  void* small = pool.allocate(MiB);
  void* keep = pool.allocate(MiB);  // keeps the small block from merging
  (void)keep;
  pool.release(big);
  pool.release(small);
  void* x = pool.allocate(MiB / 2);
  EXPECT_EQ(x, small);
}

TEST(Pool, AFullDeviceGetsItsFreeSegmentsBackThenSaysNo) {
  BlockPool pool(make_simulated_segments(static_cast<int64_t>(8 * MiB)));
  void* a = pool.allocate(6 * MiB);
  ASSERT_NE(a, nullptr);
  pool.release(a);  // 6 MiB kept in the pool
  void* b = pool.allocate(7 * MiB);  // needs the kept segment returned first
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(pool.reserved(), static_cast<int64_t>(8 * MiB));
  EXPECT_EQ(pool.allocate(2 * MiB), nullptr);
  EXPECT_THROW(pool.release(reinterpret_cast<void*>(0x1234)), Error);
  pool.release(b);
}

// Two sources whose addresses differ: the pool must make the same choices
// (same reserved bytes over time, same relative block positions).
class ShiftedSegments final : public SegmentSource {
 public:
  explicit ShiftedSegments(uintptr_t base, uintptr_t stride) : next_(base), stride_(stride) {}
  void* map(size_t bytes) override {
    next_ -= stride_ + bytes;  // addresses go down: the opposite order of the simulated device
    return reinterpret_cast<void*>(next_);
  }
  void unmap(void*, size_t) override {}

 private:
  uintptr_t next_, stride_;
};

TEST(Pool, TheSameRequestsMakeTheSameSegmentsWhateverTheAddresses) {
  BlockPool sim(make_simulated_segments());
  BlockPool other(std::make_unique<ShiftedSegments>(uintptr_t{1} << 46, 3 * MiB));
  std::mt19937 rng(7);
  std::vector<std::pair<void*, void*>> live;
  for (int i = 0; i < 3000; ++i) {
    if (!live.empty() && rng() % 3 == 0) {
      const size_t k = rng() % live.size();
      sim.release(live[k].first);
      other.release(live[k].second);
      live.erase(live.begin() + static_cast<long>(k));
    } else {
      const size_t bytes = (rng() % 4 == 0) ? rng() % (8 * MiB) : rng() % 20000;
      live.emplace_back(sim.allocate(bytes), other.allocate(bytes));
    }
    ASSERT_EQ(sim.reserved(), other.reserved()) << "request " << i;
    ASSERT_EQ(sim.allocated(), other.allocated());
  }
  EXPECT_EQ(sim.reserved_peak(), other.reserved_peak());
}

}  // namespace
}  // namespace anatomy
