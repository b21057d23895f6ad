// device.h: the backend for --device (cpu, cuda or auto), and which GPU NVML
// calls a CUDA device.
#pragma once

#include <memory>
#include <string>

#include "anatomy/core/engine_options.h"
#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/fp32_products.h"

namespace anatomy::run {

struct DeviceChoice {
  std::unique_ptr<Backend> backend;
  bool gpu_present = false;   // an NVIDIA GPU is visible to this process
  std::string note;           // printed before the run when not empty: why this device
};
// NVML's index of CUDA device `cuda_index` (matched by PCI bus id, so right
// under CUDA_VISIBLE_DEVICES, which NVML ignores); `cuda_index` itself when
// unknown.
int nvml_index_of(int cuda_index);
// `fp32_products` other than Float32 (TF32, split TF32) needs a GPU. `gpu`:
// which GPU (a data-parallel rank's LOCAL_RANK); 0 by default. The backend
// carries `options`.
DeviceChoice choose_device(const std::string& flag, Fp32Products fp32_products = Fp32Products::Float32, int gpu = 0,
                           const EngineOptions& options = {});

}  // namespace anatomy::run
