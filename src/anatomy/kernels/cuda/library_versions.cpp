// library_versions.cpp: versions of the CUDA toolkit and libraries, built with and found.
#include "anatomy/kernels/cuda/library_versions.h"

#include <cublas_api.h>
#include <cuda_runtime.h>
#include <library_types.h>

#include <fmt/format.h>

#ifdef ANATOMY_HAVE_CUDNN
#include <cudnn.h>
#endif
#ifdef ANATOMY_HAVE_NCCL
#include <nccl.h>
#endif

namespace anatomy::cuda {

namespace {
// CUDA's encoding: 1000·major + 10·minor.
std::string cuda_version(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }
}  // namespace

std::vector<std::pair<std::string, std::string>> library_versions() {
  std::vector<std::pair<std::string, std::string>> rows;
  rows.emplace_back("CUDA toolkit (built with)", cuda_version(CUDART_VERSION));
  int runtime = 0, driver = 0;
  rows.emplace_back("CUDA runtime", cudaRuntimeGetVersion(&runtime) == cudaSuccess ? cuda_version(runtime) : "?");
  rows.emplace_back("CUDA driver",
                    cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0 ? cuda_version(driver) : "no driver");
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    rows.emplace_back("cuBLAS", fmt::format("{}.{}.{} (built with {}.{}.{})", major, minor, patch, CUBLAS_VER_MAJOR,
                                            CUBLAS_VER_MINOR, CUBLAS_VER_PATCH));
  else
    rows.emplace_back("cuBLAS", fmt::format("built with {}.{}.{}", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH));
#ifdef ANATOMY_HAVE_CUDNN
  const size_t v = cudnnGetVersion();  // 10000·major + 100·minor + patch (cuDNN 9)
  rows.emplace_back("cuDNN", fmt::format("{}.{}.{} (built with {}.{}.{})", v / 10000, (v / 100) % 100, v % 100,
                                         CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL));
#else
  rows.emplace_back("cuDNN", "not built in (no fused cuDNN attention)");
#endif
#ifdef ANATOMY_HAVE_NCCL
  int nccl = 0;
  ncclGetVersion(&nccl);
  rows.emplace_back("NCCL", fmt::format("{}.{}.{} (built with {}.{}.{})", nccl / 10000, (nccl / 100) % 100,
                                        nccl % 100, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH));
#else
  rows.emplace_back("NCCL", "not built in (one GPU per process, no data parallelism across GPUs)");
#endif
  return rows;
}

}  // namespace anatomy::cuda
