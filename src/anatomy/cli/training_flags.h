// training_flags.h: the flags of a training run (Hugging Face TrainingArguments
// in kebab case, plus the device and precision), shared by `train`, `profile`
// and `estimate`, which must read them alike.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "anatomy/cli/engine_flags.h"
#include "anatomy/kernels/fp32_products.h"
#include "anatomy/train/arguments.h"

namespace anatomy::cli {

struct TrainFlags {
  TrainingArguments args;
  int64_t profile_steps = 0;
  int64_t profile_warmup = 3;
  int64_t anatomy_steps = 0;        // print the memory anatomy every N steps (0: at the end only)
  bool auto_find_batch_size = false;
  std::string scheduler = "linear";
  std::string warmup_steps = "0";   // N, or (transformers 5) a ratio below 1
  double warmup_ratio = 0;          // transformers 4's --warmup_ratio
  std::string device = "auto";
  bool no_shuffle = false;
  bool no_progress = false;
  bool do_train = false;            // run_glue's --do_train, accepted
  bool tf32 = false;
  bool split_tf32 = false;
  EngineFlags engine;
};

void add_training_flags(CLI::App& app, TrainFlags& flags);
// The arguments the flags ask for, after the checks that span several flags
// (each failure names the flags).
TrainingArguments resolve_training_flags(const TrainFlags& flags, const CLI::App& app);
// How float32 products run: --tf32, --split-tf32 (not both), or plain float32.
Fp32Products fp32_products_of(const TrainFlags& flags);

}  // namespace anatomy::cli
