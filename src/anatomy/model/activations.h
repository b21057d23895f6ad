// activations.h: what a layer saves for its backward pass, as a list of specs
// that each family declares in one place (BERT: bert/bert_activations.h). The
// model allocates exactly these tensors (category "activations") during a
// training forward pass, the memory plan reads the same list, and gradient
// checkpointing is a policy over it. Dropout masks are not saved: they are
// replayed from the counter-based RNG (core/random.h), except the attention
// probabilities' where the backend keeps them as bits (the CUDA backend's
// Hopper kernels: one bit per probability, 1/32 of the probabilities' float32
// size, where drawing the mask again costs the backward a fifth of its time).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "anatomy/core/tensor.h"
#include "anatomy/kernels/backend.h"

namespace anatomy {

struct SavedSpec {
  std::string name;
  Shape shape;
  DType dtype;
  const char* why;  // the backward op that reads it
};

// How activations are kept: the compute dtype of the encoder (float32, or
// BF16/F16 under mixed precision; LayerNorm statistics, the embeddings' sum
// and the head stay float32), and whether attention keeps its probabilities
// [B, heads, L, L] (materialised attention) or only the row log-sum-exp
// [B, heads, L] (fused attention, which recomputes them).
struct ActivationPlan {
  DType compute = DType::F32;
  bool attention_probabilities = true;
  // The fused attention's `saved` also holds its dropout mask as bits
  // (Backend::attention_keeps_dropout_bits, with dropout in this pass).
  bool attention_keep_bits = false;
};

// A layer's saved tensors, allocated from its declaration.
class SavedTensors {
 public:
  SavedTensors() = default;
  // `category` is Activations when training, Temporary when no backward will follow.
  // With `kept` (gradient checkpointing) only those tensors are in `category`
  // and the others are Temporary: keep_only(kept) drops them once the layer
  // has run, and backward recomputes them.
  SavedTensors(Backend& backend, const std::vector<SavedSpec>& specs, Category category, const std::string& prefix,
               const std::set<std::string>* kept = nullptr);
  // Releases every tensor not in `names`.
  void keep_only(const std::set<std::string>& names);
  // Takes over `other`'s tensors (recomputed ones joining the kept).
  void absorb(SavedTensors&& other);
  const Tensor& operator[](const std::string& name) const;
  int64_t bytes() const;

 private:
  std::map<std::string, Tensor> tensors_;
};

}  // namespace anatomy
