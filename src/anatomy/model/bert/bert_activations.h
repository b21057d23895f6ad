// bert_activations.h: what each layer of a BERT-style model saves for its backward pass,
// declared in one place. BertForSequenceClassification allocates exactly
// these tensors during a training forward pass, the memory plan reads the
// same list (it runs the same model on the meta backend), and gradient
// checkpointing is a policy over it.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "anatomy/model/activations.h"
#include "anatomy/model/bert/bert_layout.h"
#include "anatomy/model/config.h"

namespace anatomy {

enum class LayerKind { Embeddings, EncoderLayer, Head };

// Selective gradient checkpointing: what an encoder layer recomputes in
// backward (attention's internals and the GELU input: one batched product for
// query/key/value, the attention forward, the intermediate product) and what it
// keeps (everything else: the LayerNorms' inputs and statistics, h1, out).
const std::set<std::string>& selective_recomputed();

// The tensors a layer of `kind` saves for a batch of B sequences of length L.
// `rows` (encoder layers): the tokens of each sequence the layer computes
// after attention, L (0 means L too), or 1 for a last layer of which only the
// first token's output is read (BertForSequenceClassification: the pooler's
// input). With 1 the layer computes the query and the attention of the
// first token only (keys and values of all L tokens): it saves q_first and
// kv instead of qkv, the first query's probabilities as attn_saved.
// `layout`: the family's (the embeddings' projection, the head's task and activation).
// The head (LayerKind::Head): the sequence classifier's saves [B, H] vectors
// of the first token (L is not read); the token classifier's its [B, L, H]
// input after dropout (compute dtype) and the float32 logits [B, L, labels].
std::vector<SavedSpec> saved_for_backward(LayerKind kind, const ModelConfig& config, int64_t B, int64_t L,
                                          const ActivationPlan& plan = {}, int64_t rows = 0,
                                          const BertLayout& layout = bert_layout());

}  // namespace anatomy
