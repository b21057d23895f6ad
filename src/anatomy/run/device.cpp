// device.cpp: --device resolution: the GPU when there is one and this build has
// the CUDA backend, else the CPU, saying which and why.
#include <thread>

#include "anatomy/run/device.h"
#include "anatomy/core/error.h"
#include "anatomy/gpu/nvml.h"

#ifdef ANATOMY_HAVE_CUDA
#include "anatomy/kernels/cuda/cuda_backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#endif

namespace anatomy::run {

namespace {
int visible_gpus() {
#ifdef ANATOMY_HAVE_CUDA
  return cuda::device_count();
#else
  return gpu::Nvml::instance().available() ? gpu::Nvml::instance().device_count() : 0;
#endif
}
}  // namespace

int nvml_index_of(int cuda_index) {
#ifdef ANATOMY_HAVE_CUDA
  if (cuda_index >= 0 && cuda_index < cuda::device_count())
    if (const auto index = gpu::Nvml::instance().index_of_pci_bus_id(cuda::pci_bus_id(cuda_index))) return *index;
#endif
  return cuda_index;
}

DeviceChoice choose_device(const std::string& flag, Fp32Products fp32_products, int gpu,
                           const EngineOptions& options) {
  DeviceChoice choice;
  choice.gpu_present = visible_gpus() > 0;
  if (flag != "cpu" && flag != "cuda" && flag != "auto") fail("--device {}: expected cpu, cuda or auto", flag);
  if (flag == "cuda" && !choice.gpu_present) fail("--device cuda: no NVIDIA GPU is visible to this process");
#ifdef ANATOMY_HAVE_CUDA
  if (flag == "cuda" || (flag == "auto" && choice.gpu_present)) {
    choice.backend = cuda::make_cuda_backend(gpu, fp32_products, options);
    return choice;
  }
#else
  if (flag == "cuda") fail("--device cuda: this build has no CUDA backend (nvcc was not found when it was built)");
  if (flag == "auto" && choice.gpu_present)
    choice.note = "A GPU is present, but this build has no CUDA backend (built without nvcc): running on the CPU.";
#endif
  if (fp32_products != Fp32Products::Float32)
    fail("--{}: {} products are a GPU mode, and this run is on the CPU", fp32_products_label(fp32_products),
         fp32_products == Fp32Products::Tf32 ? "TensorFloat-32" : "split-TF32");
  if (flag == "auto" && !choice.gpu_present)
    choice.note = "No GPU found: running on the CPU.";
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  choice.backend = make_cpu_backend(static_cast<int>(cores));
  choice.backend->set_options(options);
  return choice;
}

}  // namespace anatomy::run
