// fuzz_vocab: a WordPiece vocab.txt through WordPieceTokenizer::from_file
// (options from the input's length: lowercase, accents, Chinese characters),
// then texts tokenized with it: a few fixed ones and the input's bytes after
// its first NUL (hostile text: any bytes, invalid UTF-8 included), alone and
// as a pair, truncated and padded, and through the tokenizer.json pipeline
// that TextTokenizer builds from a vocab.txt (offsets, words, windows).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "anatomy/data/text_tokenizer.h"
#include "anatomy/data/wordpiece.h"
#include "fuzz_util.h"

using namespace anatomy;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [vocab, text] = fuzz::split_at_nul(fuzz::as_text(data, size));
  const std::string path = fuzz::scratch_file("vocab.txt", vocab);
  data::WordPieceOptions options;
  options.lowercase = (size & 1) == 0;
  if (size & 2) options.strip_accents = (size & 4) != 0;
  options.tokenize_chinese_chars = (size & 8) == 0;
  std::optional<data::WordPieceTokenizer> tokenizer;
  fuzz::expect_error([&] { tokenizer.emplace(data::WordPieceTokenizer::from_file(path, options)); });
  if (!tokenizer) return 0;
  (void)tokenizer->token_to_id("[UNK]");
  const std::vector<std::string_view> texts = {"Hello, world! Héllo wörld", "unaffable 你好 ##ing [MASK]", text};
  for (std::string_view t : texts) {
    fuzz::expect_error([&] {
      const std::vector<int32_t> ids = tokenizer->tokenize(t);
      for (int32_t id : ids) (void)tokenizer->id_to_token(id);
    });
    fuzz::expect_error([&] { (void)tokenizer->pre_tokenize(t); });
  }
  const data::TextTokenizer text_tokenizer(*tokenizer, path);
  std::vector<data::TextInput> inputs = {{texts[0], std::nullopt}, {text, texts[1]}, {texts[1], text}};
  data::EncodeOptions encode;
  encode.truncate_to = 16;
  for (const data::TextInput& input : inputs) fuzz::expect_error([&] { (void)tokenizer->encode(input, encode); });
  encode.padding = data::Padding::kLongest;
  fuzz::expect_error([&] { (void)text_tokenizer.encode_batch(inputs, encode, 1); });
  // The task calls run the tokenizer.json pipeline built from the vocabulary.
  const std::vector<std::vector<std::string>> words = {{"Hello", std::string(text), "wörld"}};
  fuzz::expect_error([&] { (void)text_tokenizer.encode_words(words, encode, 1); });
  data::OverflowOptions windows;
  windows.max_length = 48;
  windows.stride = 4;
  for (const data::TextInput& input : inputs)
    fuzz::expect_error([&] { (void)text_tokenizer.encode_overflowing(input, windows); });
  return 0;
}
