// main.cpp: the `anatomy` command. Every error reaches the user as one line,
// "error: ...", with a non-zero exit code.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "anatomy/cli/commands.h"
#include "anatomy/cli/hf_arguments.h"
#include "anatomy/core/error.h"
#include "anatomy/core/ledger.h"
#include "anatomy/distributed/store.h"

int main(int argc, char** argv) {
  anatomy::cli::line_buffer_if_launched();
  // A write past the file-size limit (ulimit -f) fails with EFBIG and is
  // reported as any full disk is, instead of killing the process.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"anatomy: train and run BERT, and see where every byte and millisecond goes"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::function<std::string()>(anatomy::cli::version_text));
  std::vector<std::pair<CLI::App*, anatomy::cli::Command>> commands;
  {
    auto* train = app.add_subcommand(
        "train", "Train a sequence classifier: BERT, RoBERTa, ELECTRA, DistilBERT, ModernBERT (the seed experiment "
                 "by default)");
    commands.emplace_back(train, anatomy::cli::add_train_command(*train));
    auto* profile = app.add_subcommand("profile", "Time every operation of a few training steps (same flags as train)");
    commands.emplace_back(profile, anatomy::cli::add_train_command(*profile, /*profile_command=*/true));
    auto* estimate = app.add_subcommand(
        "estimate", "The memory plan of a training run (same flags as train) on this or a named GPU, without running it");
    commands.emplace_back(estimate, anatomy::cli::add_estimate_command(*estimate));
    auto* forward = app.add_subcommand("forward", "Run one forward (and backward) pass on a batch from a file");
    commands.emplace_back(forward, anatomy::cli::add_forward_command(*forward));
    auto* evaluate = app.add_subcommand(
        "evaluate", "Inference only (no gradients, 16-bit weights, no padding): loss, accuracy, speed and memory");
    commands.emplace_back(evaluate, anatomy::cli::add_evaluate_command(*evaluate, /*predict=*/false));
    auto* predict = app.add_subcommand("predict", "As evaluate, and write each example's label and probabilities");
    commands.emplace_back(predict, anatomy::cli::add_evaluate_command(*predict, /*predict=*/true));
    auto* tokenize = app.add_subcommand("tokenize", "WordPiece-tokenize JSON-lines texts as Hugging Face's BertTokenizer");
    commands.emplace_back(tokenize, anatomy::cli::add_tokenize_command(*tokenize));
    auto* bench = app.add_subcommand(
        "bench", "Sweep the seeds' training techniques, each row a clean train process: the table, JSON and a chart");
    commands.emplace_back(bench, anatomy::cli::add_bench_command(*bench));
    auto* launch = app.add_subcommand(
        "launch", "Start one process per GPU (torchrun-style variables) running the command after --");
    commands.emplace_back(launch, anatomy::cli::add_launch_command(*launch));
    auto* dist_check = app.add_subcommand("dist-check", "Check rendezvous, store and failure handling")->group("");
    commands.emplace_back(dist_check, anatomy::cli::add_dist_check_command(*dist_check));
  }
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    try {
      args = anatomy::cli::normalize_hf_arguments(app, args);
    } catch (const anatomy::Error& e) {
      fmt::print(stderr, "error: {}\n", e.what());
      return 2;
    }
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
  } catch (const anatomy::OutOfMemory& e) {
    // A device allocation failed where no fuller report was made.
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return 3;
  } catch (const anatomy::distributed::PeerFailure& e) {
    // This rank stops because another failed: a code of its own, so that a
    // launcher can name the rank that failed first.
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return anatomy::distributed::kPeerFailureExitCode;
  } catch (const anatomy::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    fmt::print(stderr, "error: out of host memory\n");
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the system could not resolve where no reader named it first.
    std::fflush(stdout);
    fmt::print(stderr, "error: {}: {}\n", e.path1().string(), e.code().message());
    return 1;
  } catch (const std::exception& e) {
    // Anything else a library threw (no reader should let one through): an
    // error line and exit code 1, never an abort.
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
