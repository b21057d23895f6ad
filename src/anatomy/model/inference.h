// inference.h: the inference-only interface (evaluate, predict, forward):
// as model.eval() under torch.no_grad() with the model cast to one dtype, no
// gradients, no optimizer, nothing kept between layers but the hidden states,
// on packed batches (the sequences' real tokens one after another).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "anatomy/core/tensor.h"
#include "anatomy/model/config.h"

namespace anatomy {

class Model;

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

class InferenceModel;
class Backend;

// An InferenceModel over a training model of the architecture (a family
// without a packed inference of its own: ModernBERT): its forward without
// saving anything, on the batch padded to its longest sequence (padding id
// `pad_token_id`, masked as keys). `model` computes in the inference dtype
// (its float32 weights and, in 16 bits, their copy).
std::unique_ptr<InferenceModel> make_padded_inference(Backend& backend, std::unique_ptr<Model> model);

class InferenceModel {
 public:
  virtual ~InferenceModel() = default;
  virtual const ModelConfig& config() const = 0;
  virtual DType dtype() const = 0;
  virtual int64_t parameter_count() const = 0;
  // Takes the weights of a float32 model of the same architecture (on any
  // backend, typically the CPU one the checkpoint was loaded into), rounded
  // to the inference dtype.
  virtual void load_from(const Model& source) = 0;
  // Logits, float32 on the device: [B, num_labels] for a sequence-level
  // head; [rows, num_labels] for token classification, the batch's rows in
  // order (packed: the real tokens; padded: B × padded_length); [2, rows]
  // for question answering (the start logits, then the end logits).
  virtual Tensor forward(const InferenceBatch& batch) = 0;
};

}  // namespace anatomy
