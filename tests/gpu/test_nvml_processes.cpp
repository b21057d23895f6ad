// test_nvml_processes.cpp: NVML's process list on a real GPU: this process
// appears once it has a CUDA context, its memory grows with an allocation, and
// the figures read back are sane (a wrong guess of the driver's struct layout
// would show as garbage). Skips itself without a CUDA device or NVML.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <iostream>

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

constexpr int64_t kMiB = 1024 * 1024;

// NVML must see the device CUDA calls 0; skips the test otherwise.
#define SKIP_WITHOUT_GPU_AND_NVML()                                                                  \
  do {                                                                                               \
    if (anatomy::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";        \
    if (!anatomy::gpu::Nvml::instance().available())                                                 \
      GTEST_SKIP() << "NVML unavailable: " << anatomy::gpu::Nvml::instance().unavailable_reason();   \
    if (anatomy::gpu::Nvml::instance().device_count() != anatomy::cuda::device_count())              \
      GTEST_SKIP() << "NVML and CUDA see different device sets";                                     \
  } while (0)

TEST(NvmlProcesses, ListsProcessesOnceThisOneHasAContext) {
  SKIP_WITHOUT_GPU_AND_NVML();
  auto& nvml = anatomy::gpu::Nvml::instance();
  // Run alone (--gtest_filter=NvmlProcesses.*), this is the process's first
  // context, and the readings below are what the GPU catalog records: the
  // device's `used` with no context of ours, and what the context adds.
  const auto before = nvml.memory(0);
  ASSERT_TRUE(before.has_value());
  Ledger ledger(Device::cuda(0), anatomy::cuda::make_cuda_allocator(0));
  anatomy::cuda::synchronize();  // the CUDA context exists from here on
  const auto with_context = nvml.memory(0);
  ASSERT_TRUE(with_context.has_value());
  std::cout << "  device used " << before->used << " bytes before this test's context, " << with_context->used
            << " after (+" << (static_cast<int64_t>(with_context->used) - static_cast<int64_t>(before->used)) / kMiB
            << " MiB); total " << with_context->total << "\n";
  const auto processes = nvml.processes(0);
  ASSERT_TRUE(processes.has_value());
  EXPECT_FALSE(processes->empty());
  const auto memory = nvml.memory(0);
  ASSERT_TRUE(memory.has_value());
  int64_t listed = 0;
  for (const auto& p : *processes) {
    std::cout << "  listed: pid " << p.pid << " '" << p.name << "' " << p.used_bytes << " bytes\n";
    EXPECT_GT(p.pid, 0);
    EXPECT_GE(p.used_bytes, -1);
    EXPECT_LE(p.used_bytes, static_cast<int64_t>(memory->total)) << "pid " << p.pid;
    if (p.used_bytes > 0) listed += p.used_bytes;
  }
  // Processes hold part of what the device counts as used, never more.
  EXPECT_LE(listed, static_cast<int64_t>(memory->used));

  const int own = static_cast<int>(getpid());
  const auto context = nvml.process_used_bytes(0, own);
  if (!context) {
    std::cout << "  this process (pid " << own << ") is not listed: NVML reports pids of another namespace\n";
    return;
  }
  EXPECT_GT(*context, 0);
  std::cout << "  this process holds " << *context << " bytes (" << *context / kMiB
            << " MiB) with its CUDA context and no allocation of its own\n";

  constexpr int64_t kBytes = 256 * kMiB;
  Tensor t = Tensor::empty(ledger, {kBytes / 4}, DType::F32, Category::Weights, "nvml.processes.probe");
  anatomy::cuda::fill(t, 0.0f);
  anatomy::cuda::synchronize();
  const auto after = nvml.process_used_bytes(0, own);
  ASSERT_TRUE(after.has_value());
  // cudaMalloc maps device memory in 2 MiB pages; allow a few of them.
  EXPECT_GE(*after + 4 * kMiB, *context + kBytes) << "before " << *context << ", after " << *after;
}

}  // namespace
