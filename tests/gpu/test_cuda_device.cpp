// test_cuda_device.cpp: the CUDA backend's basics on a real GPU: ledger-owned
// device memory, the fill kernel, host<->device copies, NVML's view of the
// allocations, and out-of-memory reported by buffer name. Every test skips
// itself on a machine without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "anatomy/core/error.h"
#include "anatomy/core/ledger.h"
#include "anatomy/core/tensor.h"
#include "anatomy/gpu/nvml.h"
#include "anatomy/kernels/cuda/cuda_device.h"

namespace {

using anatomy::Category;
using anatomy::Device;
using anatomy::DType;
using anatomy::Ledger;
using anatomy::Tensor;

constexpr uint64_t kMiB = 1024ull * 1024ull;

#define SKIP_WITHOUT_GPU() \
  if (anatomy::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine"

TEST(CudaDevice, ReportsANamedDevice) {
  SKIP_WITHOUT_GPU();
  EXPECT_GE(anatomy::cuda::device_count(), 1);
  EXPECT_FALSE(anatomy::cuda::device_name(0).empty());
}

TEST(CudaDevice, FillThenCopyBackGivesEveryValue) {
  SKIP_WITHOUT_GPU();
  Ledger ledger(Device::cuda(0), anatomy::cuda::make_cuda_allocator(0));
  // An odd size, so that the last block of the kernel is partly idle.
  Tensor t = Tensor::empty(ledger, {1000, 1037}, DType::F32, Category::Weights, "test.weight");
  anatomy::cuda::fill(t, 1.5f);
  anatomy::cuda::synchronize();
  std::vector<float> host(static_cast<size_t>(t.numel()), 0.0f);
  anatomy::cuda::copy_to_host(t, host.data());
  size_t wrong = 0;
  for (float v : host) wrong += (v != 1.5f);
  EXPECT_EQ(wrong, 0u);

  // And the way back: host values land on the device unchanged.
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i);
  anatomy::cuda::copy_from_host(t, host.data());
  std::vector<float> again(host.size(), -1.0f);
  anatomy::cuda::copy_to_host(t, again.data());
  EXPECT_EQ(again, host);
}

TEST(CudaDevice, LedgerCountsGpuWeightsExactly) {
  SKIP_WITHOUT_GPU();
  Ledger ledger(Device::cuda(0), anatomy::cuda::make_cuda_allocator(0));
  const auto weights = static_cast<size_t>(Category::Weights);
  {
    Tensor t = Tensor::empty(ledger, {3, 5, 7}, DType::F32, Category::Weights, "w");
    EXPECT_EQ(t.device(), Device::cuda(0));
    EXPECT_EQ(ledger.snapshot().live[weights], static_cast<int64_t>(t.nbytes()));
    EXPECT_EQ(ledger.snapshot().live_total, static_cast<int64_t>(t.nbytes()));
  }
  EXPECT_EQ(ledger.snapshot().live[weights], 0);
  EXPECT_EQ(ledger.snapshot().live_total, 0);
}

TEST(CudaDevice, ZeroElementTensorIsNotOutOfMemory) {
  SKIP_WITHOUT_GPU();
  Ledger ledger(Device::cuda(0), anatomy::cuda::make_cuda_allocator(0));
  Tensor t = Tensor::empty(ledger, {0, 4}, DType::F32, Category::Temporary, "empty");
  anatomy::cuda::fill(t, 2.0f);
  anatomy::cuda::copy_to_host(t, nullptr);
  EXPECT_EQ(ledger.snapshot().live_total, 0);
}

TEST(CudaDevice, NvmlSeesA256MiBAllocation) {
  SKIP_WITHOUT_GPU();
  auto& nvml = anatomy::gpu::Nvml::instance();
  if (!nvml.available()) GTEST_SKIP() << "NVML unavailable: " << nvml.unavailable_reason();
  // NVML numbers devices by PCI order and CUDA by its own; they agree only
  // when both see the same set of devices.
  if (nvml.device_count() != anatomy::cuda::device_count())
    GTEST_SKIP() << "NVML and CUDA see different device sets";
  Ledger ledger(Device::cuda(0), anatomy::cuda::make_cuda_allocator(0));
  anatomy::cuda::synchronize();  // the CUDA context exists before the first reading
  auto before = nvml.memory(0);
  ASSERT_TRUE(before.has_value());
  constexpr uint64_t kBytes = 256 * kMiB;
  Tensor t = Tensor::empty(ledger, {static_cast<int64_t>(kBytes / 4)}, DType::F32, Category::Weights, "big");
  anatomy::cuda::fill(t, 0.0f);
  anatomy::cuda::synchronize();
  auto after = nvml.memory(0);
  ASSERT_TRUE(after.has_value());
  // cudaMalloc maps device memory in 2 MiB pages; allow a few of them.
  constexpr uint64_t kSlack = 4 * kMiB;
  EXPECT_GE(after->used + kSlack, before->used + kBytes)
      << "used before " << before->used << ", after " << after->used;
  EXPECT_LE(after->used, after->total);
}

TEST(CudaDevice, NvmlDescribesTheDevice) {
  SKIP_WITHOUT_GPU();
  auto& nvml = anatomy::gpu::Nvml::instance();
  if (!nvml.available()) GTEST_SKIP() << "NVML unavailable: " << nvml.unavailable_reason();
  EXPECT_GE(nvml.device_count(), 1);
  auto name = nvml.device_name(0);
  ASSERT_TRUE(name.has_value());
  EXPECT_FALSE(name->empty());
  auto driver = nvml.driver_version();
  ASSERT_TRUE(driver.has_value());
  EXPECT_FALSE(driver->empty());
  auto memory = nvml.memory(0);
  ASSERT_TRUE(memory.has_value());
  EXPECT_GT(memory->total, 0u);
  EXPECT_LE(memory->used, memory->total);
  auto line = anatomy::gpu::gpu_memory_occupied_line(0);
  ASSERT_TRUE(line.has_value());
  EXPECT_TRUE(std::regex_match(*line, std::regex(R"(GPU memory occupied: \d+ MB\.)"))) << *line;
  EXPECT_FALSE(nvml.device_name(nvml.device_count()).has_value());
}

TEST(CudaDevice, AbsurdAllocationThrowsOutOfMemoryNamingTheBuffer) {
  SKIP_WITHOUT_GPU();
  Ledger ledger(Device::cuda(0), anatomy::cuda::make_cuda_allocator(0));
  // 2^48 floats: 1 PiB, more than any GPU has.
  try {
    Tensor t = Tensor::empty(ledger, {int64_t{1} << 48}, DType::F32, Category::Activations, "absurd.buffer");
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const anatomy::Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("out of memory"), std::string::npos) << message;
    EXPECT_NE(message.find("absurd.buffer"), std::string::npos) << message;
  }
  EXPECT_EQ(ledger.snapshot().live_total, 0);
  // The failed cudaMalloc leaves no error behind: the device keeps working.
  Tensor small = Tensor::empty(ledger, {16}, DType::F32, Category::Temporary, "after");
  anatomy::cuda::fill(small, 3.0f);
  std::vector<float> host(16);
  anatomy::cuda::copy_to_host(small, host.data());
  EXPECT_EQ(host, std::vector<float>(16, 3.0f));
}

TEST(CudaDevice, FillRejectsHostTensors) {
  SKIP_WITHOUT_GPU();
  Ledger ledger(Device::cpu(), anatomy::make_cpu_allocator());
  Tensor t = Tensor::empty(ledger, {4}, DType::F32, Category::Temporary, "host.tensor");
  EXPECT_THROW(anatomy::cuda::fill(t, 1.0f), anatomy::Error);
}

}  // namespace

// NVML numbers every GPU of the machine; CUDA only the visible ones, in its
// own order. Matched by PCI bus id, each CUDA device has an NVML index of a
// device with its name and memory, and no two share one.
TEST(CudaDevice, EachCudaDeviceMapsToItsNvmlDeviceByPciBusId) {
  SKIP_WITHOUT_GPU();
  const anatomy::gpu::Nvml& nvml = anatomy::gpu::Nvml::instance();
  if (!nvml.available()) GTEST_SKIP() << "NVML unavailable: " << nvml.unavailable_reason();
  std::vector<int> seen;
  for (int k = 0; k < anatomy::cuda::device_count(); ++k) {
    const std::string bus = anatomy::cuda::pci_bus_id(k);
    EXPECT_TRUE(std::regex_match(bus, std::regex("[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\\.[0-9A-Fa-f]")))
        << "CUDA device " << k << ": '" << bus << "'";
    const auto index = nvml.index_of_pci_bus_id(bus);
    ASSERT_TRUE(index.has_value()) << "CUDA device " << k << " (" << bus << ") has no NVML device";
    EXPECT_EQ(nvml.device_name(*index).value_or(""), anatomy::cuda::device_name(k));
    EXPECT_EQ(std::count(seen.begin(), seen.end(), *index), 0) << "two CUDA devices map to NVML device " << *index;
    seen.push_back(*index);
  }
  EXPECT_FALSE(nvml.index_of_pci_bus_id("0000:FF:1F.7").has_value()) << "a bus id with no GPU";
}
