// plateau.cpp: ReduceLROnPlateau.step, as torch writes it.
#include "anatomy/optim/plateau.h"

#include <algorithm>

namespace anatomy {

void PlateauSchedule::step(double metric) {
  // mode "min", threshold_mode "rel": better when below best·(1 − threshold).
  if (metric < best * (1.0 - threshold)) {
    best = metric;
    num_bad_epochs = 0;
  } else {
    ++num_bad_epochs;
  }
  if (cooldown_counter > 0) {
    --cooldown_counter;
    num_bad_epochs = 0;  // bad epochs are not counted during the cooldown
  }
  if (num_bad_epochs > patience) {
    const double reduced = std::max(lr * factor, min_lr);
    if (lr - reduced > eps) lr = reduced;
    cooldown_counter = cooldown;
    num_bad_epochs = 0;
  }
}

}  // namespace anatomy
