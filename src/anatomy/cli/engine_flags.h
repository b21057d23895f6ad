// engine_flags.h: the engine's choices (core/engine_options.h) as flags, each
// with the ANATOMY_* environment variable it replaces as an alias: a flag
// given wins, else the variable, else the default. This is the one place
// where those variables are read.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "anatomy/core/engine_options.h"

namespace anatomy::cli {

struct EngineFlags {
  std::string attention;           // --attention (ANATOMY_ATTENTION)
  std::string last_layer;          // --last-layer (ANATOMY_LAST_LAYER)
  std::string gemm_tuning;         // --gemm-tuning (ANATOMY_GEMM_TUNING)
  std::string cudnn_plan_cache;    // --cudnn-plan-cache (ANATOMY_CUDNN_PLAN_CACHE)
  std::string cudnn_time_plans;    // --cudnn-time-plans (ANATOMY_CUDNN_ATTENTION_PLANS=time)
  std::string nccl_stream_priority;  // --nccl-stream-priority (ANATOMY_NCCL_STREAM_PRIORITY)
  std::string force_distributed;   // --force-distributed (ANATOMY_DIST_FORCE)
  std::string distributed_timeout;  // --distributed-timeout (ANATOMY_DIST_TIMEOUT)
};

// Registers the flags (in the "Engine" group of --help); without `training`,
// only those of inference (the kernels and their plans).
void add_engine_flags(CLI::App& app, EngineFlags& flags, bool training = true);
// The environment as the resolution sees it (the tests give their own).
using EnvLookup = std::function<const char*(const char*)>;
// The options the flags and the environment ask for; a bad value ends the run
// with one line naming the flag or the variable.
EngineOptions resolve_engine_options(const EngineFlags& flags, const EnvLookup& getenv = &std::getenv);

}  // namespace anatomy::cli
