// choice_data.h: multiple-choice data as Hugging Face's run_swag prepares it:
// SWAG-style JSON lines, each a context (`sent1`), the start of the
// continuation (`sent2`), its candidate endings (`ending0`, `ending1`, ...)
// and the right one's index (`label`); each choice the pair (sent1,
// sent2 + " " + ending_i), truncated (longest_first) to max_seq_length.
#pragma once

#include <string>

#include "anatomy/data/dataset.h"
#include "anatomy/data/text_tokenizer.h"

namespace anatomy {

struct ChoiceDataOptions {
  int64_t max_seq_length = 128;
  std::optional<bool> add_prefix_space;  // byte-level BPE (unset: the tokenizer file's)
};

// Reads `path` (.jsonl or .json, an object a line) and tokenizes it: input_ids
// (and token_type_ids, attention_mask) [N, choices, L], L the longest choice
// of the file (its rows right-padded with the tokenizer's pad id), labels
// int64 [N]. Every example must have as many endings as the first
// (ending0..ending{C-1}, C >= 2). With `require_labels` false an example may
// lack `label` (prediction; its label is 0). Errors name the file and line:
// not a JSON object, a missing or non-string field, a label that is not an
// integer in [0, C).
Dataset read_choice_data(const std::string& path, const data::TextTokenizer& tokenizer,
                         const ChoiceDataOptions& options, bool require_labels = true);

}  // namespace anatomy
