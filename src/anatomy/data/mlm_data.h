// mlm_data.h: masked-language-model data as Hugging Face's run_mlm prepares
// it: text lines tokenized and concatenated into blocks of max_seq_length
// tokens (group_texts), or one example per non-blank line (line_by_line);
// and DataCollatorForLanguageModeling's masking, applied to each batch as the
// loader builds it, so that every epoch masks anew.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "anatomy/data/dataset.h"
#include "anatomy/data/text_tokenizer.h"

namespace anatomy {

// DataCollatorForLanguageModeling(mlm_probability, mask_replace_prob=0.8,
// random_replace_prob=0.1).
struct MaskingOptions {
  double probability = 0.15;  // --mlm-probability: the chance a token is chosen
  int64_t mask_token_id = -1;  // what 80% of the chosen tokens become
  int64_t random_tokens = 0;   // 10% become an id drawn uniformly from [0, random_tokens) (len(tokenizer))
  // Never chosen, besides padding (attention_mask 0) and a batch's
  // special_tokens_mask: these ids (for tensor data, which has no mask).
  std::vector<int64_t> special_ids;
};

// The collator's masking of `batch` (its input_ids changed, its labels made
// [batch, seq_len]: a chosen token's original id, -100 elsewhere), drawn from
// the counter-based generator with `seed` and `stream`: a pure function of
// them and the batch, so a resumed or sharded run masks as the first did.
void mask_tokens(HostBatch& batch, const MaskingOptions& options, uint64_t seed, uint64_t stream);

// The generator stream of batch `index` of a run (rank `rank`), and of
// evaluation batch `index`: distinct from each other and from the others'.
uint64_t masking_stream(int64_t index, int rank);
uint64_t eval_masking_stream(int64_t index);

struct MlmTextOptions {
  int64_t max_seq_length = 128;
  bool line_by_line = false;  // --line-by-line: one example per non-blank line, truncated
  std::string text_column = "text";  // for .jsonl/.json/.csv/.tsv files
  // add_prefix_space for byte-level BPE (unset: the tokenizer file's)
  std::optional<bool> add_prefix_space;
};

// The lines of a text file (.txt and anything not a table: one text per line,
// as datasets' "text" loader reads it, blank lines included), or the text
// column of a .jsonl/.json/.csv/.tsv file. Errors name the file.
std::vector<std::string> read_mlm_texts(const std::string& path, const std::string& text_column);

// run_mlm's preparation of `texts` (`source` names them in errors and notes):
// with line_by_line, each non-blank line (one that is not only whitespace)
// tokenized with truncation to max_seq_length, the set right-padded to its
// longest and each batch cut to its own longest (DataCollatorForLanguageModeling
// pads so); otherwise every line tokenized whole (special tokens added) and,
// in groups of 1000 lines as datasets' map(batched=True) hands them to
// group_texts, concatenated and cut into blocks of max_seq_length (each
// group's remainder dropped). The special tokens the tokenizer added are in
// special_tokens_mask; no labels (masking makes them). `notes` gets what was
// dropped.
Dataset prepare_mlm_dataset(const std::vector<std::string>& texts, const std::string& source,
                            const data::TextTokenizer& tokenizer, const MlmTextOptions& options,
                            std::vector<std::string>* notes);

// The tokenizer's mask token id: tokenizer_config.json's mask_token (a string
// or {"content": ...}), else [MASK] or <mask>; -1 when it has none.
int64_t mask_token_id(const data::TextTokenizer& tokenizer, const nlohmann::json& tokenizer_config);

}  // namespace anatomy
