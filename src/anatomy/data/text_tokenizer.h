// text_tokenizer.h: the tokenizer a run on text uses: a tokenizer.json (any
// model the `tokenizers` library writes; data/tokenizer/) or a WordPiece
// vocab.txt (wordpiece.h), behind one interface, so the data code does not
// care which one a model directory carries.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "anatomy/data/wordpiece.h"

namespace anatomy::data {

namespace tok {
class Tokenizer;
}

class TextTokenizer {
 public:
  // Reads `tokenizer_json` when it is not empty, else `vocab_file` with `options`.
  static TextTokenizer load(const std::string& tokenizer_json, const std::string& vocab_file,
                            const WordPieceOptions& options);
  // A WordPiece tokenizer already read (`file` names it).
  TextTokenizer(WordPieceTokenizer word_piece, std::string file = "vocab.txt");  // NOLINT: converts on purpose

  // Every input, [CLS]/[SEP] (or the file's special tokens) added, truncated
  // and padded as `options` say; errors name the input's index.
  TextTokenizer() = default;
  std::vector<Encoding> encode_batch(std::span<const TextInput> inputs, const EncodeOptions& options,
                                     int threads = 0) const;
  size_t vocab_size() const;
  int32_t pad_id() const;  // -1 when the tokenizer has no pad token
  // The special tokens added to one text, or to a pair.
  size_t special_tokens(bool pair) const;
  // The file it was read from (tokenizer.json or vocab.txt).
  const std::string& file() const { return file_; }

 private:
  std::shared_ptr<const WordPieceTokenizer> word_piece_;
  std::shared_ptr<const tok::Tokenizer> json_;
  std::string file_;
};

}  // namespace anatomy::data
