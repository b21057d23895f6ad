// train_command.cpp: `anatomy train` and `anatomy profile`: the flags, then
// the run (run/training_run.h).
#include <memory>

#include "anatomy/cli/commands.h"
#include "anatomy/cli/training_flags.h"
#include "anatomy/core/error.h"
#include "anatomy/run/training_run.h"

namespace anatomy::cli {

Command add_train_command(CLI::App& app, bool profile_command) {
  auto flags = std::make_shared<TrainFlags>();
  if (profile_command) flags->profile_steps = 5;
  add_training_flags(app, *flags);
  app.add_option("--profile-steps", flags->profile_steps,
                 "Time every operation of this many steps (CUDA events) and print the time anatomy")
      ->capture_default_str()->check(non_negative_number());
  app.add_option("--profile-warmup", flags->profile_warmup, "Steps to run before the profiled ones")
      ->capture_default_str()->check(non_negative_number());

  return [flags, &app, profile_command]() -> int {
    run::TrainingRequest r;
    // A bad choice (a flag or its ANATOMY_* variable) ends every run, not only
    // those that reach the GPU's kernels it concerns.
    r.options = resolve_engine_options(flags->engine);
    r.args = resolve_training_flags(*flags, app);
    if (profile_command && !app.count("--max-steps") && !app.count("--num-train-epochs"))
      r.args.max_steps = flags->profile_warmup + flags->profile_steps;  // profile: just the steps it needs
    r.fp32_products = fp32_products_of(*flags);
    r.device = flags->device;
    r.profile = profile_command;
    r.profile_steps = flags->profile_steps;
    r.profile_warmup = flags->profile_warmup;
    r.anatomy_steps = flags->anatomy_steps;
    r.auto_find_batch_size = flags->auto_find_batch_size;
    r.model_given = app.count("--model") > 0;
    r.dummy_size_given = app.count("--dummy-size") > 0;
    r.dummy_seq_len_given = app.count("--dummy-seq-len") > 0;
    return run::run_training(r);
  };
}

}  // namespace anatomy::cli
