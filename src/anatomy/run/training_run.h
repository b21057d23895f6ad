// training_run.h: one training run as `anatomy train` and `anatomy profile`
// make it, below the command line: the rendezvous when a launcher started
// this process (or --force-distributed), the device and its communicator, the
// memory plan before anything is allocated (with --auto-find-batch-size, the
// largest batch it says fits), the model (a checkpoint or a preset), the
// Trainer, the seed's summary lines, the memory anatomy and its files, the
// profile, and on running out of memory the report of what fits (or, with
// --auto-find-batch-size, a smaller batch). It writes its lines as it goes to
// the request's `out` (the out-of-memory report to `err`); the command line
// passes stdout and stderr.
//
// It sits between cli/ (flags) and analysis/ (the plan, which runs the
// Trainer on the meta backend): the run uses the plan, so it cannot live in
// train/ below it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "anatomy/core/engine_options.h"
#include "anatomy/kernels/fp32_products.h"
#include "anatomy/train/arguments.h"

namespace anatomy::run {

struct TrainingRequest {
  TrainingArguments args;
  EngineOptions options;
  Fp32Products fp32_products = Fp32Products::Float32;
  std::string device = "auto";  // cpu, cuda or auto
  bool profile = false;          // `anatomy profile`: the time anatomy, no model saved
  int64_t profile_steps = 0;     // steps whose every operation is timed (0: none)
  int64_t profile_warmup = 3;    // steps before them
  int64_t anatomy_steps = 0;     // print the memory anatomy every N steps (0: at the end only)
  bool auto_find_batch_size = false;
  // What the user set: on a machine without a GPU under --device auto, the
  // seed experiment is scaled to the CPU in what was not set.
  bool model_given = false, dummy_size_given = false, dummy_seq_len_given = false;
  // Where the run's lines go: the seed's summary ("Time: ...", "Samples/second:
  // ...", "GPU memory occupied: ..."), the memory anatomy, the notes; and the
  // out-of-memory report. (The trainer's progress bar and log lines are its own.)
  std::FILE* out = stdout;
  std::FILE* err = stderr;
};

// Runs it; returns the exit code: 0, or 3 when the device (or the plan) ran
// out of memory (the report is on stderr). Bad input throws Error.
int run_training(const TrainingRequest& request);

// The profiled window: `count` steps after `warmup`, moved earlier when the
// run has fewer steps: (first step, steps).
std::pair<int64_t, int64_t> profile_window(int64_t warmup, int64_t count, int64_t total);

}  // namespace anatomy::run
