// config.h: a model's configuration, read from and written to Hugging Face's
// config.json (the family's parser reads its own field names: model/registry.h),
// and the built-in presets used when no checkpoint is given.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anatomy {

enum class Activation { Gelu, GeluNew, Relu };
enum class ProblemType { Unset, Regression, SingleLabel, MultiLabel };
// How position ids are made from a batch: 0, 1, 2, ... in every sequence
// (BERT, ELECTRA, DistilBERT), or RoBERTa's: padding tokens get position
// pad_token_id, the others pad_token_id + 1 + their index among the sequence's
// non-padding tokens (fairseq's make_positions).
enum class PositionIds { Sequential, PastPadding };

// The fields every encoder family has, under BERT's names; a family's parser
// maps its own config.json keys onto them.
// DeBERTa's relative positions (model/deberta/): the relative embeddings'
// 2·span rows, the distance i − j of query i and key j bucketed as
// make_log_bucket_position does (buckets > 0; the distance itself otherwise)
// and clamped to [0, 2·span) past span; which disentangled terms the
// attention has; whether the table is LayerNorm'd (norm_rel_ebd).
struct RelativePositions {
  int64_t span = 0;          // 0: no relative attention
  int64_t buckets = 0;       // position_buckets (0: none)
  int64_t max_position = 0;  // max_relative_positions (max_position_embeddings when unset)
  bool c2p = false, p2c = false;
  bool layer_norm = false;
  bool enabled() const { return span > 0; }
  int64_t rows() const { return 2 * span; }
  // The index of distance d (query − key) into the table.
  int64_t index(int64_t d) const;
};

struct ModelConfig {
  std::string model_type = "bert";  // config.json's model_type: the family (model/registry.h)
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  Activation hidden_act = Activation::Gelu;
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  std::optional<double> classifier_dropout;  // null: use hidden_dropout_prob
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;  // 0: no token type table (DistilBERT); token_type_ids are not read
  // ELECTRA: the embeddings' width, projected to hidden_size before the
  // encoder when it differs (0: hidden_size).
  int64_t embedding_size = 0;
  PositionIds position_ids = PositionIds::Sequential;
  RelativePositions relative;  // DeBERTa's; disabled elsewhere
  double initializer_range = 0.02;
  double layer_norm_eps = 1e-12;
  int64_t pad_token_id = 0;
  int64_t num_labels = 2;
  ProblemType problem_type = ProblemType::Unset;
  std::map<int64_t, std::string> id2label;  // empty: LABEL_i
  // Keys of config.json that the engine does not interpret, kept so a saved
  // config round-trips what it was given.
  nlohmann::json extra = nlohmann::json::object();

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t embedding_width() const { return embedding_size > 0 ? embedding_size : hidden_size; }
  // The longest sequence the position table serves (RoBERTa's positions start past the padding id).
  int64_t max_sequence_length() const {
    return position_ids == PositionIds::PastPadding ? max_position_embeddings - pad_token_id - 1
                                                    : max_position_embeddings;
  }
  double classifier_dropout_prob() const { return classifier_dropout.value_or(hidden_dropout_prob); }
};

// Parses config.json text; `source` names the file in errors. Its model_type
// (absent: "bert") chooses the family; an unknown one is an error naming the supported.
ModelConfig parse_model_config(const std::string& text, const std::string& source);
ModelConfig load_model_config(const std::string& path);
nlohmann::json model_config_to_json(const ModelConfig& config);

// Checks internal consistency (positive sizes, heads dividing hidden size, ...);
// every family's parser calls it.
void validate_model_config(const ModelConfig& config, const std::string& source);

// Built-in sizes of every family (model_preset_names()), randomly initialised.
std::optional<ModelConfig> model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// "max_position_embeddings (512)", or for RoBERTa's positions "max_position_embeddings
// 514 less pad_token_id + 1 (512)": what bounds a sequence's length, for errors.
std::string max_sequence_length_text(const ModelConfig& config);

std::string activation_name(Activation a);
std::string problem_type_name(ProblemType p);

// Training FLOPs per sequence of `seq_len` tokens, matrix products of the
// encoder only (forward 1x, backward 2x), as BASELINES.md counts them for MFU:
// 6 * layers * (4 H^2 + 2 H I) * L  +  3 * layers * 4 * L^2 * H.
double training_flops_per_sequence(const ModelConfig& config, int64_t seq_len);

}  // namespace anatomy
