// text_tokenizer.cpp: see text_tokenizer.h.
#include "anatomy/data/text_tokenizer.h"

#include "anatomy/data/tokenizer/tokenizer.h"

namespace anatomy::data {

TextTokenizer TextTokenizer::load(const std::string& tokenizer_json, const std::string& vocab_file,
                                  const WordPieceOptions& options) {
  TextTokenizer t;
  if (!tokenizer_json.empty()) {
    t.json_ = std::make_shared<const tok::Tokenizer>(tok::Tokenizer::from_file(tokenizer_json));
    t.file_ = tokenizer_json;
  } else {
    t.word_piece_ = std::make_shared<const WordPieceTokenizer>(WordPieceTokenizer::from_file(vocab_file, options));
    t.file_ = vocab_file;
  }
  return t;
}

TextTokenizer::TextTokenizer(WordPieceTokenizer word_piece, std::string file)
    : word_piece_(std::make_shared<const WordPieceTokenizer>(std::move(word_piece))), file_(std::move(file)) {}

std::vector<Encoding> TextTokenizer::encode_batch(std::span<const TextInput> inputs, const EncodeOptions& options,
                                                  int threads) const {
  if (json_) return json_->encode_batch(inputs, options, /*add_special_tokens=*/true, threads);
  return word_piece_->encode_batch(inputs, options, threads);
}

size_t TextTokenizer::vocab_size() const { return json_ ? json_->vocab_size() : word_piece_->vocab_size(); }

int32_t TextTokenizer::pad_id() const { return json_ ? json_->pad_id() : word_piece_->pad_id(); }

size_t TextTokenizer::special_tokens(bool pair) const {
  if (json_) return json_->added_special_tokens(pair);
  return pair ? 3 : 2;
}

}  // namespace anatomy::data
