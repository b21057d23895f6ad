// engine_options.h: the engine's choices of how to run a step — which
// attention kernels, whether the last layer is pruned to its first token, how
// cuBLASLt and cuDNN pick and keep their plans, NCCL's stream priority, the
// distributed path and its timeout. None changes the model's mathematics; some
// change what the memory plan holds (the attention kernels' workspaces, the
// last layer's activations). They are one value, read in one place (the
// command line and its ANATOMY_* environment aliases: cli/engine_flags.h),
// carried down by the backend (Backend::options()), and recorded in anatomy.json.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace anatomy {

// The CUDA backend's 16-bit fused attention.
enum class AttentionKernels {
  Hopper,   // hopper_attention.cu where the device (sm_90) and the shape allow, else cuDNN's
  Cudnn,    // cuDNN's fused attention (when the build has it), else ours
  Anatomy,  // our flash kernels (flash_attention.cu), whose dropout masks are the CPU backend's
};

// The last encoder layer of a model whose head reads the first token only.
enum class LastLayer {
  FirstToken,  // query, attention and what follows for the first token only (the pooler's input)
  All,         // every token, as Hugging Face computes it
};

struct EngineOptions {
  AttentionKernels attention = AttentionKernels::Hopper;
  LastLayer last_layer = LastLayer::FirstToken;
  // cuBLASLt: time the offered algorithms of each product shape once and keep
  // the fastest (in $XDG_CACHE_HOME/anatomy/gemm_algos.json); off: the heuristic's first.
  bool gemm_tuning = true;
  // cuDNN: keep built attention plans in $XDG_CACHE_HOME/anatomy/cudnn_plans/.
  bool cudnn_plan_cache = true;
  // cuDNN (a diagnostic): time every plan the heuristics offer on first use and run the fastest.
  bool cudnn_time_plans = false;
  // NCCL's communication stream at the device's highest priority.
  bool nccl_high_priority = false;
  // The data-parallel path (rendezvous, communicator) even for one process.
  bool force_distributed = false;
  // Seconds to wait for another rank (rendezvous, collectives); 0: the default.
  double distributed_timeout_seconds = 0.0;
};

std::string_view attention_kernels_name(AttentionKernels a);  // "hopper", "cudnn", "anatomy"
std::string_view last_layer_name(LastLayer l);                 // "first-token", "all"
// Parses those names; false for any other.
bool parse_attention_kernels(std::string_view name, AttentionKernels* out);
bool parse_last_layer(std::string_view name, LastLayer* out);
// The options by their flag names, as anatomy.json records them.
std::vector<std::pair<std::string, std::string>> engine_option_fields(const EngineOptions& options);

}  // namespace anatomy
