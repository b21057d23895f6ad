// engine_flags.cpp: the engine's choices from the flags and their ANATOMY_* aliases.
#include "anatomy/cli/engine_flags.h"

#include <cmath>
#include <cstdlib>

#include "anatomy/core/error.h"

namespace anatomy::cli {

namespace {

// A flag's value when given, else its environment variable's (unset or empty: "").
struct Setting {
  std::string value;
  std::string source;  // "--flag" or "VARIABLE" (for errors)
  bool from_flag() const { return source.rfind("--", 0) == 0; }
};

Setting setting(const std::string& flag_value, const char* flag, const char* variable, const EnvLookup& getenv) {
  if (!flag_value.empty()) return {flag_value, std::string(flag)};
  const char* v = getenv(variable);
  return {v != nullptr ? std::string(v) : std::string(), std::string(variable)};
}

[[noreturn]] void refuse(const Setting& s, std::string_view expected) {
  if (s.from_flag()) fail("{} {}: expected {}", s.source, s.value, expected);
  fail("{}={}: expected {}", s.source, s.value, expected);
}

// A switch: a flag's true/false (True/False, 1/0, as HfArgumentParser takes
// them); a variable's 1/0, as it always was.
bool parse_switch(const Setting& s, bool fallback, std::string_view variable_expected) {
  if (s.value.empty()) return fallback;
  const bool flag = s.from_flag();
  if (s.value == "1" || (flag && (s.value == "true" || s.value == "True"))) return true;
  if (s.value == "0" || (flag && (s.value == "false" || s.value == "False"))) return false;
  refuse(s, flag ? std::string_view("true or false") : variable_expected);
}

}  // namespace

void add_engine_flags(CLI::App& app, EngineFlags& f, bool training) {
  const std::string group = "Engine (each also read from the ANATOMY_* variable named, when the flag is not given)";
  app.add_option("--attention", f.attention,
                 "16-bit fused attention on the GPU: hopper (our wgmma kernels where the GPU is sm_90 and the head "
                 "size 64, L <= 512; elsewhere cuDNN's; the default), cudnn (cuDNN's), anatomy (our flash kernels, "
                 "the CPU backend's dropout masks bit for bit) [ANATOMY_ATTENTION]")
      ->check(CLI::IsMember({"hopper", "cudnn", "anatomy"}))->group(group);
  if (training)
    app.add_option("--last-layer", f.last_layer,
                 "first-token (the default: the last encoder layer computes its query and what follows attention for "
                 "the token the pooler reads) or all (every token, as Hugging Face) [ANATOMY_LAST_LAYER]")
      ->check(CLI::IsMember({"first-token", "all"}))->group(group);
  app.add_option("--gemm-tuning", f.gemm_tuning,
                 "true (the default: time cuBLASLt's candidate algorithms of each product shape once, kept in "
                 "~/.cache/anatomy/gemm_algos.json) or false (take the heuristic's first) [ANATOMY_GEMM_TUNING]")
      ->group(group);
  app.add_option("--cudnn-plan-cache", f.cudnn_plan_cache,
                 "true (the default: keep cuDNN's built attention plans in ~/.cache/anatomy/cudnn_plans/) or false "
                 "[ANATOMY_CUDNN_PLAN_CACHE]")
      ->group(group);
  app.add_option("--cudnn-time-plans", f.cudnn_time_plans,
                 "true: time every attention plan cuDNN's heuristics offer on first use and run the fastest (a "
                 "diagnostic; times on stderr) [ANATOMY_CUDNN_ATTENTION_PLANS=time]")
      ->group(group);
  if (!training) return;
  app.add_option("--nccl-stream-priority", f.nccl_stream_priority,
                 "default, or high: NCCL's stream at the device's greatest priority (a diagnostic) "
                 "[ANATOMY_NCCL_STREAM_PRIORITY]")
      ->check(CLI::IsMember({"default", "high"}))->group(group);
  app.add_option("--force-distributed", f.force_distributed,
                 "true: the data-parallel path (rendezvous, communicator, bucketed all-reduce, ZeRO) even for one "
                 "process, to test it on one GPU [ANATOMY_DIST_FORCE=1]")
      ->group(group);
  app.add_option("--distributed-timeout", f.distributed_timeout,
                 "Seconds to wait for another rank (default 60; `anatomy launch --rendezvous-timeout` sets it for its "
                 "ranks) [ANATOMY_DIST_TIMEOUT]")
      ->group(group);
}

EngineOptions resolve_engine_options(const EngineFlags& f, const EnvLookup& getenv) {
  EngineOptions o;
  if (const Setting s = setting(f.attention, "--attention", "ANATOMY_ATTENTION", getenv); !s.value.empty())
    if (!parse_attention_kernels(s.value, &o.attention)) refuse(s, "hopper, cudnn or anatomy");
  if (const Setting s = setting(f.last_layer, "--last-layer", "ANATOMY_LAST_LAYER", getenv); !s.value.empty())
    if (!parse_last_layer(s.value, &o.last_layer)) refuse(s, "first-token or all");
  o.gemm_tuning = parse_switch(setting(f.gemm_tuning, "--gemm-tuning", "ANATOMY_GEMM_TUNING", getenv), true,
                               "1 (time cuBLASLt's candidate algorithms, the default) or 0 (take its first)");
  o.cudnn_plan_cache = parse_switch(setting(f.cudnn_plan_cache, "--cudnn-plan-cache", "ANATOMY_CUDNN_PLAN_CACHE", getenv),
                                    true, "1 or 0 (or unset)");
  {
    const Setting s = setting(f.cudnn_time_plans, "--cudnn-time-plans", "ANATOMY_CUDNN_ATTENTION_PLANS", getenv);
    if (!s.from_flag()) {
      if (!s.value.empty() && s.value != "time") refuse(s, "time (or unset)");
      o.cudnn_time_plans = s.value == "time";
    } else {
      o.cudnn_time_plans = parse_switch(s, false, "");
    }
  }
  if (const Setting s = setting(f.nccl_stream_priority, "--nccl-stream-priority", "ANATOMY_NCCL_STREAM_PRIORITY", getenv);
      !s.value.empty()) {
    if (s.value != "default" && s.value != "high") refuse(s, "default or high");
    o.nccl_high_priority = s.value == "high";
  }
  o.force_distributed = parse_switch(setting(f.force_distributed, "--force-distributed", "ANATOMY_DIST_FORCE", getenv),
                                     false, "1 or 0 (or unset)");
  if (const Setting s = setting(f.distributed_timeout, "--distributed-timeout", "ANATOMY_DIST_TIMEOUT", getenv);
      !s.value.empty()) {
    char* end = nullptr;
    const double seconds = std::strtod(s.value.c_str(), &end);
    if (end != s.value.c_str() + s.value.size() || !std::isfinite(seconds) || seconds <= 0.0)
      refuse(s, "a positive number of seconds");
    o.distributed_timeout_seconds = seconds;
  }
  return o;
}

}  // namespace anatomy::cli
