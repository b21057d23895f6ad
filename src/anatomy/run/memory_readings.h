// memory_readings.h: the memory side of a training run: NVML readings of
// this process, the anatomy after (and during) training, and its files. (The
// out-of-memory advice is analysis/out_of_memory.h.)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "anatomy/analysis/memory_anatomy.h"
#include "anatomy/analysis/memory_plan.h"
#include "anatomy/analysis/rank_memory.h"
#include "anatomy/distributed/communicator.h"
#include "anatomy/gpu/nvml.h"
#include "anatomy/kernels/backend.h"

namespace anatomy::run {

// This process's use of one GPU, from NVML: its own entry in the device's
// process list when NVML lists it (it may not inside a container), else the
// device's use minus what was in use before this process made its context.
class GpuMemoryProbe {
 public:
  // Call before the CUDA context exists: reads the baseline.
  explicit GpuMemoryProbe(int index);
  int index() const { return index_; }
  std::optional<int64_t> own_use() const;
  std::optional<gpu::GpuMemory> device() const;

 private:
  int index_;
  std::optional<int64_t> baseline_;
};

struct DeviceFacts {
  std::string name;            // NVML's name, "" when unknown
  int64_t total = 0;           // bytes, 0 when unknown
};

// The anatomy of the backend's ledger now, with the device-level readings
// (-1 when unknown) and the plan's prediction when there is one.
MemoryAnatomy take_memory_anatomy(Backend& backend, const DeviceFacts& facts, int64_t context_bytes,
                                  int64_t nvml_used, const MemoryPlan* plan);

// anatomy.json and report.html in `dir`, each written whole or not at all.
// `extra_sections`: more HTML for report.html (the time anatomy's section).
void write_memory_reports(const MemoryAnatomy& anatomy, const std::string& dir,
                          const std::string& extra_sections = "");

}  // namespace anatomy::run
