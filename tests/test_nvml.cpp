// test_nvml.cpp: the device-facts helpers on a CPU machine: NVML, loaded at
// run time, answers "unknown" without crashing when there is no NVIDIA driver,
// and the host resident-set readings follow real allocations.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "anatomy/gpu/host_memory.h"
#include "anatomy/gpu/nvml.h"

namespace {

constexpr uint64_t kMiB = 1024ull * 1024ull;

TEST(Nvml, WithoutTheLibraryEveryAnswerIsUnknown) {
  auto& nvml = anatomy::gpu::Nvml::instance();
  if (nvml.available()) GTEST_SKIP() << "NVML is available here; this test is for machines without it";
  EXPECT_FALSE(nvml.unavailable_reason().empty());
  EXPECT_EQ(nvml.device_count(), 0);
  EXPECT_FALSE(nvml.device_name(0).has_value());
  EXPECT_FALSE(nvml.memory(0).has_value());
  EXPECT_FALSE(nvml.driver_version().has_value());
  EXPECT_FALSE(anatomy::gpu::gpu_memory_occupied_line().has_value());
  EXPECT_FALSE(anatomy::gpu::gpu_memory_occupied_line(3).has_value());
}

TEST(Nvml, WithoutTheLibraryNoProcessesAreListed) {
  auto& nvml = anatomy::gpu::Nvml::instance();
  if (nvml.available()) GTEST_SKIP() << "NVML is available here; this test is for machines without it";
  EXPECT_NO_THROW({
    EXPECT_FALSE(nvml.processes(0).has_value());
    EXPECT_FALSE(nvml.processes(-1).has_value());
    EXPECT_FALSE(nvml.process_used_bytes(0, static_cast<int>(getpid())).has_value());
  });
}

TEST(Nvml, NamesProcessesFromProc) {
  // This test binary's own argv[0] ends in its file name.
  const std::string own = anatomy::gpu::process_name(static_cast<int>(getpid()));
  EXPECT_NE(own.find("anatomy_tests"), std::string::npos) << own;
  EXPECT_EQ(anatomy::gpu::process_name(0), "");
  EXPECT_EQ(anatomy::gpu::process_name(-5), "");
  EXPECT_EQ(anatomy::gpu::process_name(1 << 30), "");  // above pid_max: no such process
}

TEST(Nvml, IsOneInstance) { EXPECT_EQ(&anatomy::gpu::Nvml::instance(), &anatomy::gpu::Nvml::instance()); }

// Touches one byte per page so that every page becomes resident; returns a sum
// of the contents so the writes cannot be optimised away.
uint64_t touch(std::vector<unsigned char>& buffer) {
  for (size_t i = 0; i < buffer.size(); i += 4096) buffer[i] = static_cast<unsigned char>(i / 4096 + 1);
  uint64_t sum = 0;
  for (size_t i = 0; i < buffer.size(); i += 4096) sum += buffer[i];
  return sum;
}

TEST(HostMemory, PeakRssGrowsAfterTouching64MiB) {
  const uint64_t peak_before = anatomy::gpu::process_peak_rss_bytes();
  const uint64_t rss_before = anatomy::gpu::process_rss_bytes();
  ASSERT_GT(peak_before, 0u);
  ASSERT_GT(rss_before, 0u);
  // The two readings come from different kernel counters, which may lag each
  // other by a few pages; compare them only loosely.
  constexpr uint64_t kCounterSlack = 4 * kMiB;
  ASSERT_GE(peak_before + kCounterSlack, rss_before);
  // Earlier tests may have left the peak well above today's size; reach past
  // it by 64 MiB so that the peak has to move.
  const uint64_t extra = peak_before > rss_before ? peak_before - rss_before : 0;
  std::vector<unsigned char> buffer(extra + 64 * kMiB);
  volatile uint64_t sink = touch(buffer);
  (void)sink;
  const uint64_t rss_during = anatomy::gpu::process_rss_bytes();
  const uint64_t peak_after = anatomy::gpu::process_peak_rss_bytes();
  // Allow some slack for pages the allocator or the kernel account differently.
  EXPECT_GE(rss_during, rss_before + 48 * kMiB);
  EXPECT_GE(peak_after, peak_before + 48 * kMiB);
  EXPECT_GE(peak_after + kCounterSlack, rss_during);
}

}  // namespace
