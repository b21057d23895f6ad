// device.cpp: --device resolution. The CUDA backend is built by the CUDA issue;
// until it exists a GPU is detected and reported, and the run stays on the CPU.
#include <thread>

#include "anatomy/cli/commands.h"
#include "anatomy/core/error.h"
#include "anatomy/gpu/nvml.h"

#ifdef ANATOMY_HAVE_CUDA
#include "anatomy/kernels/cuda/cuda_device.h"
#endif

namespace anatomy::cli {

namespace {
int visible_gpus() {
#ifdef ANATOMY_HAVE_CUDA
  return cuda::device_count();
#else
  return gpu::Nvml::instance().available() ? gpu::Nvml::instance().device_count() : 0;
#endif
}
}  // namespace

DeviceChoice choose_device(const std::string& flag) {
  DeviceChoice choice;
  choice.gpu_present = visible_gpus() > 0;
  if (flag == "cuda") {
    if (!choice.gpu_present) fail("--device cuda: no NVIDIA GPU is visible to this process");
    fail("--device cuda: this build has no CUDA backend yet; use --device cpu");
  }
  if (flag == "auto" && choice.gpu_present)
    choice.note = "A GPU is present, but this build has no CUDA backend yet: running on the CPU.";
  else if (flag == "auto")
    choice.note = "No GPU found: running on the CPU.";
  else if (flag != "cpu")
    fail("--device {}: expected cpu, cuda or auto", flag);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  choice.backend = make_cpu_backend(static_cast<int>(cores));
  return choice;
}

}  // namespace anatomy::cli
