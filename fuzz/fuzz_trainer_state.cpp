// fuzz_trainer_state: a checkpoint's trainer_state.json (read_trainer_state)
// or its manifest checkpoint_files.json (verify_checkpoint_manifest), the
// input's first byte choosing (even: trainer_state.json; odd: the manifest,
// in a checkpoint directory holding config.json "{}\n" and a 16-byte
// model.safetensors of bytes 0..15). A state that reads is written back
// (trainer_state_json) and must read again to the same state.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "anatomy/train/checkpoint_files.h"
#include "fuzz_util.h"

using namespace anatomy;

namespace {

const std::string& checkpoint_dir() {
  static const std::string dir = [] {
    const std::string d = fuzz::fresh_dir("checkpoint-10");
    fuzz::write_file(d + "/config.json", "{}\n");
    std::string weights;
    for (char c = 0; c < 16; ++c) weights += c;
    fuzz::write_file(d + "/model.safetensors", weights);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view file = fuzz::as_text(data + 1, size - 1);
  const std::string& dir = checkpoint_dir();
  if (data[0] & 1) {
    fuzz::write_file(dir + "/" + kCheckpointManifestFile, file);
    fuzz::expect_error([&] { verify_checkpoint_manifest(dir, [](const std::string&) { return true; }); });
    fuzz::expect_error([&] { verify_checkpoint_manifest(dir, [](const std::string& name) { return name.size() % 2; }); });
    return 0;
  }
  fuzz::write_file(dir + "/" + kTrainerStateFile, file);
  std::optional<TrainerState> state;
  fuzz::expect_error([&] { state = read_trainer_state(dir); });
  if (!state) return 0;
  // What save_checkpoint writes, a resume reads: an Error here is a crash.
  const std::string saved = trainer_state_json(*state).dump(2) + "\n";
  fuzz::write_file(dir + "/" + kTrainerStateFile, saved);
  const std::string again = trainer_state_json(read_trainer_state(dir)).dump(2) + "\n";
  if (again != saved) {
    std::fprintf(stderr, "trainer_state.json does not round-trip:\n%s\n%s\n", saved.c_str(), again.c_str());
    std::abort();
  }
  return 0;
}
