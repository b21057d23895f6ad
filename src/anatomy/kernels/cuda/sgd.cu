// PLACEHOLDER being replaced by its implementation in this session.
#include "anatomy/kernels/cuda/optimizer_kernels.cuh"
namespace anatomy::cuda {
void sgd_step_flat(cudaStream_t, const Tensor&, const Tensor&, const Tensor&, const std::vector<ParamSegment>&,
                   const SgdHyper&, const Tensor*) {
  fail("sgd_step_flat: not implemented yet");
}
}  // namespace anatomy::cuda
