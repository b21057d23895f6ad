// bert_parameters.h: a BERT-style model's parameters (its family's Hugging
// Face names and shapes from the layout, in the flat layout's order), named
// handles into a ParameterSet of them, and their ZeRO units.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "anatomy/model/bert/bert_layout.h"
#include "anatomy/model/config.h"
#include "anatomy/model/parameters.h"

namespace anatomy {

std::vector<ParamSpec> bert_parameter_specs(const ModelConfig& config, const BertLayout& layout = bert_layout());

// Named handles into a ParameterSet (weights or their gradients), so the model
// code reads `w.layers[3].query_w` instead of an index.
struct EncoderLayerTensors {
  Tensor query_w, query_b, key_w, key_b, value_w, value_b;
  Tensor attn_out_w, attn_out_b, attn_ln_w, attn_ln_b;
  Tensor inter_w, inter_b, out_w, out_b, out_ln_w, out_ln_b;
  // Query, key and value as one [3H, H] weight and one [3H] bias, when each
  // three lie one after another (bert_parameter_specs lays them out so, and
  // no alignment padding falls between them when H is a multiple of 64);
  // undefined otherwise.
  Tensor qkv_w, qkv_b;
};

struct BertTensors {
  Tensor word, position, token_type, emb_ln_w, emb_ln_b;  // token_type undefined without token types
  Tensor projection_w, projection_b;                      // ELECTRA's embeddings projection, or undefined
  // DeBERTa's relative embeddings and their LayerNorm (unit 0), or undefined.
  Tensor rel_embeddings, rel_norm_w, rel_norm_b;
  std::vector<EncoderLayerTensors> layers;
  // The head: its dense layer (BERT's pooler, RoBERTa's classifier.dense,
  // DistilBERT's pre_classifier; undefined for a head without one) and the classifier.
  Tensor head_dense_w, head_dense_b, classifier_w, classifier_b;
  // The masked-LM head: its LayerNorm and the decoder's bias (the decoder's
  // weight is `word`); undefined in the other heads, classifier_w/_b undefined in it.
  Tensor lm_norm_w, lm_norm_b, lm_bias;

  static BertTensors bind(const ParameterSet& set, const ModelConfig& config, const BertLayout& layout = bert_layout());
  // Binds the tensors of one unit (see bert_parameter_units) to what `get`
  // returns for each Hugging Face name (an undefined tensor unbinds).
  void bind_unit(int64_t unit, const ModelConfig& config, const BertLayout& layout,
                 const std::function<Tensor(const std::string&)>& get);
};

// Whether the model of `config` has ELECTRA's embeddings projection.
bool has_embeddings_projection(const ModelConfig& config);

// The units: the embeddings (unit 0), encoder layer l (unit 1 + l), the
// head (its dense layer and the classifier: unit L + 1).
std::vector<ParameterUnit> bert_parameter_units(const ParameterSet& set, const ModelConfig& config,
                                                const BertLayout& layout = bert_layout());

}  // namespace anatomy
