// out_of_memory.h: what to do when a run does not fit: the settings the
// memory plan finds that fit the device, and the report printed when the plan
// or the device runs out (what was being allocated, the ledger then, the
// device and the other processes on it, the settings that fit).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "anatomy/analysis/memory_plan.h"
#include "anatomy/core/ledger.h"
#include "anatomy/gpu/nvml.h"
#include "anatomy/model/config.h"
#include "anatomy/train/arguments.h"

namespace anatomy {

// A setting that fits, as flags, with its predicted NVML use.
struct FittingSetting {
  std::string flags;
  int64_t predicted = 0;
};
// The settings the plan says fit `target` with headroom (capacity_with_headroom):
// the batch asked for in micro-batches that fit (gradient accumulation), with
// gradient checkpointing, the largest batch with the precision asked for, and
// with bf16; best first.
std::vector<FittingSetting> settings_that_fit(const ModelConfig& config, const TrainingArguments& args,
                                              const DataShape& shape, const PlanTarget& target);

// The out-of-memory report: what was being allocated, the ledger then, the
// device's free and total memory, other processes, and settings that fit in
// `available` bytes of NVML use. `predicted`: the memory plan foresaw it,
// before anything was allocated.
std::string out_of_memory_report(const OutOfMemory& oom, bool predicted, const std::optional<gpu::GpuMemory>& device,
                                 const std::vector<FittingSetting>& settings, int64_t available);

}  // namespace anatomy
