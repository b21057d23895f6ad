// bert_layout.h: the arrangement of a BERT-style encoder as one family
// spells it. BERT, RoBERTa (and XLM-RoBERTa, CamemBERT), ELECTRA and
// DistilBERT are the same computation — embeddings summed and normalised,
// post-LayerNorm layers of attention and a feed-forward, a first-token head —
// under other parameter names, with small differences this struct lists:
// token types or none, RoBERTa's positions, ELECTRA's embedding projection,
// DistilBERT's attention without output dropout, and the head's shape. Each
// family (model/roberta/, model/electra/, model/distilbert/) fills one in;
// the BERT-style model, its parameters, its saved activations and its
// inference read it.
#pragma once

#include <string>
#include <vector>

#include "anatomy/kernels/backend.h"
#include "anatomy/model/config.h"
#include "anatomy/model/tasks.h"

namespace anatomy {

struct BertLayout {
  std::string model_type;    // config.json's, e.g. "roberta"
  std::string architecture;  // Hugging Face's class, e.g. "RobertaForSequenceClassification"
  // The head (model/tasks.h): the family's layout is sequence classification's;
  // bert_task_layout() derives the others.
  std::string task = kSequenceClassification;
  std::string prefix;        // base_model_prefix and a dot, e.g. "roberta."

  // Embeddings, under `prefix`.
  std::string word = "embeddings.word_embeddings";
  std::string position = "embeddings.position_embeddings";  // empty: no absolute positions (DeBERTa)
  std::string token_type = "embeddings.token_type_embeddings";  // used when type_vocab_size > 0
  std::string embeddings_norm = "embeddings.LayerNorm";
  // ELECTRA: the Linear(embedding_size, hidden_size) after the embeddings,
  // present when the config's embedding_size differs from hidden_size.
  std::string projection = "embeddings_project";
  // nn.Embedding(padding_idx=pad_token_id) for the positions too (RoBERTa):
  // that row starts at zero and gets no gradient.
  bool position_padding_row = false;

  // DeBERTa's disentangled attention (ModelConfig::relative): the relative
  // embeddings and their LayerNorm (norm_rel_ebd), under `prefix`, shared by
  // every layer. They belong to the embeddings' unit.
  bool relative_attention = false;
  // The embeddings' output times the attention mask (DeBERTa's: padding rows 0).
  bool mask_embeddings = false;
  std::string relative_embeddings = "encoder.rel_embeddings";
  std::string relative_norm = "encoder.LayerNorm";

  // Encoder layer l: `prefix` + fmt::format(layer, l) + each name.
  std::string layer = "encoder.layer.{}.";
  std::string query = "attention.self.query", key = "attention.self.key", value = "attention.self.value";
  std::string attention_output = "attention.output.dense";
  std::string attention_norm = "attention.output.LayerNorm";
  std::string intermediate = "intermediate.dense";
  std::string output = "output.dense";
  std::string output_norm = "output.LayerNorm";
  // Dropout on the attention output before its residual (DistilBERT has none).
  bool attention_output_dropout = true;

  // The sequence classification head over the first token:
  //   [dropout] -> dense (H -> H) -> activation -> dropout -> classifier (H -> labels)
  // Full names (not under `prefix` unless they say so). The token
  // classification head has no dense layer (head_dense empty): dropout, then
  // the classifier on every token.
  std::string head_dense = "bert.pooler.dense";
  std::string classifier = "classifier";
  ActivationKind head_activation = ActivationKind::Tanh;
  bool dropout_before_head_dense = false;  // RoBERTa, ELECTRA
  // That first dropout's probability from this config.json key (DeBERTa's
  // pooler_dropout, 0 when absent); empty: the head's dropout (head_dropout()).
  std::string head_dense_dropout_key;
  // The masked-LM head (*ForMaskedLM), over every token:
  //   head_dense (H -> E) -> activation -> lm_norm (LayerNorm over E) -> decoder (E -> vocab)
  // the decoder's weight the word embeddings (tied), its bias `lm_bias`. The
  // activation is the config's hidden_act (BERT; DistilBERT's `activation`)
  // or exact GELU (RoBERTa, ELECTRA: lm_gelu).
  std::string lm_norm;
  std::string lm_bias;
  bool lm_gelu = false;
  // The head's dropout: classifier_dropout (or hidden_dropout_prob when
  // unset), hidden_dropout_prob (DistilBERT's token head), none (the question
  // answering heads but DistilBERT's), or config.json's `qa_dropout` (DistilBERT's, 0.1 by default).
  enum class HeadDropout { Classifier, Hidden, None, QaDropout };
  HeadDropout head_dropout_kind = HeadDropout::Classifier;

  // The head's dropout probability for `config`.
  double head_dropout(const ModelConfig& config) const;
  // The probability of the dropout before the head's dense layer.
  double head_dense_dropout(const ModelConfig& config) const;
  bool has_position_table() const { return !position.empty(); }
  // The classifier's outputs: num_labels, or 2 (an answer's start and end) for question answering.
  int64_t head_outputs(const ModelConfig& config) const;
  bool has_head_dense() const { return !head_dense.empty(); }
  bool masked_lm() const { return task == kMaskedLm; }
  // The first parameter of the head (its ZeRO unit starts there).
  std::string head_first_parameter() const { return (has_head_dense() ? head_dense : classifier) + ".weight"; }

  std::string layer_name(int64_t l, const std::string& part) const;
  // Whether parameter `name` is a LayerNorm's (weight or bias).
  bool is_layer_norm(const std::string& name) const;
  // Whether `name` is an encoder layer's.
  bool in_encoder_layer(const std::string& name) const;
};

// BERT's own layout (BertForSequenceClassification).
const BertLayout& bert_layout();

// The family layout `family` (a sequence classifier's) with the head of
// `task`: its architecture (e.g. "RobertaForTokenClassification") and head
// names. The reference lives as long as the program. Fails for a task the
// BERT-style families have no head for.
const BertLayout& bert_task_layout(const BertLayout& family, const std::string& task);
// The tasks bert_task_layout() serves.
const std::vector<std::string>& bert_tasks();

}  // namespace anatomy
