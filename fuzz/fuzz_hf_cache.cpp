// fuzz_hf_cache: the Hugging Face hub cache's refs/main (the commit a branch
// was at) through find_cached_model, in a cache of one model with one
// snapshot; and the input as a model id (is_hub_model_id), which the command
// line takes from the user.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "anatomy/io/hf_cache.h"
#include "fuzz_util.h"

using namespace anatomy;

namespace {

const std::string& repo_dir() {
  static const std::string dir = [] {
    const std::string cache = fuzz::fresh_dir("hub");
    ::setenv("HF_HUB_CACHE", cache.c_str(), 1);
    const std::string repo = cache + "/models--org--name";
    const std::string snapshot = repo + "/snapshots/0123456789abcdef0123456789abcdef01234567";
    std::filesystem::create_directories(snapshot);
    std::filesystem::create_directories(repo + "/refs");
    fuzz::write_file(snapshot + "/config.json", "{}");
    return repo;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::as_text(data, size));
  fuzz::write_file(repo_dir() + "/refs/main", text);
  fuzz::expect_error([&] { (void)io::find_cached_model("org/name"); });
  fuzz::expect_error([&] { (void)io::find_cached_model("org/name", text); });
  if (io::is_hub_model_id(text)) fuzz::expect_error([&] { (void)io::find_cached_model(text); });
  return 0;
}
