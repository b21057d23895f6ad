// gemm_tuning_cache.h: the record of which cuBLASLt algorithm the CUDA backend
// chose for each matrix-product plan, kept across runs in
// $XDG_CACHE_HOME/anatomy/gemm_algos.json (~/.cache when unset), unless
// EngineOptions::gemm_tuning is off. Plain C++ (no CUDA types), so that the CPU tests
// can check the file's parsing and writing without a GPU.
//
// The backend times cuBLASLt's candidate algorithms for a plan once and keeps
// the fastest (kernels/cuda/cuda_backend.cu). Timings are noisy, so two runs
// could choose differently and give different bits for the same inputs; the
// cache makes the first run's choice every later run's. A choice is the index
// of the algorithm in cuBLASLt's heuristic list for that plan, which is the
// same list on the same GPU and cuBLASLt version: both are part of the key.
//
// The file:
//   {"format": 1,
//    "choices": {"<GPU> | <cuBLASLt version> | <plan>": <index>, ...}}
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace anatomy::cuda {

// Key (GPU, cuBLASLt version, plan) -> index of the chosen algorithm.
using GemmChoices = std::map<std::string, int>;

// $XDG_CACHE_HOME/anatomy/gemm_algos.json, ~/.cache/... when XDG_CACHE_HOME is unset.
std::string gemm_tuning_cache_path();

// The file's text as choices; nullopt, with the reason in *why, when it is not
// a cache of this format (bad JSON, wrong shape, an index that is not a
// non-negative integer). A damaged file is refused whole rather than half
// trusted.
std::optional<GemmChoices> parse_gemm_choices(std::string_view text, std::string* why = nullptr);
std::string serialise_gemm_choices(const GemmChoices& choices);

// The choices in the file at `path`: none when it does not exist; none, and
// one warning line on stderr when `warn`, when it cannot be read or parsed
// (the choices are then timed again and the file rewritten). Never throws.
GemmChoices load_gemm_choices(const std::string& path, bool warn);

// Records `index` as the choice for `key` in the file at `path` and returns
// it, unless the file already holds a choice for `key` below `candidates`
// (the length of the caller's list; a larger index is stale and replaced):
// that one is returned instead, for the caller to use. Another process
// sharing the cache (another rank of the same launch, timing the same product
// at the same moment) may have decided first, and every process must compute
// with the algorithm that the file keeps, or a later run reading it would not
// repeat this one's bits. The read and the write are one step under an
// exclusive lock ("<path>.lock"); the write goes through a temp file and a
// rename, so that a crash leaves the old file or the new one, never half of
// one. Never throws: *stored is false when the file could not be written (the
// choice then holds for this run only).
int record_gemm_choice(const std::string& path, const std::string& key, int index, int candidates, bool* stored);

}  // namespace anatomy::cuda
