// PLACEHOLDER being replaced by its implementation in this session.
#include "anatomy/kernels/cpu/optimizer_kernels.h"
namespace anatomy::cpu {
void sgd_step_flat(const Tensor&, const Tensor&, const Tensor&, const std::vector<ParamSegment>&, const SgdHyper&,
                   const Tensor*) {
  fail("sgd_step_flat: not implemented yet");
}
}  // namespace anatomy::cpu
