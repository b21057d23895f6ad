// parameters.h: a model's parameters by their Hugging Face names, laid out in
// one flat buffer (so optimizers, clipping and ZeRO sharding work on
// contiguous memory), with named views; and the units ZeRO shards them by.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "anatomy/core/tensor.h"
#include "anatomy/kernels/backend.h"

namespace anatomy {

enum class ParamInit { Normal, Zeros, Ones };

struct ParamSpec {
  std::string name;   // Hugging Face name, e.g. bert.encoder.layer.0.attention.self.query.weight
  Shape shape;
  bool weight_decay;  // Trainer decays every parameter except biases and LayerNorm weights
  ParamInit init;
  // Place in the flat layout, when it is not the place in the list (-1): a
  // list either leaves every slot -1 or gives each spec its own, and is laid
  // out in the slots' order (a part of a family's list keeps theirs).
  int64_t slot = -1;
  // Normal initialisation's standard deviation (0: the config's
  // initializer_range) and, when positive, the truncation at ±init_cutoff
  // standard deviations (values beyond are drawn again), as a family's
  // Hugging Face _init_weights asks.
  double init_std = 0.0;
  double init_cutoff = 0.0;
};

class ParameterSet {
 public:
  // Allocates one flat buffer (zeroed) of `dtype` for all `specs` in `category`; view names are
  // prefix + spec name. Sets of equal specs have equal layouts, whatever their dtype.
  ParameterSet(Backend& backend, std::vector<ParamSpec> specs, Category category, const std::string& prefix,
               DType dtype = DType::F32);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const Tensor& flat() const { return flat_; }
  const Tensor& get(const std::string& name) const;
  const ParamSpec& spec(const std::string& name) const;
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // Where the parameter `name` starts in flat() (elements).
  int64_t offset_of(const std::string& name) const;
  int64_t parameter_count() const;
  // Elements of the flat buffer (the tensors and their alignment padding).
  int64_t flat_elements() const { return total_; }

  // ZeRO stage 3: gives the flat buffer back to the ledger (the views go
  // too), keeping the layout; allocated() is then false until allocate()
  // takes a new, zeroed one.
  void release();
  void allocate(Backend& backend);
  bool allocated() const { return flat_.defined(); }

 private:
  void bind_views();
  std::vector<ParamSpec> specs_;
  Category category_;
  std::string prefix_;
  DType dtype_;
  int64_t total_ = 0;
  Tensor flat_;
  std::vector<Tensor> tensors_;
  std::vector<int64_t> offsets_;
  std::map<std::string, size_t> index_;
};

// A fingerprint of `set`'s flat layout (every name, offset and size): states
// saved as flat buffers (AdamW's moments, SGD's momentum, ZeRO shards) are
// meaningful only under the layout they were saved with.
std::string parameter_layout_id(const ParameterSet& set);

// A model's parameters in units, the granularity of ZeRO stages 2 and 3 (a
// family's: BERT's embeddings, each encoder layer, the head). Each unit is a
// contiguous run [begin, end) of the flat layout (its tensors and their
// alignment padding); together they cover it, in order.
struct ParameterUnit {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

}  // namespace anatomy
