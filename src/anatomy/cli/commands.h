// commands.h: the subcommands of the `anatomy` program. Each registers its
// flags on a CLI11 subcommand and returns the function that runs it.
#pragma once

#include <functional>
#include <memory>

#include <CLI/CLI.hpp>

#include "anatomy/run/device.h"

namespace anatomy::cli {

using run::DeviceChoice;
using run::choose_device;
using run::nvml_index_of;

using Command = std::function<int()>;

// `profile_command`: the same flags for `anatomy profile`, which trains only
// the warm-up and profiled steps and prints the time anatomy.
Command add_train_command(CLI::App& app, bool profile_command = false);
Command add_forward_command(CLI::App& app);
// `anatomy evaluate` (loss and accuracy) and, with `predict`, `anatomy predict`
// (also writes the predictions): inference only, packed batches.
Command add_evaluate_command(CLI::App& app, bool predict);
// `anatomy estimate`: the train flags plus --gpu / --gpu-memory; needs no GPU.
Command add_estimate_command(CLI::App& app);
// `anatomy tokenize`: WordPiece as Hugging Face's BertTokenizer, JSON lines in and out.
Command add_tokenize_command(CLI::App& app);
// `anatomy bench`: a sweep of training configurations, each an `anatomy train`
// child process; the seeds' table as Markdown, JSON and an SVG chart.
Command add_bench_command(CLI::App& app);
// `anatomy launch`: one process of this program per GPU, torchrun-style
// variables, output prefixed "[rank k] ", a failing rank stops the rest.
Command add_launch_command(CLI::App& app);
// `anatomy dist-check` (hidden): rendezvous, a blob from rank 0, a barrier;
// --fail-rank / --hang-rank / --stall-rank show that a lost rank ends the others.
Command add_dist_check_command(CLI::App& app);
// Line-buffers stdout in a child of `anatomy launch`, so that its lines reach
// the launcher's "[rank k] " prefixes as they are printed. First thing in main().
void line_buffer_if_launched();
// `anatomy --version`: the program, its backends, and the library versions built in (cli/version.cpp).
std::string version_text();

// Checks of number flags with messages that say what was expected
// ("--learning-rate: expected a non-negative number, got -1").
const CLI::Validator& positive_number();
const CLI::Validator& non_negative_number();
// Integer flags (int64, or the seed's uint64), refusing what does not fit instead of clamping it.
const CLI::Validator& positive_integer();
const CLI::Validator& non_negative_integer();
const CLI::Validator& max_steps_integer();  // at least -1 (-1 and 0: the epochs decide)
const CLI::Validator& seed_integer();
// A finite number in [0, 1): AdamW's betas.
const CLI::Validator& probability_below_one();

}  // namespace anatomy::cli
