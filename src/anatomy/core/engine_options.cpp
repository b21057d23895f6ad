// engine_options.cpp: the names of the engine's choices.
#include "anatomy/core/engine_options.h"

#include <fmt/format.h>

namespace anatomy {

std::string_view attention_kernels_name(AttentionKernels a) {
  switch (a) {
    case AttentionKernels::Hopper: return "hopper";
    case AttentionKernels::Cudnn: return "cudnn";
    case AttentionKernels::Anatomy: return "anatomy";
  }
  return "?";
}

std::string_view last_layer_name(LastLayer l) {
  switch (l) {
    case LastLayer::FirstToken: return "first-token";
    case LastLayer::All: return "all";
  }
  return "?";
}

bool parse_attention_kernels(std::string_view name, AttentionKernels* out) {
  for (AttentionKernels a : {AttentionKernels::Hopper, AttentionKernels::Cudnn, AttentionKernels::Anatomy})
    if (name == attention_kernels_name(a)) {
      *out = a;
      return true;
    }
  return false;
}

bool parse_last_layer(std::string_view name, LastLayer* out) {
  for (LastLayer l : {LastLayer::FirstToken, LastLayer::All})
    if (name == last_layer_name(l)) {
      *out = l;
      return true;
    }
  return false;
}

std::vector<std::pair<std::string, std::string>> engine_option_fields(const EngineOptions& o) {
  const auto flag = [](bool on) { return std::string(on ? "true" : "false"); };
  return {
      {"attention", std::string(attention_kernels_name(o.attention))},
      {"last_layer", std::string(last_layer_name(o.last_layer))},
      {"gemm_tuning", flag(o.gemm_tuning)},
      {"cudnn_plan_cache", flag(o.cudnn_plan_cache)},
      {"cudnn_time_plans", flag(o.cudnn_time_plans)},
      {"nccl_stream_priority", o.nccl_high_priority ? "high" : "default"},
      {"force_distributed", flag(o.force_distributed)},
      {"distributed_timeout", o.distributed_timeout_seconds > 0 ? fmt::format("{:g}", o.distributed_timeout_seconds)
                                                                : std::string("default")},
  };
}

}  // namespace anatomy
