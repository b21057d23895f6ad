// library_versions.h: the CUDA libraries this build carries and the versions
// it finds when it runs (for `anatomy --version`).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace anatomy::cuda {

// (name, version) rows: the CUDA toolkit built with, the runtime, the driver
// (or "no driver"), cuBLAS, cuDNN (or "not built in"), NCCL (or "not built in").
std::vector<std::pair<std::string, std::string>> library_versions();

}  // namespace anatomy::cuda
