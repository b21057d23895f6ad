// ledger.h: the memory ledger. Every buffer the engine allocates on a device
// is obtained here, with the category it belongs to and a name, so that the
// live and peak bytes of each category are known exactly at every moment.
// The categories are the seed's six ("Anatomy of Model's Memory") plus the
// batches of input data.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "anatomy/core/device.h"

namespace anatomy {

enum class Category {
  Weights,          // model parameters
  OptimizerStates,  // AdamW moments and the like
  Gradients,        // one gradient per trainable parameter
  Activations,      // forward results saved for the backward pass
  Temporary,        // buffers that live within one operation or one layer
  Functionality,    // functionality-specific memory (RNG state, loss scaling, ...)
  Data,             // input batches
};
constexpr size_t kCategoryCount = 7;

std::string_view category_name(Category c);
// Parses the names that category_name gives (used by tests and JSON readers).
bool parse_category(std::string_view name, Category* out);

// Raw memory of one device type. The CPU one is built in; the CUDA one is
// registered by the CUDA backend.
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // Returns nullptr when the device has no memory left.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr, size_t bytes) = 0;
};

std::unique_ptr<DeviceAllocator> make_cpu_allocator();

using CategoryBytes = std::array<int64_t, kCategoryCount>;

struct LedgerSnapshot {
  CategoryBytes live{};                // bytes held now, per category
  CategoryBytes peak{};                // the largest each category has been
  CategoryBytes at_peak{};             // composition when the total was at its peak
  int64_t live_total = 0;
  int64_t peak_total = 0;
  std::string peak_phase;              // the phase in which the total peaked
  int64_t allocations = 0;             // number of allocations made so far
};

// One live buffer, as the ledger lists it.
struct LedgerEntry {
  std::string name;
  Category category;
  int64_t bytes;
};

class Ledger;

// A block of device memory owned through the ledger; returning it to the ledger
// happens in the destructor.
class Storage {
 public:
  Storage(Ledger* ledger, void* ptr, size_t bytes, Category category, uint64_t id)
      : ledger_(ledger), ptr_(ptr), bytes_(bytes), category_(category), id_(id) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Category category() const { return category_; }
  Ledger& ledger() const { return *ledger_; }

 private:
  Ledger* ledger_;
  void* ptr_;
  size_t bytes_;
  Category category_;
  uint64_t id_;
};

class Ledger {
 public:
  Ledger(Device device, std::unique_ptr<DeviceAllocator> allocator);
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  Device device() const { return device_; }

  // Allocates `bytes` (zero is allowed) in `category`. Throws Error naming the
  // buffer, the request and what is held when the device is out of memory.
  std::shared_ptr<Storage> allocate(size_t bytes, Category category, std::string name);

  // Names the phase of the run (e.g. "forward layer 3") for peak attribution.
  void set_phase(std::string phase);
  const std::string& phase() const { return phase_; }

  LedgerSnapshot snapshot() const;
  std::vector<LedgerEntry> live_entries() const;
  // Forgets the peaks, keeping what is live (e.g. to measure one step).
  void reset_peaks();

 private:
  friend class Storage;
  void release(uint64_t id, void* ptr, size_t bytes, Category category);

  Device device_;
  std::unique_ptr<DeviceAllocator> allocator_;
  mutable std::mutex mutex_;
  LedgerSnapshot stats_;
  std::string phase_ = "setup";
  uint64_t next_id_ = 1;
  std::vector<std::pair<uint64_t, LedgerEntry>> entries_;
};

// "12.3 MiB" style rendering used by reports and errors.
std::string format_bytes(int64_t bytes);

}  // namespace anatomy
