// loader.h: the data loader's host side, as PyTorch's DataLoader behind
// Hugging Face Trainer: batches in epoch order (a seeded shuffle per epoch),
// the last partial batch kept or dropped (dataloader_drop_last), built ahead
// by worker threads (dataloader_num_workers, each keeping up to
// dataloader_prefetch_factor batches ready); with group_by_length, examples of
// similar lengths batched together (Hugging Face's LengthGroupedSampler). The time the training loop waits
// for a batch that is not ready is measured.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "anatomy/data/dataset.h"

namespace anatomy {

struct LoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = true;
  uint64_t seed = 42;
  bool drop_last = false;
  int64_t num_workers = 0;      // 0: batches are built when asked for, on the caller's thread
  int64_t prefetch_factor = 2;  // batches each worker keeps ready ahead
  int64_t first_batch = 0;      // the run's batch to start at (a resumed run continues where it stopped)
  bool group_by_length = false; // each epoch's order through length_grouped_order (lengths from the attention mask)
  int rank = 0, world_size = 1;  // data parallelism: this rank's shard of each epoch (shard_order, after grouping)
};

class BatchLoader {
 public:
  BatchLoader(const Dataset& data, LoaderOptions options);
  ~BatchLoader();  // stops the workers
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Batches per epoch: ceil(shard / batch), or floor with drop_last (the
  // shard: the whole data in a world of one, ceil(size / world) else).
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // The next batch of the run (epoch after epoch), waiting for it if a worker
  // has not built it yet.
  HostBatch next();
  // Seconds next() spent waiting for workers (or building, with no workers).
  double wait_seconds() const { return wait_seconds_; }

 private:
  HostBatch build(int64_t index) const;  // batch `index` of the run, counting across epochs
  void work(int64_t worker);
  void stop_workers();  // tells the workers to stop and joins them

  const Dataset& data_;
  LoaderOptions options_;
  int64_t shard_ = 0;  // examples per epoch for this rank
  int64_t batches_per_epoch_ = 0;
  std::vector<int64_t> lengths_;  // group_by_length: each example's length
  int64_t next_index_ = 0;  // the next batch next() returns
  double wait_seconds_ = 0.0;

  mutable std::mutex mutex_;
  std::condition_variable ready_, room_;
  std::map<int64_t, HostBatch> built_;  // batches built and not yet taken
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace anatomy
