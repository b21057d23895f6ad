// training_data.h: the data of a run as its arguments ask for it: the seed's
// dummy data, pre-tokenized safetensors, or text (.jsonl, .json, .csv, .tsv,
// by extension) tokenized with the WordPiece tokenizer, as run_glue does. For
// text, the model's configuration is made to fit the data: the labels
// (num_labels, id2label, problem_type) come from the training file, and a
// preset's vocab_size from the vocabulary. `train`, `profile` and `estimate`
// load their data here, so they see the same examples and shapes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "anatomy/data/dataset.h"
#include "anatomy/data/text_dataset.h"
#include "anatomy/data/text_table.h"
#include "anatomy/data/qa_data.h"
#include "anatomy/data/token_data.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/arguments.h"

namespace anatomy {

struct TrainingData {
  Dataset train;
  std::optional<Dataset> eval;                 // --validation-file
  std::optional<TokenizerSettings> tokenizer;  // saved beside the model: the text's, or the model directory's
  std::vector<std::string> notes;              // for the user: blank lines skipped, the vocabulary's size, ...
};

// Reads, tokenizes and validates the data of `args` against `source`'s
// configuration, which it adjusts for text data (see above). Every error names
// the file (and line, for text) or the flag.
TrainingData load_training_data(const TrainingArguments& args, ModelSource& source);

// The tokenizer of a run on text: `vocab` (--vocab) or the model directory's
// vocab.txt, with the directory's tokenizer_config.json settings, and
// `do_lower_case` ("true", "false" or empty) over them. `needed_by` names what
// needs it in the error when there is no vocabulary.
TokenizerSettings resolve_tokenizer(const std::string& vocab, const std::string& model_dir,
                                    const std::string& do_lower_case, const std::string& needed_by);

// Token classification's fields: --text-column and --label-column, their
// defaults ("text", "label") read as "tokens" and "tags".
std::string token_words_column(const std::string& text_column);
// run_ner's add_prefix_space=True for the model types it loads so (roberta, gpt2, bloom, deberta); else unset.
std::optional<bool> token_prefix_space(const ModelConfig& config);
std::string token_tags_column(const std::string& label_column);

// Word-tagged text (.jsonl/.json/.conll) read and tokenized for token
// classification (data/token_data.h); `tags` null: without tags
// (prediction). Skipped lines and sentences go to `notes` (may be null); the
// corpus read, to `corpus` (may be null).
Dataset read_token_data(const std::string& path, const std::string& text_column, const std::string& label_column,
                        const data::TextTokenizer& tokenizer, const LabelVocabulary* tags,
                        const TokenDataOptions& options, std::vector<std::string>* notes, TaggedCorpus* corpus);

// Each of the model's num_labels ids' name: id2label's, or Hugging Face's LABEL_i.
std::vector<std::string> model_label_names(const ModelConfig& config);

// A trained model's labels as a vocabulary, to read labelled text for
// evaluation: the id2label names (and the ids themselves, written as integers,
// when the names are the default LABEL_i), or regression.
LabelVocabulary model_label_vocabulary(const ModelConfig& config);

}  // namespace anatomy
