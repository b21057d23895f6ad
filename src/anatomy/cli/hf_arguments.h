// hf_arguments.h: Hugging Face's command-line syntax (HfArgumentParser) on top of
// CLI11, so that a run_glue / Trainer command line pastes:
//   - `--per_device_train_batch_size 8` and `--per-device-train-batch-size 8`
//     are the same flag (underscores read as dashes, for the command's flags);
//   - a flag takes `True`/`False` (also `--fp16=False`; yes/no, true/false,
//     t/f, y/n, 1/0 in any case, as string_to_bool) as well as standing alone;
//   - a TrainingArguments (or run_glue) name that the command has no flag for
//     is "not supported", not "unknown";
//   - an unknown flag is named alone, the first one, with its command.
// Everything after a lone `--` (launch's command) is left as it is.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace anatomy::cli {

// `args` (argv without the program name) rewritten as the commands of `app` read them; throws Error for a
// name that is not supported or not known, or a flag value that is not a boolean.
std::vector<std::string> normalize_hf_arguments(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace anatomy::cli
