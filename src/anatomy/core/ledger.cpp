// ledger.cpp: bookkeeping of every device allocation by category.
#include "anatomy/core/ledger.h"

#include <algorithm>
#include <cstdlib>

#include "anatomy/core/error.h"

namespace anatomy {

namespace {
constexpr std::array<std::string_view, kCategoryCount> kCategoryNames = {
    "weights", "optimizer_states", "gradients", "activations", "temporary", "functionality", "data"};

class CpuAllocator final : public DeviceAllocator {
 public:
  void* allocate(size_t bytes) override {
    size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    return std::aligned_alloc(64, rounded);
  }
  void release(void* ptr, size_t) override { std::free(ptr); }
};
}  // namespace

std::string_view category_name(Category c) { return kCategoryNames[static_cast<size_t>(c)]; }

bool parse_category(std::string_view name, Category* out) {
  for (size_t i = 0; i < kCategoryCount; ++i) {
    if (kCategoryNames[i] == name) {
      *out = static_cast<Category>(i);
      return true;
    }
  }
  return false;
}

std::unique_ptr<DeviceAllocator> make_cpu_allocator() { return std::make_unique<CpuAllocator>(); }

Storage::~Storage() { ledger_->release(id_, ptr_, bytes_, category_); }

Ledger::Ledger(Device device, std::unique_ptr<DeviceAllocator> allocator)
    : device_(device), allocator_(std::move(allocator)) {}

Ledger::~Ledger() = default;

std::shared_ptr<Storage> Ledger::allocate(size_t bytes, Category category, std::string name) {
  std::lock_guard<std::mutex> lock(mutex_);  // also serialises the allocator, which need not be thread-safe
  void* ptr = allocator_->allocate(bytes);
  if (ptr == nullptr) {
    fail("out of memory on {}: allocating {} for '{}' ({}) while {} is held "
         "(weights {}, optimizer states {}, gradients {}, activations {})",
         device_.str(), format_bytes(static_cast<int64_t>(bytes)), name, category_name(category),
         format_bytes(stats_.live_total), format_bytes(stats_.live[0]), format_bytes(stats_.live[1]),
         format_bytes(stats_.live[2]), format_bytes(stats_.live[3]));
  }
  auto c = static_cast<size_t>(category);
  auto b = static_cast<int64_t>(bytes);
  stats_.live[c] += b;
  stats_.live_total += b;
  stats_.peak[c] = std::max(stats_.peak[c], stats_.live[c]);
  if (stats_.live_total > stats_.peak_total) {
    stats_.peak_total = stats_.live_total;
    stats_.at_peak = stats_.live;
    stats_.peak_phase = phase_;
  }
  stats_.allocations += 1;
  uint64_t id = next_id_++;
  entries_.push_back({id, LedgerEntry{std::move(name), category, b}});
  return std::make_shared<Storage>(this, ptr, bytes, category, id);
}

void Ledger::release(uint64_t id, void* ptr, size_t bytes, Category category) {
  std::lock_guard<std::mutex> lock(mutex_);
  allocator_->release(ptr, bytes);
  auto c = static_cast<size_t>(category);
  stats_.live[c] -= static_cast<int64_t>(bytes);
  stats_.live_total -= static_cast<int64_t>(bytes);
  auto it = std::find_if(entries_.begin(), entries_.end(), [id](const auto& e) { return e.first == id; });
  if (it != entries_.end()) entries_.erase(it);
}

void Ledger::set_phase(std::string phase) {
  std::lock_guard<std::mutex> lock(mutex_);
  phase_ = std::move(phase);
}

LedgerSnapshot Ledger::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::vector<LedgerEntry> Ledger::live_entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<LedgerEntry> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(e.second);
  return out;
}

void Ledger::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak = stats_.live;
  stats_.at_peak = stats_.live;
  stats_.peak_total = stats_.live_total;
  stats_.peak_phase = phase_;
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::abs(value) >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, units[unit]);
}

}  // namespace anatomy
