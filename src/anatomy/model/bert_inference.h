// bert_inference.h: BertForSequenceClassification for inference only, as
// model.eval() under torch.no_grad() with the model cast to one dtype
// (model.to(torch.bfloat16)): no gradients, no optimizer, no masters, nothing
// kept between layers but the hidden states.
//
// Weights: every parameter once, in the inference dtype (bf16, fp16, or
// float32 where the backend computes only in float32), category weights. The
// LayerNorm γ and β are also kept in float32 (the fused LayerNorm kernels read
// float32 parameters; 0.1% of bert-large's parameters).
//
// Batches are packed: the sequences' real tokens one after another, no
// padding (the seeds' BetterTransformer point: pad tokens cost nothing). Every
// product runs on [tokens, hidden]; attention runs per sequence through
// Backend::attention_forward_packed. A padded batch (every sequence of one
// length, with a key mask) runs through the same code for comparison.
#pragma once

#include <vector>

#include "anatomy/kernels/backend.h"
#include "anatomy/model/bert.h"
#include "anatomy/model/config.h"
#include "anatomy/model/parameters.h"

namespace anatomy {

// A batch on the host. Packed: ids and token types of every sequence one
// after another, offsets [B + 1] (sequence b is offsets[b] .. offsets[b+1]).
// Padded (padded_length > 0): every sequence occupies padded_length rows,
// offsets still give the real tokens' ends (offsets[b] = b · padded_length),
// and the tokens past a sequence's end are padding, masked as keys.
struct InferenceBatch {
  std::vector<int64_t> input_ids, token_type_ids;  // token_type_ids empty: all 0
  std::vector<int64_t> offsets;
  std::vector<int64_t> lengths;  // real tokens per sequence
  int64_t padded_length = 0;     // 0: packed
  int64_t sequences() const { return static_cast<int64_t>(lengths.size()); }
  int64_t rows() const { return offsets.empty() ? 0 : offsets.back(); }
};

// Packs examples (each its ids and token types, real tokens only).
// `pad_to` > 0 builds a padded batch of that length instead (pad id 0).
InferenceBatch make_inference_batch(const std::vector<const int64_t*>& ids, const std::vector<const int64_t*>& types,
                                    const std::vector<int64_t>& lengths, int64_t pad_to = 0);

class BertInference {
 public:
  // `dtype`: F32, BF16 or F16 (16-bit only where the backend computes in 16 bits).
  BertInference(Backend& backend, BertConfig config, DType dtype);

  const BertConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }
  int64_t parameter_count() const { return weights_.parameter_count(); }
  // Takes the weights of a float32 model (on any backend, typically the CPU
  // one the checkpoint was loaded into), rounded to the inference dtype.
  void load_from(const BertForSequenceClassification& source);

  // Logits, float32 [B, num_labels] on the device.
  Tensor forward(const InferenceBatch& batch);

 private:
  Tensor temporary(Shape shape, const std::string& name, DType dtype);
  Tensor upload(const std::vector<int64_t>& host, const std::string& name);

  Backend& backend_;
  BertConfig config_;
  DType dtype_;
  ParameterSet weights_;
  BertTensors w_;
  ParameterSet norms_;  // float32 LayerNorm γ and β (16-bit inference only; else empty)
  BertTensors n_;       // w_ with the LayerNorm tensors taken from norms_
  ActivationKind activation_;
};

}  // namespace anatomy
