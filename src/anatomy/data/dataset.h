// dataset.h: pre-tokenized examples held in host memory: the seed's dummy data
// and tensor files (safetensors with input_ids and optional attention_mask,
// token_type_ids and labels), validated against the model before training.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "anatomy/core/dtype.h"
#include "anatomy/model/config.h"
#include "anatomy/model/tasks.h"

namespace anatomy {

struct MaskingOptions;  // data/mlm_data.h

struct Dataset {
  std::string source;                  // names the data in errors
  int64_t size = 0;                    // N examples
  int64_t seq_len = 0;                 // L tokens each
  std::vector<int64_t> input_ids;      // [N, L]
  std::vector<int64_t> token_type_ids; // [N, L] or empty (all zero)
  std::vector<int64_t> attention_mask; // [N, L] or empty (all ones)
  // Labels: int64 [N] (classification), or float32 [N] / [N, C] (regression,
  // multi-label); or int64 [N, L], one per token (token_labels: token
  // classification, -100 for tokens without one); or none.
  DType label_dtype = DType::I64;
  int64_t label_width = 0;             // values per example: 0 = no labels, 1, C, or L
  bool token_labels = false;
  // Question answering: labels_i64 [N, 2], each example's start and end
  // position (safetensors' start_positions and end_positions); a batch holds
  // them as [2, B], the starts then the ends.
  bool span_labels = false;
  // Word-tagged text (data/token_data.h): the word each token belongs to,
  // [N, L] (-1: a special token or padding); empty otherwise.
  std::vector<int64_t> word_ids;
  std::vector<int64_t> labels_i64;
  std::vector<float> labels_f32;
  // Dynamic padding (text data): the rows are right-padded to the longest of
  // the set, and a batch is cut to the longest of its own rows (the mask's
  // ones), as DataCollatorWithPadding pads. seq_len is then the longest any
  // batch can be: the memory plan's worst case.
  bool pad_per_batch = false;
  // Multiple choice: each example is `choices` sequences of seq_len / choices
  // tokens one after another (input_ids [N, choices, tokens] in a file), one
  // label in [0, choices) per example; 0 otherwise.
  int64_t choices = 0;
  // Masked-LM text (data/mlm_data.h): 1 for the tokens masking never picks
  // (the special tokens the tokenizer added), [N, L]; empty: none.
  std::vector<uint8_t> special_tokens_mask;
  // Masked-LM without labels: each batch is masked as it is built
  // (mask_tokens), its labels made then; token_labels is set, labels_i64 empty.
  std::shared_ptr<const MaskingOptions> masking;

  bool has_labels() const { return label_width > 0; }
};

// Multiple choice's dummy data: each example this many sequences (SWAG's endings).
inline constexpr int64_t kDummyChoices = 4;

// The seed's data: ids uniform in [100, 30000), labels randint(0, 1) (all 0),
// a pure function of `seed`.
Dataset make_dummy_dataset(int64_t size, int64_t seq_len, uint64_t seed);

// Dummy data of variable lengths for inference: lengths uniform in
// [min_len, max_len], ids uniform in [100, 30000) up to each length, then
// padding (id 0, attention_mask 0) to max_len; labels 0. A pure function of `seed`.
Dataset make_dummy_varlen_dataset(int64_t size, int64_t min_len, int64_t max_len, uint64_t seed);

// The real length of each example: its attention_mask's leading ones (all L
// without a mask). Errors name the source and the example when the mask is
// not ones followed by zeros (right padding), or an example is empty.
std::vector<int64_t> sequence_lengths(const Dataset& data);

// A safetensors file with input_ids [N, L] and optionally attention_mask,
// token_type_ids ([N, L], integer) and labels (int64 [N]; float32 [N] or
// [N, C]; int64 [N, L]: token labels), or start_positions and end_positions
// (int64 [N] each: question answering).
Dataset load_tensor_dataset(const std::string& path);

// Checks the data against the model: non-empty, sequence length within
// max_position_embeddings, ids within the vocabulary, token types within
// type_vocab_size, mask values 0/1, labels of the shape `task` (model/tasks.h)
// takes and in range for the problem type. Errors name the source, the tensor
// and the first offending example.
void validate_dataset(const Dataset& data, const ModelConfig& config,
                      const std::string& task = kSequenceClassification);

// Rows [begin, end) of `order` gathered into a batch (host memory); with
// pad_per_batch, only the first L' tokens of each row (and of token labels),
// L' the longest row of the batch by its attention_mask.
struct HostBatch {
  int64_t batch = 0, seq_len = 0;
  bool token_labels = false;  // labels_i64 [batch, seq_len]
  bool span_labels = false;   // labels_i64 [2, batch]: start positions, then end positions
  std::vector<uint8_t> special_tokens_mask;  // [batch, seq_len] when the data has one
  int64_t choices = 0;  // multiple choice: the tokens are [batch, choices, seq_len / choices]
  std::vector<int64_t> input_ids, token_type_ids, attention_mask, labels_i64;
  std::vector<float> labels_f32;
};
HostBatch gather_batch(const Dataset& data, const std::vector<int64_t>& order, int64_t begin, int64_t end);

// A seeded permutation of [0, n) for epoch `epoch` (or the identity when !shuffle).
std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch);

// Data parallelism, as torch's DistributedSampler (drop_last=False): the
// epoch's order is padded to a multiple of `world` with its own first entries,
// and rank r takes entries r, r + world, r + 2·world, ... So batch k of every
// rank, each of b examples, together hold batch k of one process with batch
// world·b. `world` 1 returns `order` itself.
std::vector<int64_t> shard_order(const std::vector<int64_t>& order, int rank, int world);
// Examples per rank and epoch: ceil(n / world).
inline int64_t shard_size(int64_t n, int world) { return (n + world - 1) / world; }

// Hugging Face's LengthGroupedSampler (get_length_grouped_indices) over the
// permutation `order` (its torch.randperm): megabatches of
// min(n / (4 batch), 50) (at least 1) batches, each sorted by length, longest
// first (stable), then the longest megabatch's first example swapped to the
// front, so the first batch holds the longest example.
std::vector<int64_t> length_grouped_order(const std::vector<int64_t>& order, const std::vector<int64_t>& lengths,
                                          int64_t batch_size);

}  // namespace anatomy
