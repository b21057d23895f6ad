// PLACEHOLDER being replaced by its implementation in this session.
#include "anatomy/kernels/cpu/optimizer_kernels.h"
namespace anatomy::cpu {
void adamw8bit_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                    const Tensor&, const Tensor&, const AdamWHyper&, const Tensor*) {
  fail("adamw8bit_step: not implemented yet");
}
}  // namespace anatomy::cpu
