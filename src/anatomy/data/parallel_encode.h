// parallel_encode.h: the batch loop both tokenizers share: inputs encoded on
// several threads in chunks of 64, each result in its own slot, and the first
// failing input (the lowest index, whatever the threads' order) named.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "anatomy/core/error.h"

namespace anatomy::data {

// Calls `make_worker()` once per thread; the callable it returns, given i,
// encodes input i (so per-thread scratch lives in it). `threads` 0: one per
// hardware thread. An Error ends the batch as "input N: <what>" for the lowest
// failing N; any other exception is rethrown as it is.
template <typename MakeWorker>
void encode_in_parallel(size_t count, int threads, MakeWorker&& make_worker) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  constexpr size_t kChunk = 64;
  const size_t chunks = (count + kChunk - 1) / kChunk;
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), std::max<size_t>(chunks, 1)));
  std::atomic<size_t> next{0};
  std::mutex failure_mutex;
  size_t failed_at = count;
  std::string failure;
  std::exception_ptr other_failure;
  const auto work = [&] {
    auto encode = make_worker();
    for (size_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) {
      const size_t end = std::min(count, (c + 1) * kChunk);
      for (size_t i = c * kChunk; i < end; ++i) {
        try {
          encode(i);
        } catch (const Error& e) {
          std::lock_guard<std::mutex> lock(failure_mutex);
          if (i < failed_at) failed_at = i, failure = e.what();
          return;
        } catch (...) {
          std::lock_guard<std::mutex> lock(failure_mutex);
          if (!other_failure) other_failure = std::current_exception();
          return;
        }
      }
    }
  };
  if (threads <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(work);
    for (std::thread& t : pool) t.join();
  }
  if (other_failure) std::rethrow_exception(other_failure);
  if (failed_at < count) fail("input {}: {}", failed_at + 1, failure);
}

}  // namespace anatomy::data
