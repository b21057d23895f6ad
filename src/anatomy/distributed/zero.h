// zero.h: ZeRO stage 1 (Rajbhandari et al., 2020): the optimizer states
// sharded over the ranks of a data-parallel run. Rank r owns one contiguous
// run of the flat parameter buffer (1/world of it); after the gradients are
// averaged over the ranks, each rank updates only its run, with states for
// its run only, and the updated weights (and their 16-bit copy) are then
// gathered from their owners, so that every rank holds the whole model again.
//
// For optimizers whose update is element by element over the flat buffer:
// AdamW and SGD. Adafactor (factored per matrix) and 8-bit AdamW (blocks and a
// per-tensor size rule) would need the shard boundaries at tensor boundaries;
// they are refused with a clear error. Stages 2 and 3: zero_sharding.h.
#pragma once

#include <memory>

#include "anatomy/distributed/communicator.h"
#include "anatomy/model/parameters.h"
#include "anatomy/optim/optimizer.h"

namespace anatomy::distributed {

// Rank r's run [begin, end) of a flat buffer of `total` elements over `world`
// ranks: equal runs of ceil(total / world) rounded up to 64 elements, the
// last ones shorter (or empty).
struct ShardRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
ShardRange shard_range(int64_t total, int rank, int world);

// The AdamW or SGD of `options` over this rank's shard of `params`.
std::unique_ptr<Optimizer> make_zero1_optimizer(Backend& backend, Communicator& comm, const ParameterSet& params,
                                                const OptimizerOptions& options);

}  // namespace anatomy::distributed
