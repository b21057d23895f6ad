// catalog.h: the GPUs `anatomy estimate --gpu NAME` knows without one present:
// the memory each reports, the part its driver keeps, and what the CUDA context
// of a process like ours costs; and the byte sizes --gpu-memory accepts.
// Plain C++: no NVML, no CUDA.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace anatomy::gpu {

struct GpuSpec {
  std::string key;   // what --gpu takes: "h100-80gb"
  std::string name;  // as NVML and nvidia-smi name it: "NVIDIA H100 80GB HBM3"
  std::vector<std::string> aliases;  // other keys --gpu takes: "h100"
  // nvmlDeviceGetMemoryInfo's total (nvidia-smi's "Total"), with ECC on where
  // the GPU has it: less than the marketed size.
  int64_t total_bytes = 0;
  // nvmlDeviceGetMemoryInfo's `used` while no process holds the device: what
  // the driver and firmware keep. Counted by the `used` figure the seed prints.
  int64_t reserved_bytes = 0;
  int compute_capability_major = 0, compute_capability_minor = 0;
  // What NVML `used` grows by when a process of this engine makes its CUDA
  // context, before its first allocation.
  int64_t context_bytes = 0;
  std::string context_source;  // "measured on ...", or "estimated: ..."
};

// The catalog, in order of age.
std::vector<GpuSpec> known_gpus();

// The GPU a user or NVML names, or nullptr: a key or alias in any case, with or
// without '-', '_' or spaces ("H100", "a100_80gb"), or a name as NVML reports
// it ("NVIDIA A100-SXM4-80GB", "Tesla T4"), matched by the words that tell
// the models apart. The pointer stays valid for the life of the program.
const GpuSpec* find_gpu(std::string_view key_or_name);

// The context figure assumed for a GPU the catalog does not know.
int64_t default_context_bytes();

// NCCL's own buffers on each GPU of a data-parallel run (outside the ledger,
// like the context), as assumed when no run has measured them: 584 MiB,
// measured with NCCL 2.28 on two NVLink H100s (NVLS off). A run measures and
// prints its own ("NCCL's own buffers").
int64_t default_nccl_bytes();
inline constexpr const char* kDefaultNcclSource =
    "measured with NCCL 2.28 on two NVLink H100s, NVLS off; a run prints its own; --nccl-memory to change";

// A byte count as a user writes it: "1234" (bytes), "512MB" and "16GB"
// (powers of 1000), "80000MiB", "16GiB", "1.5TiB" and "16G" (powers of 1024);
// units in any case, a space before the unit allowed, fractions rounded to the
// nearest byte. Throws anatomy::Error naming the text (and `flag`, when given,
// as in "--gpu-memory 16XB: unknown unit ...") for anything else: empty,
// negative, an unknown unit, or more than 2^63 - 1 bytes.
int64_t parse_byte_size(std::string_view text, std::string_view flag = {});

}  // namespace anatomy::gpu
