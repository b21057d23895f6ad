// adamw_8bit.cpp: PLACEHOLDER being replaced by its implementation in this session.
#include "anatomy/optim/optimizer.h"

namespace anatomy {

std::unique_ptr<Optimizer> make_adamw_8bit(Backend&, const ParameterSet&, const OptimizerOptions&) {
  fail("--optim adamw_8bit: not implemented yet");
}

}  // namespace anatomy
