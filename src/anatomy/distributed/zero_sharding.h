// zero_sharding.h: ZeRO stages 2 and 3 (Rajbhandari et al., 2020), in the
// manner of PyTorch's FSDP: the model's parameters in units (Model::parameter_units:
// BERT's embeddings, each encoder layer, the pooler and classifier), every
// unit cut into `world` equal chunks, rank r owning chunk r of every unit.
//
// Stage 2 (gradients sharded): a rank holds no whole gradient buffer. Each
// unit's backward writes into a unit-sized staging buffer (at most two live:
// the unit computing and the one being reduced); once the unit's gradients
// are final, they are reduce-scattered (summed over the ranks) and added into
// this rank's gradient shard, every micro-batch of gradient accumulation. The
// optimizer updates this rank's chunks; the updated weights are all-gathered
// so that every rank holds the whole model again.
//
// Stage 3 (parameters sharded too): a rank keeps only its chunks of the
// float32 weights. Before a unit's forward, and again before its backward
// (and its recompute under gradient checkpointing), the unit is all-gathered
// into a working buffer; two are kept (the unit in use and the next one,
// prefetched), an older one is given back when a third is needed, and every
// one is given back after an update.
//
// Collectives are queued (communicator.h); the backend is made to wait for
// them only where it reads what they wrote or reuses what they read, so a
// unit's reduce-scatter and the next unit's gather run beside the compute.
//
// Stage 1 under mixed precision uses the same chunks for its float32 masters
// (shards_masters()): the gradients stay whole (all-reduced, data_parallel.h),
// a rank keeps its chunks of the masters and the moments, the whole 16-bit
// copy and float32 copies of what the model reads in float32. (Stage 1 in
// float32, where the weights are the masters, is zero.h's.)
//
// For optimizers whose update is element by element (AdamW, SGD), as stage 1.
#pragma once

#include <memory>
#include <vector>

#include "anatomy/distributed/communicator.h"
#include "anatomy/distributed/zero.h"
#include "anatomy/model/model.h"
#include "anatomy/optim/optimizer.h"

namespace anatomy::distributed {

// Every unit cut into equal chunks of ceil(size / world) rounded up to 64
// elements; rank r owns [begin + r·chunk, begin + (r + 1)·chunk) ∩ [begin,
// end) (the last ranks' chunks are padded with zeros, or wholly padding). A
// rank's shard holds its chunk of every unit, one after the other.
struct UnitShards {
  struct Unit {
    int64_t begin = 0, end = 0;    // the unit's run of the flat layout
    int64_t chunk = 0;             // elements per rank (padded)
    int64_t shard_offset = 0;      // where this unit's chunk starts in a rank's shard
    int64_t size() const { return end - begin; }
  };
  std::vector<Unit> units;
  int rank = 0, world = 1;
  int64_t shard_elements = 0;      // Σ chunk: one rank's shard
  int64_t flat_elements = 0;       // the whole flat layout
  // The part of unit u that `rank` owns, as a run of the flat layout (possibly empty).
  ShardRange owned(size_t u, int rank) const;
  ShardRange owned(size_t u) const { return owned(u, rank); }
};
UnitShards unit_shards(const std::vector<ParameterUnit>& units, int64_t flat_elements, int rank, int world);

class ZeroSharding final : public ParameterUnits {
 public:
  // `stage` 2 or 3 (or 1 under mixed precision). Allocates this rank's
  // gradient shard (category gradients; not at stage 1) and, with the masters
  // sharded, first its weight shard (weights), which takes this rank's chunks
  // of the model's weights (shard_model_weights).
  ZeroSharding(Backend& backend, Communicator& comm, Model& model, int stage);
  ~ZeroSharding() override;

  int stage() const { return stage_; }
  // The float32 weights (the masters) are sharded: at stage 3, and at stages
  // 1 and 2 under mixed precision, where the model keeps its whole 16-bit copy and
  // whole float32 copies of only what it reads in float32 (the embeddings,
  // the LayerNorms, the head: reads_float32_in_mixed_precision).
  bool shards_masters() const { return masters_; }
  const UnitShards& shards() const { return shards_; }
  const Tensor& gradient_shard() const { return grad_shard_; }
  const Tensor& weight_shard() const { return weight_shard_; }  // shards_masters()

  // shards_masters(): takes this rank's chunks of the model's weights into
  // the weight shard and releases the model's own (again after a resume
  // restored and loaded them); stage 2 keeps the 16-bit copy and the float32
  // subset the model reads.
  void shard_model_weights();
  // shards_masters(): the model's weights allocated again and gathered whole, on every rank.
  void restore_model_weights();
  // Training is over: the gradient shard goes back to the ledger.
  void release_gradients();
  // The whole float32 weights in host memory on rank 0 (empty elsewhere),
  // gathered unit by unit; every rank must call it (a checkpoint's model).
  std::vector<float> gather_weights_to_host();

  // ParameterUnits: what the model reads and writes.
  bool lends_weights() const override { return stage_ == 3; }
  UnitWeights weights(int64_t unit, int64_t next) override;
  Tensor gradients(int64_t unit) override;
  void gradients_ready(int64_t unit) override;

  // An update's gradients: zero the shard before its first backward, and
  // after its last one finish every reduce-scatter.
  void zero_gradients();
  void finish_gradients();
  void scale_gradients(double factor);
  // The global L2 norm of the gradients (every rank's shard summed): the same
  // figure on every rank, so the same clipping factor (clip_coefficient).
  double gradient_norm();
  // After the optimizer updated this rank's chunks: stage 2 gathers the
  // updated weights (and their 16-bit copy) into every rank's whole copy;
  // stage 3 gives back its gathered units, now stale.
  void weights_updated();

 private:
  struct Slot {  // stage 3: a gathered unit
    int64_t unit = -1;
    UnitWeights weights;
    uint64_t queued = 0;  // the collective that fills it
    uint64_t used = 0;    // for choosing which to give back
    bool half_ready = false;  // mixed precision: the 16-bit copy made from the arrived float32 one
  };
  struct Pending {  // stage 2/3: a unit's reduce-scatter in flight
    int64_t unit = -1;
    Tensor staging, reduced;
    uint64_t queued = 0;
  };
  uint64_t queue() { return ++queued_; }
  // Makes the backend wait for collective `id` (and every one before it).
  void wait_for(uint64_t id);
  void finish_pending();
  Slot& gather(int64_t unit, Slot& slot);
  Slot* resident(int64_t unit);
  void drop_slots();
  // Gathers unit u's float32 weights into a new buffer (category weights) and waits for it.
  Tensor gathered_unit(size_t u, const std::string& name);

  Backend& backend_;
  Communicator& comm_;
  Model& model_;
  int stage_;
  bool masters_;
  std::unique_ptr<ParameterSet> float32_read_;  // stage 2, mixed precision: what the model reads in float32
  // Stage 2, mixed precision: float32_read_ from the updated shards (each owner's part broadcast).
  void refresh_float32_read();
  UnitShards shards_;
  Tensor grad_shard_, weight_shard_;
  Slot slots_[2];
  Pending pending_;
  Tensor staging_;  // the gradients buffer lent to the unit in backward
  uint64_t queued_ = 0, waited_ = 0, uses_ = 0;
};

// The AdamW or SGD of `options` over this rank's chunks: its step reads the
// gradient shard (stage 1: its chunks of the whole gradients step() is given)
// and updates the weights (the weight shard with the masters sharded, else
// the model's own in place; step()'s `params`), then calls weights_updated().
std::unique_ptr<Optimizer> make_zero_sharded_optimizer(Backend& backend, ZeroSharding& sharding,
                                                       const ParameterSet& layout, const OptimizerOptions& options);

}  // namespace anatomy::distributed
