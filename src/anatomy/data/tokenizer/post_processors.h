// post_processors.h: the post-processors of tokenizer.json, which add the
// special tokens around the encoded texts and set their type ids:
// TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel (offset
// trimming only) and Sequence, as Hugging Face tokenizers' processors/ do.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "anatomy/data/tokenizer/normalized_text.h"

namespace anatomy::data::tok {

// The tokens of one text (or, after processing, of the whole input).
struct TokenSequence {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;
  std::vector<Span> offsets;        // characters of the text the token came from; (0, 0) for added special tokens
  std::vector<std::string> values;  // the tokens' strings, filled only when needs_token_text()
  std::vector<uint8_t> special;     // 1 for the tokens a post-processor added

  size_t size() const { return ids.size(); }
  void append(const TokenSequence& other);
};

class PostProcessor {
 public:
  virtual ~PostProcessor();
  // How many tokens it adds to one text, or to a pair.
  virtual size_t added_tokens(bool pair) const = 0;
  // Changes the sequences (one, or two for a pair) in place, as process_encodings.
  virtual void process(std::vector<TokenSequence>& sequences, bool add_special_tokens) const = 0;
  // Whether it reads TokenSequence::values (offset trimming does).
  virtual bool needs_token_text() const { return false; }
};

// The post-processor of a tokenizer.json's "post_processor" value (null: none).
std::unique_ptr<PostProcessor> post_processor_from_json(const nlohmann::json& value, const std::string& where);

// The library's process(): type ids 0 and 1, the processor (if any), then one sequence.
TokenSequence post_process(const PostProcessor* processor, std::vector<TokenSequence> sequences,
                           bool add_special_tokens);

}  // namespace anatomy::data::tok
