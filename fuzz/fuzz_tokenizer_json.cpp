// fuzz_tokenizer_json: a tokenizer.json through tok::Tokenizer::from_file
// (normalizers, pre-tokenizers and their regular expressions, the model:
// WordPiece, BPE with its merges, Unigram, WordLevel; post-processors, added
// tokens, padding), then texts encoded with it: a few fixed ones and the
// input's bytes after its first NUL (hostile text: any bytes, invalid UTF-8
// included), alone, as pairs, as pre-split words and as overlapping windows,
// with and without a prefix space.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "anatomy/data/tokenizer/tokenizer.h"
#include "fuzz_util.h"

using namespace anatomy;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [json, text] = fuzz::split_at_nul(fuzz::as_text(data, size));
  const std::string path = fuzz::scratch_file("tokenizer.json", json);
  std::optional<data::tok::Tokenizer> tokenizer;
  fuzz::expect_error([&] { tokenizer.emplace(data::tok::Tokenizer::from_file(path)); });
  if (!tokenizer) return 0;
  const size_t vocab = tokenizer->vocab_size();
  for (int32_t id : {0, 1, static_cast<int32_t>(vocab) - 1, static_cast<int32_t>(vocab), -1})
    (void)tokenizer->token_to_id(tokenizer->id_to_token(id));
  (void)tokenizer->added_special_tokens(false);
  (void)tokenizer->added_special_tokens(true);

  const std::string_view fixed[] = {"Hello, world! Héllo wörld  ", " unaffable 你好 \t[MASK] <s> ▁x é"};
  const std::vector<data::TextInput> inputs = {
      {fixed[0], std::nullopt}, {text, std::nullopt}, {fixed[1], text}, {text, fixed[0]}};
  const std::vector<std::vector<std::string>> words = {{"Hello", std::string(text), "wörld", ""},
                                                       {std::string(fixed[1])}};
  for (const std::optional<bool> prefix : {std::optional<bool>(), std::optional<bool>(true)}) {
    data::EncodeOptions encode;
    encode.add_prefix_space = prefix;
    fuzz::expect_error([&] { (void)tokenizer->encode(inputs[1], encode, false); });
    encode.truncate_to = 12;
    // Each input alone (one that fails does not hide the others), then the batch padded.
    for (const data::TextInput& input : inputs) fuzz::expect_error([&] { (void)tokenizer->encode(input, encode); });
    encode.padding = data::Padding::kLongest;
    fuzz::expect_error([&] { (void)tokenizer->encode_batch(inputs, encode, true, 1); });
    for (const std::vector<std::string>& example : words)
      fuzz::expect_error([&] { (void)tokenizer->encode_words(example, encode); });
    fuzz::expect_error([&] { (void)tokenizer->encode_words_batch(words, encode, 1); });
    data::OverflowOptions windows;
    windows.max_length = 48;
    windows.stride = 3;
    windows.add_prefix_space = prefix;
    for (const data::TextInput& input : inputs)
      fuzz::expect_error([&] { (void)tokenizer->encode_overflowing(input, windows); });
    windows.padding = data::Padding::kMaxLength;
    fuzz::expect_error([&] { (void)tokenizer->encode_overflowing_batch(inputs, windows, 1); });
  }
  return 0;
}
