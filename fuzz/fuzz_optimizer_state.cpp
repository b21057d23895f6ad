// fuzz_optimizer_state: a checkpoint's optimizer.safetensors through
// read_optimizer_states, the reader a resume runs on it, against a run whose
// optimizer holds the states of AdamW over 6 flat parameters plus those of an
// 8-bit optimizer (exp_avg 6 floats, exp_avg_sq 6 floats, q 8 bytes,
// absmax 2 floats); the input's first byte chooses a single process or rank
// 1 of a ZeRO run (whose shard metadata must match). The safetensors
// container itself is fuzz_safetensors' as well.
#include <cstdint>
#include <string>

#include "anatomy/train/checkpoint_files.h"
#include "fuzz_util.h"

using namespace anatomy;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string path = fuzz::scratch_file("optimizer.safetensors", fuzz::as_text(data + 1, size - 1));
  OptimizerFileExpectation expected;
  expected.optimizer = "adamw";
  expected.states = {{"exp_avg", true, {6}}, {"exp_avg_sq", true, {6}}, {"q", false, {8}}, {"absmax", true, {2}}};
  expected.layout = "layout-1";
  expected.flat = true;
  expected.updates = 3;
  if (data[0] & 1) {
    expected.shard = {{"rank", "1"}, {"world_size", "2"}, {"shard_begin", "6"}, {"shard_end", "12"},
                      {"shard_total", "12"}};
    expected.rank = 1;
  }
  fuzz::expect_error([&] { (void)read_optimizer_states(path, expected); });
  return 0;
}
