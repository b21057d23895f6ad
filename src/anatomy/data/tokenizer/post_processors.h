// post_processors.h: the post-processors of tokenizer.json, which add the
// special tokens around the encoded texts and set their type ids:
// TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel (offset
// trimming only) and Sequence, as Hugging Face tokenizers' processors/ do.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "anatomy/data/tokenizer/normalized_text.h"

namespace anatomy::data::tok {

// The tokens [start, end) of a sequence that came from one text of the input (an entry of the library's
// Encoding::sequence_ranges, whose ids are the index of the text, 0 or 1).
struct SequenceRange {
  bool set = false;
  uint32_t start = 0, end = 0;
};

// The tokens of one text (or, after processing, of the whole input).
struct TokenSequence {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;
  std::vector<Span> offsets;        // characters of the text the token came from; (0, 0) for added special tokens
  std::vector<std::string> values;  // the tokens' strings, filled only when needs_token_text()
  std::vector<uint8_t> special;     // 1 for the tokens a post-processor added
  std::array<SequenceRange, 2> ranges;  // which tokens come from text 0 and from text 1
  // A window after the first of a text cut into overflowing windows: TemplateProcessing leaves the type ids of
  // such an encoding as they were encoded (the text's index), whatever the template says, as the library does.
  bool overflow = false;

  size_t size() const { return ids.size(); }
  // Appends `other`, its ranges moved past this sequence's tokens (replacing those of the same text).
  void append(const TokenSequence& other);
  // Marks every token as text `id`'s (set_sequence_id; `id` 0 or 1).
  void set_sequence_id(int32_t id);
  // The sequence id of each of `length` tokens (padding after the last token included), as the library's
  // get_sequence_ids: -1 outside the ranges; no ranges at all count as one range of text 0 over everything, and
  // so does a missing range of text 0 when text 1 has one.
  std::vector<int32_t> sequence_ids(size_t length) const;
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
