// facts.h: published figures of NVIDIA GPUs that the reports need and NVML
// does not give: the dense bf16 tensor-core peak (for MFU).
#pragma once

#include <optional>
#include <string>

namespace anatomy::gpu {

// Dense (no sparsity) bf16 tensor-core peak in TFLOP/s, from NVIDIA's data
// sheets, for a GPU name as NVML reports it ("NVIDIA H100 80GB HBM3");
// std::nullopt for GPUs not in the table. GPUs without bf16 (V100, T4) give
// their fp16 tensor-core peak.
std::optional<double> dense_bf16_peak_tflops(const std::string& gpu_name);

}  // namespace anatomy::gpu
