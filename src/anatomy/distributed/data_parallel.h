// data_parallel.h: gradients averaged over the ranks during backward, as
// PyTorch's DistributedDataParallel does: the flat gradient buffer is cut into
// buckets from its end (backward makes the head's gradients final first, the
// embeddings' last), and each bucket's all-reduce is queued as soon as the
// model's backward has made it final, so communication overlaps the rest of
// backward. The 1/world of the average is folded into the loss scale of
// backward (the trainer's job), so the all-reduce is a plain sum.
#pragma once

#include <cstdint>

#include "anatomy/core/tensor.h"
#include "anatomy/distributed/communicator.h"

namespace anatomy::distributed {

// PyTorch DDP's default bucket_cap_mb: 25 MiB of float32 gradients.
inline constexpr int64_t kDefaultBucketElements = 25 * 1024 * 1024 / 4;

class GradientReducer {
 public:
  GradientReducer(Communicator& comm, const Tensor& flat_gradients, int64_t bucket_elements = kDefaultBucketElements);

  // The next backward is the last of an update: reduce its gradients. Without
  // it (the earlier micro-batches of gradient accumulation) ready() does
  // nothing, as DDP's no_sync().
  void arm();
  // The model's hook: elements [from, end) are final.
  void ready(int64_t from);
  // Queues what is left and makes the backend wait for every bucket.
  void finish();

  int64_t buckets_launched() const { return buckets_; }

 private:
  void launch(int64_t from);  // [from, launched_from_)

  Communicator& comm_;
  Tensor flat_;
  int64_t bucket_;
  bool armed_ = false;
  int64_t launched_from_ = 0;
  int64_t buckets_ = 0;
};

}  // namespace anatomy::distributed
