// test_gpu_catalog.cpp: the GPU catalog behind `anatomy estimate --gpu`, the
// byte sizes --gpu-memory accepts, and the busy-GPU warning's text.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "anatomy/core/error.h"
#include "anatomy/gpu/catalog.h"
// cli/ sources are built into the `anatomy` executable only, not into the
// library the tests link; until they are, compile the formatter here.
#include "anatomy/gpu/busy_gpu.h"

namespace {

using anatomy::gpu::find_gpu;
using anatomy::gpu::parse_byte_size;

constexpr int64_t kMiB = 1024 * 1024;
constexpr int64_t kGiB = 1024 * kMiB;

TEST(GpuCatalog, ParsesEveryAcceptedForm) {
  EXPECT_EQ(parse_byte_size("1234"), 1234);
  EXPECT_EQ(parse_byte_size("0"), 0);
  EXPECT_EQ(parse_byte_size("1234B"), 1234);
  EXPECT_EQ(parse_byte_size("16GiB"), 16 * kGiB);
  EXPECT_EQ(parse_byte_size("16GB"), 16'000'000'000);
  EXPECT_EQ(parse_byte_size("16G"), 16 * kGiB);
  EXPECT_EQ(parse_byte_size("80000MiB"), 80000 * kMiB);
  EXPECT_EQ(parse_byte_size("512MB"), 512'000'000);
  EXPECT_EQ(parse_byte_size("1.5TiB"), 1536 * kGiB);
  EXPECT_EQ(parse_byte_size("2KiB"), 2048);
  EXPECT_EQ(parse_byte_size("2kb"), 2000);
  EXPECT_EQ(parse_byte_size("16gib"), 16 * kGiB);
  EXPECT_EQ(parse_byte_size(" 24 GB "), 24'000'000'000);
  EXPECT_EQ(parse_byte_size(".5G"), kGiB / 2);
  // Decimal fractions are exact, not floating point: 0.1 GB is 10^8 bytes.
  EXPECT_EQ(parse_byte_size("0.1GB"), 100'000'000);
  EXPECT_EQ(parse_byte_size("81559MiB"), 85'520'809'984);
  EXPECT_EQ(parse_byte_size("9223372036854775807"), INT64_MAX);
}

// Every rejected text throws one line naming it.
void expect_rejected(const std::string& text, const std::string& why) {
  try {
    const int64_t bytes = parse_byte_size(text);
    ADD_FAILURE() << "'" << text << "' was accepted as " << bytes << " bytes";
  } catch (const anatomy::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'" + text + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(why), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(GpuCatalog, RejectsWhatIsNotASizeNamingTheText) {
  expect_rejected("", "empty");
  expect_rejected("   ", "empty");
  expect_rejected("-16GB", "negative");
  expect_rejected("16XB", "unknown unit 'XB'");
  expect_rejected("16 GiBs", "unknown unit 'GiBs'");
  expect_rejected("1e9", "unknown unit 'e9'");
  expect_rejected("1.2.3GB", "unknown unit");
  expect_rejected("GB", "not a number");
  expect_rejected(".", "not a number");
  expect_rejected("+5GB", "not a number");
  expect_rejected("9223372036854775808", "too large");
  expect_rejected("9EiB", "unknown unit");
  expect_rejected("10000000TB", "too large");
  expect_rejected("1234567890123456789012345", "too many digits");
}

TEST(GpuCatalog, NamesTheFlagWhenGivenOne) {
  try {
    parse_byte_size("lots", "--gpu-memory");
    FAIL() << "'lots' was accepted";
  } catch (const anatomy::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--gpu-memory lots: ", 0), 0u) << e.what();
  }
}

TEST(GpuCatalog, FindsKeysAliasesAndNvmlNames) {
  const auto* h100 = find_gpu("h100-80gb");
  ASSERT_NE(h100, nullptr);
  EXPECT_EQ(h100->key, "h100-80gb");
  EXPECT_EQ(h100->total_bytes, 85'520'809'984);  // NVML's 81559 MiB
  EXPECT_EQ(h100->compute_capability_major, 9);
  EXPECT_EQ(find_gpu("H100"), h100);
  EXPECT_EQ(find_gpu("h100_80GB"), h100);
  EXPECT_EQ(find_gpu("NVIDIA H100 80GB HBM3"), h100);
  EXPECT_NE(find_gpu("NVIDIA H100 PCIe"), h100);

  const struct {
    const char* nvml_name;
    const char* key;
  } kNames[] = {
      {"Tesla V100-SXM2-16GB", "v100-16gb"},  {"Tesla V100-PCIE-32GB", "v100-32gb"},
      {"Tesla T4", "t4"},                     {"NVIDIA A10G", "a10g"},
      {"NVIDIA L4", "l4"},                    {"NVIDIA A100-SXM4-40GB", "a100-40gb"},
      {"NVIDIA A100-PCIE-40GB", "a100-40gb"}, {"NVIDIA A100-SXM4-80GB", "a100-80gb"},
      {"NVIDIA A100 80GB PCIe", "a100-80gb"}, {"NVIDIA H200", "h200"},
      {"NVIDIA GeForce RTX 3090", "rtx-3090"}, {"NVIDIA GeForce RTX 4090", "rtx-4090"},
  };
  for (const auto& n : kNames) {
    const auto* spec = find_gpu(n.nvml_name);
    ASSERT_NE(spec, nullptr) << n.nvml_name;
    EXPECT_EQ(spec->key, n.key) << n.nvml_name;
    EXPECT_EQ(find_gpu(n.key), spec) << n.key;
  }
}

TEST(GpuCatalog, UnknownOrAmbiguousNamesFindNothing) {
  EXPECT_EQ(find_gpu(""), nullptr);
  EXPECT_EQ(find_gpu("-"), nullptr);
  EXPECT_EQ(find_gpu("b200"), nullptr);
  EXPECT_EQ(find_gpu("a100"), nullptr);            // 40 GB or 80 GB?
  EXPECT_EQ(find_gpu("NVIDIA L40S"), nullptr);     // not an L4
  EXPECT_EQ(find_gpu("NVIDIA GH200 480GB"), nullptr);  // not an H200
  EXPECT_EQ(find_gpu("NVIDIA A10"), nullptr);      // not an A10G
}

TEST(GpuCatalog, EveryEntryIsWholeAndUnique) {
  const auto gpus = anatomy::gpu::known_gpus();
  ASSERT_GE(gpus.size(), 11u);
  std::set<std::string> keys;
  for (const auto& g : gpus) {
    EXPECT_TRUE(keys.insert(g.key).second) << "two entries have the key " << g.key;
    EXPECT_GT(g.total_bytes, g.context_bytes) << g.key;
    EXPECT_GT(g.context_bytes, 0) << g.key;
    EXPECT_GT(g.reserved_bytes, 0) << g.key;
    EXPECT_LT(g.reserved_bytes + g.context_bytes, g.total_bytes / 10) << g.key;
    EXPECT_GE(g.compute_capability_major, 7) << g.key;
    EXPECT_FALSE(g.name.empty()) << g.key;
    EXPECT_FALSE(g.context_source.empty()) << g.key;
    // Its key and its NVML name both lead back to it.
    EXPECT_EQ(find_gpu(g.key), find_gpu(g.name)) << g.key;
    ASSERT_NE(find_gpu(g.key), nullptr) << g.key;
    EXPECT_EQ(find_gpu(g.key)->key, g.key);
  }
  EXPECT_GT(anatomy::gpu::default_context_bytes(), 0);
}

anatomy::gpu::GpuMemory an_h100(int64_t used) {
  anatomy::gpu::GpuMemory m;
  m.total = 81559ull * kMiB;
  m.used = static_cast<uint64_t>(used);
  m.free = m.total - m.used;
  return m;
}

TEST(BusyGpu, ListsOtherProcessesAndLeavesOutOurs) {
  const int own = 4242;
  const std::vector<anatomy::gpu::GpuProcess> processes = {
      {own, "/usr/bin/anatomy", 600 * kMiB},
      {17, "python3", 8192 * kMiB},
      {23, "", 1024 * kMiB},
  };
  const std::string text = anatomy::gpu::format_busy_gpu_warning(processes, own, an_h100(10000 * kMiB));
  EXPECT_NE(text.find("warning: 2 other processes"), std::string::npos) << text;
  EXPECT_NE(text.find("python3"), std::string::npos) << text;
  EXPECT_NE(text.find("8192 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("1024 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("not visible"), std::string::npos) << text;
  EXPECT_NE(text.find("other processes hold 9216 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("free memory is 71559 MiB of 81559 MiB"), std::string::npos) << text;
  EXPECT_EQ(text.find("4242"), std::string::npos) << text;
  EXPECT_EQ(text.find("/usr/bin/anatomy"), std::string::npos) << text;
}

TEST(BusyGpu, UnknownUsageIsALowerBound) {
  const std::vector<anatomy::gpu::GpuProcess> processes = {{17, "a", 100 * kMiB}, {18, "b", -1}};
  const std::string text = anatomy::gpu::format_busy_gpu_warning(processes, 1, an_h100(0));
  EXPECT_NE(text.find("at least 100 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("N/A"), std::string::npos) << text;
}

TEST(BusyGpu, SaysNothingWhenAloneOrEmpty) {
  EXPECT_EQ(anatomy::gpu::format_busy_gpu_warning({}, 1, an_h100(0)), "");
  EXPECT_EQ(anatomy::gpu::format_busy_gpu_warning({{1, "us", 600 * kMiB}}, 1, an_h100(600 * kMiB)), "");
}

}  // namespace
