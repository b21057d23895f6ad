// loader.cpp: batches built ahead by worker threads, handed out in order.
#include "anatomy/data/loader.h"

#include <chrono>
#include <system_error>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/data/mlm_data.h"

namespace anatomy {

BatchLoader::BatchLoader(const Dataset& data, LoaderOptions options) : data_(data), options_(options) {
  if (options_.batch_size <= 0) fail("--per-device-train-batch-size must be positive, got {}", options_.batch_size);
  if (options_.num_workers < 0) fail("--dataloader-num-workers must be >= 0, got {}", options_.num_workers);
  if (options_.prefetch_factor <= 0)
    fail("--dataloader-prefetch-factor must be positive, got {}", options_.prefetch_factor);
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size)
    fail("loader: rank {} of a world of {}", options_.rank, options_.world_size);
  shard_ = shard_size(data_.size, options_.world_size);
  batches_per_epoch_ =
      options_.drop_last ? shard_ / options_.batch_size : (shard_ + options_.batch_size - 1) / options_.batch_size;
  if (batches_per_epoch_ == 0)
    fail("--dataloader-drop-last: {} examples{} make no full batch of {}", shard_,
         options_.world_size > 1 ? fmt::format(" per rank ({} in all)", data_.size) : std::string(),
         options_.batch_size);
  if (options_.first_batch < 0) fail("loader: first batch {} is negative", options_.first_batch);
  if (options_.group_by_length) lengths_ = sequence_lengths(data_);
  next_index_ = options_.first_batch;
  for (int64_t w = 0; w < options_.num_workers; ++w) {
    try {
      workers_.emplace_back([this, w] { work(w); });
    } catch (const std::system_error& e) {
      stop_workers();  // the destructor does not run for a constructor that throws
      fail("--dataloader-num-workers {}: the system started {} worker threads and refused more ({})",
           options_.num_workers, w, e.what());
    }
  }
}

void BatchLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  room_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

BatchLoader::~BatchLoader() { stop_workers(); }

HostBatch BatchLoader::build(int64_t index) const {
  const int64_t epoch = index / batches_per_epoch_, begin = (index % batches_per_epoch_) * options_.batch_size;
  // Each worker derives the epoch's order itself: a pure function of (seed, epoch), cheap next to a batch.
  std::vector<int64_t> order = epoch_order(data_.size, options_.shuffle, options_.seed, epoch);
  if (options_.group_by_length)  // grouped in global batches, so that each rank's batch k comes from one group
    order = length_grouped_order(order, lengths_, options_.batch_size * options_.world_size);
  order = shard_order(order, options_.rank, options_.world_size);
  HostBatch batch = gather_batch(data_, order, begin, std::min(shard_, begin + options_.batch_size));
  // Masked-LM: masked as the collator masks, anew for every batch of the run.
  if (data_.masking) mask_tokens(batch, *data_.masking, options_.seed, masking_stream(index, options_.rank));
  return batch;
}

void BatchLoader::work(int64_t worker) {
  // Worker w builds batches f + w, f + w + W, ... (f the first batch), staying at most
  // prefetch_factor × W batches ahead of the consumer, as DataLoader's workers do.
  const int64_t stride = options_.num_workers, ahead = options_.prefetch_factor * options_.num_workers;
  for (int64_t index = options_.first_batch + worker;; index += stride) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      room_.wait(lock, [&] { return stopping_ || index < next_index_ + ahead; });
      if (stopping_) return;
    }
    HostBatch batch = build(index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      built_.emplace(index, std::move(batch));
    }
    ready_.notify_all();
  }
}

HostBatch BatchLoader::next() {
  const auto start = std::chrono::steady_clock::now();
  HostBatch batch;
  if (workers_.empty()) {
    batch = build(next_index_++);
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [&] { return built_.count(next_index_) != 0; });
    auto it = built_.find(next_index_);
    batch = std::move(it->second);
    built_.erase(it);
    ++next_index_;
    lock.unlock();
    room_.notify_all();
  }
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return batch;
}

}  // namespace anatomy
