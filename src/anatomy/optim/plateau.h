// plateau.h: torch.optim.lr_scheduler.ReduceLROnPlateau with the defaults
// transformers' get_scheduler("reduce_lr_on_plateau") gives it (mode min,
// factor 0.1, patience 10, threshold 1e-4 relative, cooldown 0, min_lr 0,
// eps 1e-8). Trainer steps it once per evaluation with the metric of
// metric_for_best_model (eval_loss by default), never per training step, and
// trains at its current rate (no warmup).
#pragma once

#include <cstdint>
#include <limits>

namespace anatomy {

struct PlateauSchedule {
  double lr = 0.0;                                     // the rate the next updates use
  double best = std::numeric_limits<double>::infinity();
  int64_t num_bad_epochs = 0;
  int64_t cooldown_counter = 0;
  // torch's defaults.
  double factor = 0.1;
  int64_t patience = 10;
  double threshold = 1e-4;
  int64_t cooldown = 0;
  double min_lr = 0.0;
  double eps = 1e-8;

  explicit PlateauSchedule(double base_lr = 0.0) : lr(base_lr) {}
  // ReduceLROnPlateau.step(metric).
  void step(double metric);
};

}  // namespace anatomy
