// zero.cpp: ZeRO stage 1 — sharded optimizer states.
#include "anatomy/distributed/zero.h"

#include <algorithm>

#include <fmt/format.h>

#include "anatomy/core/error.h"

namespace anatomy::distributed {

ShardRange shard_range(int64_t total, int rank, int world) {
  ANATOMY_CHECK(world >= 1 && rank >= 0 && rank < world, "shard_range: rank {} of {}", rank, world);
  const int64_t per = ((total + world - 1) / world + 63) / 64 * 64;
  ShardRange r;
  r.begin = std::min(total, per * rank);
  r.end = std::min(total, r.begin + per);
  return r;
}

namespace {

class Zero1Optimizer final : public Optimizer {
 public:
  Zero1Optimizer(Backend& backend, Communicator& comm, const ParameterSet& params, const OptimizerOptions& options)
      : backend_(backend), comm_(comm), options_(options) {
    if (options.kind != OptimizerKind::AdamW && options.kind != OptimizerKind::Sgd)
      fail("--zero-stage 1 shards the states of adamw and sgd (updates element by element); --optim {} keeps "
           "per-tensor states: use --zero-stage 0",
           optimizer_name(options.kind));
    const int64_t total = params.flat().numel();
    for (int r = 0; r < comm.world_size(); ++r) ranges_.push_back(shard_range(total, r, comm.world_size()));
    mine_ = ranges_[static_cast<size_t>(comm.rank())];
    // The flat layout's tensors cut to this rank's run, offsets relative to it.
    for (const ParamSegment& s : flat_segments(params)) {
      const int64_t lo = std::max(s.offset, mine_.begin), hi = std::min(s.offset + s.count, mine_.end);
      if (lo < hi) segments_.push_back(ParamSegment{lo - mine_.begin, hi - lo, s.weight_decay});
    }
    const int64_t n = std::max<int64_t>(mine_.size(), 1);
    Ledger& ledger = backend.ledger();
    const std::string tag = fmt::format("zero1.rank{}.", comm.rank());
    if (options.kind == OptimizerKind::AdamW) {
      state_.emplace_back("exp_avg", Tensor::empty(ledger, {n}, DType::F32, Category::OptimizerStates, tag + "exp_avg"));
      state_.emplace_back("exp_avg_sq",
                          Tensor::empty(ledger, {n}, DType::F32, Category::OptimizerStates, tag + "exp_avg_sq"));
    } else if (options.momentum > 0.0) {
      state_.emplace_back("momentum_buffer",
                          Tensor::empty(ledger, {n}, DType::F32, Category::OptimizerStates, tag + "momentum_buffer"));
    }
    for (auto& [name, t] : state_) backend.zero(t);
  }

  void step(const ParameterSet& params, const ParameterSet& grads, double lr, const ParameterSet* half_copy,
            double grad_scale = 1.0) override {
    ++steps_;
    if (mine_.size() > 0) {
      const Tensor p = params.flat().slice(mine_.begin, {mine_.size()}, "weights_shard");
      const Tensor g = grads.flat().slice(mine_.begin, {mine_.size()}, "gradients_shard");
      Tensor h;
      if (half_copy) h = half_copy->flat().slice(mine_.begin, {mine_.size()}, "half_weights_shard");
      if (options_.kind == OptimizerKind::AdamW)
        backend_.adamw_step_flat(p, g, shard(state_[0].second), shard(state_[1].second), segments_,
                                 adamw_hyper(options_.adam, lr, steps_, grad_scale), half_copy ? &h : nullptr);
      else
        backend_.sgd_step_flat(p, g, state_.empty() ? Tensor() : shard(state_[0].second), segments_,
                               sgd_hyper(options_, lr, steps_, grad_scale), half_copy ? &h : nullptr);
    }
    // Every rank's updated run, from its owner, into everyone's whole copy (all at once: one group).
    comm_.group_begin();
    for (int r = 0; r < comm_.world_size(); ++r) {
      const ShardRange& range = ranges_[static_cast<size_t>(r)];
      if (range.size() == 0) continue;
      comm_.broadcast(params.flat().slice(range.begin, {range.size()}, "weights_shard"), r);
      if (half_copy) comm_.broadcast(half_copy->flat().slice(range.begin, {range.size()}, "half_weights_shard"), r);
    }
    comm_.group_end();
    comm_.wait();
  }

  std::string name() const override { return optimizer_name(options_.kind); }
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override { return state_; }

 private:
  // The state buffer's first size() elements (one element is kept for an empty run).
  Tensor shard(const Tensor& state) const { return state.slice(0, {mine_.size()}, state.name()); }

  Backend& backend_;
  Communicator& comm_;
  OptimizerOptions options_;
  std::vector<ShardRange> ranges_;
  ShardRange mine_;
  std::vector<ParamSegment> segments_;
  std::vector<std::pair<std::string, Tensor>> state_;
};

}  // namespace

std::unique_ptr<Optimizer> make_zero1_optimizer(Backend& backend, Communicator& comm, const ParameterSet& params,
                                                const OptimizerOptions& options) {
  return std::make_unique<Zero1Optimizer>(backend, comm, params, options);
}

}  // namespace anatomy::distributed
