// test_engine_flags.cpp: the engine's choices from their flags and from the
// ANATOMY_* variables they replace (cli/engine_flags.cpp, compiled into the tests).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "anatomy/cli/engine_flags.h"
#include "anatomy/core/error.h"

namespace anatomy {
namespace {

using cli::EngineFlags;
using cli::resolve_engine_options;

// A fake environment for the resolution.
struct Env {
  std::map<std::string, std::string> vars;
  cli::EnvLookup lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

// The one-line error of resolving `flags` in `env`, or "" when it resolves.
std::string error_of(const EngineFlags& flags, const Env& env) {
  try {
    resolve_engine_options(flags, env.lookup());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(EngineFlags, DefaultsWithoutFlagsOrVariables) {
  const EngineOptions o = resolve_engine_options(EngineFlags{}, Env{}.lookup());
  EXPECT_EQ(o.attention, AttentionKernels::Hopper);
  EXPECT_EQ(o.last_layer, LastLayer::FirstToken);
  EXPECT_TRUE(o.gemm_tuning);
  EXPECT_TRUE(o.cudnn_plan_cache);
  EXPECT_FALSE(o.cudnn_time_plans);
  EXPECT_FALSE(o.nccl_high_priority);
  EXPECT_FALSE(o.force_distributed);
  EXPECT_EQ(o.distributed_timeout_seconds, 0.0);
}

TEST(EngineFlags, VariablesAreAliases) {
  Env env;
  env.vars = {{"ANATOMY_ATTENTION", "anatomy"},       {"ANATOMY_LAST_LAYER", "all"},
              {"ANATOMY_GEMM_TUNING", "0"},           {"ANATOMY_CUDNN_PLAN_CACHE", "0"},
              {"ANATOMY_CUDNN_ATTENTION_PLANS", "time"}, {"ANATOMY_NCCL_STREAM_PRIORITY", "high"},
              {"ANATOMY_DIST_FORCE", "1"},            {"ANATOMY_DIST_TIMEOUT", "2.5"}};
  const EngineOptions o = resolve_engine_options(EngineFlags{}, env.lookup());
  EXPECT_EQ(o.attention, AttentionKernels::Anatomy);
  EXPECT_EQ(o.last_layer, LastLayer::All);
  EXPECT_FALSE(o.gemm_tuning);
  EXPECT_FALSE(o.cudnn_plan_cache);
  EXPECT_TRUE(o.cudnn_time_plans);
  EXPECT_TRUE(o.nccl_high_priority);
  EXPECT_TRUE(o.force_distributed);
  EXPECT_EQ(o.distributed_timeout_seconds, 2.5);
  // Empty is unset.
  env.vars = {{"ANATOMY_ATTENTION", ""}, {"ANATOMY_GEMM_TUNING", ""}};
  EXPECT_EQ(resolve_engine_options(EngineFlags{}, env.lookup()).attention, AttentionKernels::Hopper);
  EXPECT_TRUE(resolve_engine_options(EngineFlags{}, env.lookup()).gemm_tuning);
}

TEST(EngineFlags, AFlagWinsOverItsVariable) {
  Env env;
  env.vars = {{"ANATOMY_ATTENTION", "anatomy"}, {"ANATOMY_GEMM_TUNING", "0"}, {"ANATOMY_DIST_TIMEOUT", "5"}};
  EngineFlags flags;
  flags.attention = "cudnn";
  flags.gemm_tuning = "True";
  flags.distributed_timeout = "30";
  const EngineOptions o = resolve_engine_options(flags, env.lookup());
  EXPECT_EQ(o.attention, AttentionKernels::Cudnn);
  EXPECT_TRUE(o.gemm_tuning);
  EXPECT_EQ(o.distributed_timeout_seconds, 30.0);
}

// A bad value is one line naming the variable (VAR=value) or the flag (--flag value).
TEST(EngineFlags, BadValuesAreOneClearLine) {
  const std::map<std::string, std::string> bad_variables = {
      {"ANATOMY_ATTENTION", "flash3"},      {"ANATOMY_LAST_LAYER", "cls"},
      {"ANATOMY_GEMM_TUNING", "2"},         {"ANATOMY_GEMM_TUNING", "yes"},
      {"ANATOMY_CUDNN_PLAN_CACHE", "off"},  {"ANATOMY_CUDNN_ATTENTION_PLANS", "all"},
      {"ANATOMY_NCCL_STREAM_PRIORITY", "max"}, {"ANATOMY_DIST_FORCE", "true"},
      {"ANATOMY_DIST_TIMEOUT", "soon"}};
  for (const auto& [name, value] : bad_variables) {
    Env env;
    env.vars[name] = value;
    const std::string message = error_of(EngineFlags{}, env);
    EXPECT_EQ(message.rfind(name + "=" + value + ": expected", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  for (const char* bad : {"2", "yes", "off", " 1"}) {
    Env env;
    env.vars["ANATOMY_GEMM_TUNING"] = bad;
    EXPECT_EQ(error_of(EngineFlags{}, env).rfind(std::string("ANATOMY_GEMM_TUNING=") + bad + ":", 0), 0u);
  }
  for (const char* bad : {"0", "-1", "nan", "inf", "1e400"}) {
    Env env;
    env.vars["ANATOMY_DIST_TIMEOUT"] = bad;
    EXPECT_EQ(error_of(EngineFlags{}, env).rfind(std::string("ANATOMY_DIST_TIMEOUT=") + bad + ":", 0), 0u) << bad;
  }
  EngineFlags flags;
  flags.gemm_tuning = "maybe";
  EXPECT_EQ(error_of(flags, Env{}), "--gemm-tuning maybe: expected true or false");
  flags = EngineFlags{};
  flags.distributed_timeout = "-3";
  EXPECT_EQ(error_of(flags, Env{}), "--distributed-timeout -3: expected a positive number of seconds");
}

TEST(EngineFlags, RecordedByFlagName) {
  EngineOptions o;
  o.attention = AttentionKernels::Cudnn;
  o.distributed_timeout_seconds = 12.5;
  const auto fields = engine_option_fields(o);
  const std::map<std::string, std::string> by_name(fields.begin(), fields.end());
  EXPECT_EQ(by_name.at("attention"), "cudnn");
  EXPECT_EQ(by_name.at("last_layer"), "first-token");
  EXPECT_EQ(by_name.at("gemm_tuning"), "true");
  EXPECT_EQ(by_name.at("distributed_timeout"), "12.5");
  EXPECT_EQ(fields.size(), 8u);
}

}  // namespace
}  // namespace anatomy
