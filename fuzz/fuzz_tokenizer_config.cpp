// fuzz_tokenizer_config: a model directory's tokenizer_config.json through
// read_tokenizer_settings (beside a fixed vocab.txt), then what a run does
// with the settings: the tokenizer they describe, its mask token
// (mask_token_id) and a few texts encoded, and the settings saved
// (save_tokenizer) and read back, which must succeed.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "anatomy/data/mlm_data.h"
#include "anatomy/data/text_dataset.h"
#include "fuzz_util.h"

using namespace anatomy;

namespace {

const std::string& model_dir() {
  static const std::string dir = [] {
    const std::string d = fuzz::fresh_dir("model");
    fuzz::write_file(d + "/vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\né\n##s\nh\n##e\n##llo\n");
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = model_dir();
  fuzz::write_file(dir + "/tokenizer_config.json", fuzz::as_text(data, size));
  std::optional<TokenizerSettings> settings;
  fuzz::expect_error([&] { settings = read_tokenizer_settings(dir); });
  if (!settings) return 0;
  fuzz::expect_error([&] {
    const data::TextTokenizer tokenizer = load_tokenizer(*settings);
    (void)mask_token_id(tokenizer, settings->config);
    const std::vector<data::TextInput> inputs = {{"Héllo, WORLD hellos", std::nullopt}, {"é", "Hello"}};
    data::EncodeOptions encode;
    encode.truncate_to = 8;
    encode.padding = data::Padding::kLongest;
    (void)tokenizer.encode_batch(inputs, encode, 1);
  });
  // What a checkpoint saves, a resume reads: an Error here is a crash.
  const std::string saved = fuzz::fresh_dir("saved");
  save_tokenizer(*settings, saved);
  const std::optional<TokenizerSettings> again = read_tokenizer_settings(saved);
  if (!again || again->options.lowercase != settings->options.lowercase ||
      again->options.strip_accents != settings->options.strip_accents ||
      again->model_max_length != settings->model_max_length) {
    std::fprintf(stderr, "tokenizer_config.json: the saved settings read back differently\n");
    std::abort();
  }
  return 0;
}
