// zero_sharding.cpp: ZeRO stages 2 and 3 — gradients, then weights, sharded by unit.
#include "anatomy/distributed/zero_sharding.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "anatomy/core/error.h"

namespace anatomy::distributed {

ShardRange UnitShards::owned(size_t u, int r) const {
  const Unit& unit = units.at(u);
  ShardRange range;
  range.begin = std::min(unit.end, unit.begin + unit.chunk * r);
  range.end = std::min(unit.end, unit.begin + unit.chunk * (r + 1));
  return range;
}

UnitShards unit_shards(const std::vector<ParameterUnit>& units, int64_t flat_elements, int rank, int world) {
  ANATOMY_CHECK(world >= 1 && rank >= 0 && rank < world, "unit_shards: rank {} of {}", rank, world);
  UnitShards s;
  s.rank = rank;
  s.world = world;
  s.flat_elements = flat_elements;
  for (const ParameterUnit& u : units) {
    UnitShards::Unit unit;
    unit.begin = u.begin;
    unit.end = u.end;
    unit.chunk = ((u.size() + world - 1) / world + 63) / 64 * 64;
    unit.shard_offset = s.shard_elements;
    s.shard_elements += unit.chunk;
    s.units.push_back(unit);
  }
  return s;
}

ZeroSharding::ZeroSharding(Backend& backend, Communicator& comm, Model& model, int stage)
    : backend_(backend),
      comm_(comm),
      model_(model),
      stage_(stage),
      masters_(stage == 3 || model.compute_dtype() != DType::F32) {
  ANATOMY_CHECK(stage == 2 || stage == 3 || (stage == 1 && masters_), "ZeroSharding: stage {}", stage);
  ANATOMY_CHECK(model.weights().allocated(), "ZeroSharding: the model's weights are released");
  shards_ = unit_shards(model.parameter_units(), model.weights().flat_elements(),
                        comm.rank(), comm.world_size());
  Ledger& ledger = backend.ledger();
  const std::string tag = fmt::format("zero{}.rank{}.", stage, comm.rank());
  if (masters_) {  // the whole float32 weights go before anything else is allocated
    weight_shard_ = Tensor::empty(ledger, {shards_.shard_elements}, DType::F32, Category::Weights, tag + "weights");
    backend.zero(weight_shard_);
    shard_model_weights();
  }
  if (stage == 1) return;  // the gradients stay whole, all-reduced as plain data parallelism's
  grad_shard_ = Tensor::empty(ledger, {shards_.shard_elements}, DType::F32, Category::Gradients, tag + "gradients");
  backend.zero(grad_shard_);
}

ZeroSharding::~ZeroSharding() = default;

void ZeroSharding::wait_for(uint64_t id) {
  if (id <= waited_) return;
  comm_.wait();
  waited_ = queued_;
}

void ZeroSharding::shard_model_weights() {
  ANATOMY_CHECK(masters_ && model_.weights().allocated(), "shard_model_weights at stage {}", stage_);
  const ParameterSet& weights = model_.weights();
  const Tensor& flat = weights.flat();
  for (size_t u = 0; u < shards_.units.size(); ++u) {
    const ShardRange mine = shards_.owned(u);
    if (mine.size() > 0)
      backend_.copy(weight_shard_.slice(shards_.units[u].shard_offset, {mine.size()}, "weights_chunk"),
                    flat.slice(mine.begin, {mine.size()}, "weights_chunk"));
  }
  if (stage_ == 3) {
    model_.release_weights();
    return;
  }
  if (!float32_read_) {
    std::vector<ParamSpec> specs;
    for (const ParamSpec& spec : weights.specs())
      if (model_.reads_float32_in_mixed_precision(spec.name)) specs.push_back(spec);
    float32_read_ = std::make_unique<ParameterSet>(backend_, specs, Category::Weights, "float32_read.");
  }
  for (const ParamSpec& spec : float32_read_->specs())
    backend_.copy(float32_read_->get(spec.name), weights.get(spec.name));
  model_.release_weights(/*keep_half=*/true);
  model_.read_float32_from(*float32_read_);
}

void ZeroSharding::refresh_float32_read() {
  // Each tensor's parts, by owner: the owner copies its part from its shard,
  // then every part is broadcast from its owner (all at once: one group).
  const ParameterSet& layout = model_.weights();
  struct Part {
    int64_t at, count;  // in float32_read_'s flat buffer
    int owner;
  };
  std::vector<Part> parts;
  for (const ParamSpec& spec : float32_read_->specs()) {
    const int64_t begin = layout.offset_of(spec.name), end = begin + shape_numel(spec.shape);
    const int64_t at = float32_read_->offset_of(spec.name);
    for (size_t u = 0; u < shards_.units.size(); ++u) {
      if (end <= shards_.units[u].begin || begin >= shards_.units[u].end) continue;
      for (int r = 0; r < shards_.world; ++r) {
        const ShardRange owned = shards_.owned(u, r);
        const int64_t lo = std::max(begin, owned.begin), hi = std::min(end, owned.end);
        if (lo >= hi) continue;
        parts.push_back(Part{at + (lo - begin), hi - lo, r});
        if (r == shards_.rank)
          backend_.copy(float32_read_->flat().slice(at + (lo - begin), {hi - lo}, "float32_part"),
                        weight_shard_.slice(shards_.units[u].shard_offset + (lo - owned.begin), {hi - lo},
                                            "weights_chunk"));
      }
    }
  }
  comm_.group_begin();
  for (const Part& p : parts) comm_.broadcast(float32_read_->flat().slice(p.at, {p.count}, "float32_part"), p.owner);
  comm_.group_end();
  wait_for(queue());
}

Tensor ZeroSharding::gathered_unit(size_t u, const std::string& name) {
  const UnitShards::Unit& unit = shards_.units[u];
  Tensor out = Tensor::empty(backend_.ledger(), {unit.chunk * shards_.world}, DType::F32, Category::Weights, name);
  comm_.all_gather(weight_shard_.slice(unit.shard_offset, {unit.chunk}, "weights_chunk"), out);
  wait_for(queue());
  return out;
}

void ZeroSharding::restore_model_weights() {
  ANATOMY_CHECK(masters_, "restore_model_weights at stage {}", stage_);
  drop_slots();
  model_.restore_weights();
  const Tensor& flat = model_.weights().flat();
  for (size_t u = 0; u < shards_.units.size(); ++u) {
    const UnitShards::Unit& unit = shards_.units[u];
    const Tensor whole = gathered_unit(u, fmt::format("zero3.unit{}.weights", u));
    backend_.copy(flat.slice(unit.begin, {unit.size()}, "unit_weights"), whole.slice(0, {unit.size()}, "unit_weights"));
  }
  model_.refresh_half_weights();
  float32_read_.reset();  // the model reads its own whole weights again
}

std::vector<float> ZeroSharding::gather_weights_to_host() {
  ANATOMY_CHECK(masters_, "gather_weights_to_host at stage {}", stage_);
  drop_slots();  // no more gathered units at once than in training
  std::vector<float> host;
  if (shards_.rank == 0) host.assign(static_cast<size_t>(shards_.flat_elements), 0.0f);
  for (size_t u = 0; u < shards_.units.size(); ++u) {
    const UnitShards::Unit& unit = shards_.units[u];
    const Tensor whole = gathered_unit(u, fmt::format("zero3.unit{}.weights", u));
    if (shards_.rank == 0)
      backend_.copy_to_host(whole.slice(0, {unit.size()}, "unit_weights"), host.data() + unit.begin);
  }
  return host;
}

ZeroSharding::Slot* ZeroSharding::resident(int64_t unit) {
  for (Slot& s : slots_)
    if (s.unit == unit) return &s;
  return nullptr;
}

ZeroSharding::Slot& ZeroSharding::gather(int64_t unit, Slot& slot) {
  // The buffer given back may still be filling (a prefetch never used): wait for it first.
  wait_for(slot.queued);
  slot = Slot();
  const auto u = static_cast<size_t>(unit);
  const UnitShards::Unit& chunks = shards_.units.at(u);
  Ledger& ledger = backend_.ledger();
  slot.unit = unit;
  slot.weights.f32 = Tensor::empty(ledger, {chunks.chunk * shards_.world}, DType::F32, Category::Weights,
                                   fmt::format("zero3.unit{}.weights", unit));
  comm_.all_gather(weight_shard_.slice(chunks.shard_offset, {chunks.chunk}, "weights_chunk"), slot.weights.f32);
  slot.queued = queue();
  if (model_.compute_dtype() != DType::F32)  // filled from the float32 buffer once it has arrived (weights())
    slot.weights.half = Tensor::empty(ledger, {chunks.chunk * shards_.world}, model_.compute_dtype(),
                                      Category::WeightsHalf, fmt::format("zero3.unit{}.half", unit));
  return slot;
}

void ZeroSharding::drop_slots() {
  for (Slot& s : slots_) {
    wait_for(s.queued);
    s = Slot();
  }
}

UnitWeights ZeroSharding::weights(int64_t unit, int64_t next) {
  ANATOMY_CHECK(stage_ == 3, "ZeRO stage {} lends no weights", stage_);
  Slot* slot = resident(unit);
  if (slot == nullptr) {  // the empty slot, or the one used longer ago
    Slot& victim = slots_[0].unit < 0 ? slots_[0]
                   : slots_[1].unit < 0 ? slots_[1]
                   : slots_[0].used <= slots_[1].used ? slots_[0] : slots_[1];
    slot = &gather(unit, victim);
  }
  wait_for(slot->queued);
  if (slot->weights.half.defined() && !slot->half_ready) {
    backend_.cast(slot->weights.f32, slot->weights.half);
    slot->half_ready = true;
  }
  slot->used = ++uses_;
  if (next >= 0 && resident(next) == nullptr) gather(next, slot == &slots_[0] ? slots_[1] : slots_[0]);
  return slot->weights;
}

Tensor ZeroSharding::gradients(int64_t unit) {
  const UnitShards::Unit& chunks = shards_.units.at(static_cast<size_t>(unit));
  ANATOMY_CHECK(!staging_.defined(), "gradients of unit {} lent before the last were ready", unit);
  staging_ = Tensor::empty(backend_.ledger(), {chunks.chunk * shards_.world}, DType::F32, Category::Gradients,
                           fmt::format("zero.unit{}.gradients", unit));
  backend_.zero(staging_);
  return staging_;
}

void ZeroSharding::gradients_ready(int64_t unit) {
  ANATOMY_CHECK(staging_.defined(), "gradients of unit {} ready, never lent", unit);
  finish_pending();  // the unit before: its sum has arrived by now, most likely
  const UnitShards::Unit& chunks = shards_.units.at(static_cast<size_t>(unit));
  Tensor reduced = Tensor::empty(backend_.ledger(), {chunks.chunk}, DType::F32, Category::Communication,
                                 fmt::format("zero.unit{}.reduced", unit));
  comm_.reduce_scatter_sum(staging_, reduced);
  pending_.unit = unit;
  pending_.staging = std::move(staging_);
  pending_.reduced = std::move(reduced);
  pending_.queued = queue();
  staging_ = Tensor();
}

void ZeroSharding::finish_pending() {
  if (pending_.unit < 0) return;
  wait_for(pending_.queued);
  const UnitShards::Unit& chunks = shards_.units.at(static_cast<size_t>(pending_.unit));
  backend_.add_inplace(grad_shard_.slice(chunks.shard_offset, {chunks.chunk}, "gradients_chunk"), pending_.reduced);
  pending_ = Pending();
}

void ZeroSharding::release_gradients() {
  finish_pending();
  grad_shard_ = Tensor();
}

void ZeroSharding::zero_gradients() { backend_.zero(grad_shard_); }

void ZeroSharding::finish_gradients() { finish_pending(); }

void ZeroSharding::scale_gradients(double factor) { backend_.scale(grad_shard_, factor); }

double ZeroSharding::gradient_norm() {
  // Padding is zero: the shards' squares sum to the whole gradient's.
  return std::sqrt(comm_.sum_host({backend_.sum_of_squares(grad_shard_)}).at(0));
}

void ZeroSharding::weights_updated() {
  if (stage_ == 3) {
    drop_slots();
    return;
  }
  // Stage 2: each rank's updated chunk of every unit to every rank, in place
  // in a unit-sized buffer (its own chunk copied in, padding zeroed), then
  // into the whole copy: the float32 weights, or with the masters sharded
  // the 16-bit copy (and then the float32 ones the model reads).
  std::vector<const Tensor*> copies;
  if (!masters_) copies.push_back(&model_.weights().flat());
  if (model_.half_weights() != nullptr) copies.push_back(&model_.half_weights()->flat());
  for (size_t u = 0; u < shards_.units.size(); ++u) {
    const UnitShards::Unit& unit = shards_.units[u];
    const ShardRange mine = shards_.owned(u);
    for (const Tensor* flat : copies) {
      Tensor out = Tensor::empty(backend_.ledger(), {unit.chunk * shards_.world}, flat->dtype(),
                                 Category::Communication, fmt::format("zero2.unit{}.gathered", u));
      const Tensor in = out.slice(unit.chunk * shards_.rank, {unit.chunk}, "own_chunk");
      if (mine.size() > 0)
        backend_.copy(in.slice(0, {mine.size()}, "own_chunk"), flat->slice(mine.begin, {mine.size()}, "own_chunk"));
      if (mine.size() < unit.chunk) backend_.zero(in.slice(mine.size(), {unit.chunk - mine.size()}, "padding"));
      comm_.all_gather(in, out);
      wait_for(queue());
      backend_.copy(flat->slice(unit.begin, {unit.size()}, "unit"), out.slice(0, {unit.size()}, "unit"));
    }
  }
  if (masters_) refresh_float32_read();
}

namespace {

class ZeroShardedOptimizer final : public Optimizer {
 public:
  ZeroShardedOptimizer(Backend& backend, ZeroSharding& sharding, const ParameterSet& layout,
                       const OptimizerOptions& options)
      : backend_(backend), sharding_(sharding), options_(options) {
    if (options.kind != OptimizerKind::AdamW && options.kind != OptimizerKind::Sgd)
      fail("--zero-stage {} shards the states of adamw and sgd (updates element by element); --optim {} keeps "
           "per-tensor states: use --zero-stage 0",
           sharding.stage(), optimizer_name(options.kind));
    const UnitShards& shards = sharding.shards();
    // Each tensor of the layout cut to this rank's part of its unit, offsets relative to that part.
    segments_.resize(shards.units.size());
    for (size_t u = 0; u < shards.units.size(); ++u) {
      const ShardRange mine = shards.owned(u);
      for (const ParamSpec& spec : layout.specs()) {
        const int64_t offset = layout.offset_of(spec.name), count = shape_numel(spec.shape);
        const int64_t lo = std::max(offset, mine.begin), hi = std::min(offset + count, mine.end);
        if (lo < hi) segments_[u].push_back(ParamSegment{lo - mine.begin, hi - lo, spec.weight_decay});
      }
    }
    Ledger& ledger = backend.ledger();
    const std::string tag = fmt::format("zero{}.rank{}.", sharding.stage(), shards.rank);
    const Shape shape = {shards.shard_elements};
    if (options.kind == OptimizerKind::AdamW) {
      state_.emplace_back("exp_avg", Tensor::empty(ledger, shape, DType::F32, Category::OptimizerStates, tag + "exp_avg"));
      state_.emplace_back("exp_avg_sq",
                          Tensor::empty(ledger, shape, DType::F32, Category::OptimizerStates, tag + "exp_avg_sq"));
    } else if (options.momentum > 0.0) {
      state_.emplace_back("momentum_buffer",
                          Tensor::empty(ledger, shape, DType::F32, Category::OptimizerStates, tag + "momentum_buffer"));
    }
    for (auto& [name, t] : state_) backend.zero(t);
  }

  void step(const ParameterSet& params, const ParameterSet& grads, double lr, const ParameterSet* half_copy,
            double grad_scale = 1.0) override {
    ++steps_;
    const UnitShards& shards = sharding_.shards();
    const bool stage3 = sharding_.stage() == 3, masters = sharding_.shards_masters();
    for (size_t u = 0; u < shards.units.size(); ++u) {
      const ShardRange mine = shards.owned(u);
      const int64_t n = mine.size(), at = shards.units[u].shard_offset;
      if (n == 0) continue;
      // The weight shard (the masters sharded), or this rank's part of the model's whole weights, in place.
      const Tensor p = masters ? sharding_.weight_shard().slice(at, {n}, "weights_chunk")
                               : params.flat().slice(mine.begin, {n}, "weights_chunk");
      // Stage 1: this rank's part of the whole (all-reduced) gradients.
      const Tensor g = sharding_.stage() == 1 ? grads.flat().slice(mine.begin, {n}, "gradients_chunk")
                                              : sharding_.gradient_shard().slice(at, {n}, "gradients_chunk");
      Tensor h;
      const bool half = !stage3 && half_copy != nullptr;
      if (half) h = half_copy->flat().slice(mine.begin, {n}, "half_weights_chunk");
      auto state = [&](size_t i) { return state_[i].second.slice(at, {n}, state_[i].first); };
      if (options_.kind == OptimizerKind::AdamW)
        backend_.adamw_step_flat(p, g, state(0), state(1), segments_[u],
                                 adamw_hyper(options_.adam, lr, steps_, grad_scale), half ? &h : nullptr);
      else
        backend_.sgd_step_flat(p, g, state_.empty() ? Tensor() : state(0), segments_[u],
                               sgd_hyper(options_, lr, steps_, grad_scale), half ? &h : nullptr);
    }
    sharding_.weights_updated();
  }

  std::string name() const override { return optimizer_name(options_.kind); }
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override { return state_; }

 private:
  Backend& backend_;
  ZeroSharding& sharding_;
  OptimizerOptions options_;
  std::vector<std::vector<ParamSegment>> segments_;  // per unit
  std::vector<std::pair<std::string, Tensor>> state_;
};

}  // namespace

std::unique_ptr<Optimizer> make_zero_sharded_optimizer(Backend& backend, ZeroSharding& sharding,
                                                       const ParameterSet& layout, const OptimizerOptions& options) {
  return std::make_unique<ZeroShardedOptimizer>(backend, sharding, layout, options);
}

}  // namespace anatomy::distributed
