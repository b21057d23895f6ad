// PLACEHOLDER being replaced by its implementation in this session.
#include "anatomy/kernels/cpu/optimizer_kernels.h"
namespace anatomy::cpu {
void adafactor_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AdafactorHyper&,
                    const Tensor*) {
  fail("adafactor_step: not implemented yet");
}
}  // namespace anatomy::cpu
