// token_data.h: word-tagged sentences for token classification (named-entity
// recognition), read and prepared as Hugging Face's run_ner.py prepares them.
//
// Files: JSON lines (.jsonl or .json, one object a line) with a list of words
// and a list of their tags — {"tokens": ["EU", "rejects"], "tags": ["B-ORG",
// "O"]}, field names from --text-column / --label-column, "ner_tags" when the
// rows have no "tags" —, or CoNLL (.conll): one word a line, its tag the
// line's last white-space separated column (CoNLL-2003's four columns
// included), a blank line between sentences, -DOCSTART- lines skipped. Tags
// are strings (IOB2 names) or integers (class ids as written).
//
// Preparation (run_ner's tokenize_and_align_labels): the words of a sentence
// are tokenized as pre-split words (is_split_into_words), truncated to
// max_seq_length; the first piece of each word carries the word's label, the
// other pieces -100 (or, with label_all_tokens, the word's label with B-
// made I- where the tag set has that I- tag), special tokens -100.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "anatomy/data/dataset.h"
#include "anatomy/data/text_table.h"
#include "anatomy/data/text_tokenizer.h"

namespace anatomy {

struct TaggedSentence {
  std::vector<std::string> words;
  std::vector<std::string> tags;  // empty when read without tags (prediction)
  int64_t line = 0;               // 1-based line where the sentence starts
};

struct TaggedCorpus {
  std::string source;
  std::vector<TaggedSentence> sentences;
  int64_t empty_sentences_skipped = 0;  // JSON lines with no words
  int64_t blank_lines_skipped = 0;      // JSON lines files
};

// Whether `path` is a CoNLL file (.conll).
bool is_conll_file(const std::string& path);

// Reads a .jsonl/.json or .conll file. `words_field` and `tags_field` name the
// JSON fields (tags_field empty: no tags are read). Every problem is one error
// naming the file and line: a word list of other than strings, tags of a
// different count than the words, a CoNLL line without a tag, bytes that are
// not UTF-8, a file without sentences.
TaggedCorpus read_tagged_corpus(const std::string& path, const std::string& words_field,
                                const std::string& tags_field);

// The tag set of a training corpus: integer tags (all of them) are ids as
// written (0..max); otherwise the sorted distinct names (run_ner's get_label_list).
LabelVocabulary tag_vocabulary(const TaggedCorpus& training);

struct TokenDataOptions {
  int64_t max_seq_length = 128;  // tokens, the special ones included
  bool label_all_tokens = false; // label every piece of a word, not only its first
  // Byte-level BPE: a space before every word (run_ner loads RoBERTa's, GPT-2's
  // and DeBERTa's tokenizers with add_prefix_space=True); unset: the file's.
  std::optional<bool> add_prefix_space;
  int threads = 0;               // encoding threads (0: one per hardware thread)
};

// The sentences tokenized into examples: input_ids, token_type_ids,
// attention_mask [N, L] right-padded to the longest (pad_per_batch set),
// word_ids [N, L] (-1: special or padding), and, with `tags`, token labels
// [N, L] as above. A tag the vocabulary lacks is an Error naming the file and line.
Dataset tokenize_tagged_corpus(const TaggedCorpus& corpus, const data::TextTokenizer& tokenizer,
                               const LabelVocabulary* tags, const TokenDataOptions& options);

// For each example of `data` (made by tokenize_tagged_corpus), the label
// ids of its words as the model's per-token ids `token_ids` [N, L] say them:
// the id at each word's first piece; -1 for a word the truncation dropped.
std::vector<std::vector<int64_t>> word_level(const Dataset& data, const std::vector<int64_t>& token_ids,
                                             const std::vector<int64_t>& words_per_example);

}  // namespace anatomy
