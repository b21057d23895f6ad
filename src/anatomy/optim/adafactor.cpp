// adafactor.cpp: PLACEHOLDER being replaced by its implementation in this session.
#include "anatomy/optim/optimizer.h"

namespace anatomy {

std::unique_ptr<Optimizer> make_adafactor(Backend&, const ParameterSet&, const OptimizerOptions&) {
  fail("--optim adafactor: not implemented yet");
}

}  // namespace anatomy
