// busy_gpu.h: the warning a run prints when other processes hold memory on its
// GPU, so that nobody mistakes their memory for this run's (the seed starts by
// checking that the GPU is empty for the same reason).
#pragma once

#include <string>
#include <vector>

#include "anatomy/gpu/nvml.h"

namespace anatomy::gpu {

// The warning for `processes` (as Nvml::processes lists them) on a device with
// `memory`, leaving out `own_pid`: a table of pid, process name and MiB as
// nvidia-smi shows it, then what that means for the figures; "" when no
// other process is listed.
std::string format_busy_gpu_warning(const std::vector<GpuProcess>& processes, int own_pid,
                                    const GpuMemory& memory);

// Prints that warning to stderr for device `index`; prints nothing when NVML
// cannot list the device's processes or none but this one is listed. Call it
// before this process creates its CUDA context: inside a container NVML may
// list this process under its host pid, which getpid() cannot match.
void warn_if_gpu_busy(int index);

}  // namespace anatomy::gpu
