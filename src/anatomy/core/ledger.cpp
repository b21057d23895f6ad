// ledger.cpp: bookkeeping of every device allocation by category.
#include "anatomy/core/ledger.h"

#include <algorithm>
#include <cstdlib>

#include "anatomy/core/error.h"

namespace anatomy {

namespace {
constexpr std::array<std::string_view, kCategoryCount> kCategoryNames = {
    "weights",       "weights_half", "optimizer_states", "gradients", "activations",
    "temporary",     "functionality", "data",            "workspace", "communication"};

// Host memory from the C library: nothing is pooled, so what it has reserved
// is what is live.
class CpuAllocator final : public DeviceAllocator {
 public:
  void* allocate(size_t bytes) override {
    size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void* ptr = std::aligned_alloc(64, rounded);
    if (ptr != nullptr) live_ += static_cast<int64_t>(bytes);
    return ptr;
  }
  void release(void* ptr, size_t bytes) override {
    std::free(ptr);
    live_ -= static_cast<int64_t>(bytes);
  }
  int64_t reserved_bytes() const override { return live_; }

 private:
  int64_t live_ = 0;
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
    : device_(device), allocator_(std::move(allocator)) {
  current_.phase = phase_;
  phase_name_ = std::make_shared<const std::string>(phase_);
}

LedgerEntry Ledger::Entry::listed() const { return LedgerEntry{name, category, bytes, *phase, step}; }

std::string OutOfMemory::message() const {
  return fmt::format("out of memory on {}: allocating {} for '{}' ({}) during \"{}\" while {} is held",
                     device.str(), format_bytes(bytes), name, category_name(category), phase,
                     format_bytes(ledger.live_total));
}

const char* OutOfMemory::what() const noexcept {
  try {
    if (what_.empty()) what_ = message();
    return what_.c_str();
  } catch (...) {
    return "out of memory";
  }
}

Ledger::~Ledger() = default;

std::shared_ptr<Storage> Ledger::allocate(size_t bytes, Category category, std::string name) {
  std::lock_guard<std::mutex> lock(mutex_);  // also serialises the allocator, which need not be thread-safe
  void* ptr = allocator_->allocate(bytes);
  if (ptr == nullptr) {
      OutOfMemory oom;
    oom.device = device_;
    oom.bytes = static_cast<int64_t>(bytes);
    oom.category = category;
    oom.name = name;
    oom.phase = phase_;
    oom.step = step_;
    oom.ledger = stats_;
    oom.ledger.reserved = allocator_->reserved_bytes();
    throw oom;
  }
  auto c = static_cast<size_t>(category);
  auto b = static_cast<int64_t>(bytes);
  stats_.live[c] += b;
  stats_.live_total += b;
  stats_.peak[c] = std::max(stats_.peak[c], stats_.live[c]);
  stats_.allocations += 1;
  const uint64_t id = next_id_++;
  entries_.emplace(id, Entry{std::move(name), category, b, phase_name_, step_});
  note_live_locked(id);
  return std::make_shared<Storage>(this, ptr, bytes, category, id);
}

void Ledger::release(uint64_t id, void* ptr, size_t bytes, Category category) {
  std::lock_guard<std::mutex> lock(mutex_);
  allocator_->release(ptr, bytes);
  auto c = static_cast<size_t>(category);
  stats_.live[c] -= static_cast<int64_t>(bytes);
  stats_.live_total -= static_cast<int64_t>(bytes);
  stats_.reserved = allocator_->reserved_bytes();
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  // Alive at the peak (allocated before it, released after): kept for peak_buffers().
  if (id <= peak_id_) released_since_peak_.emplace_back(id, std::move(it->second));
  entries_.erase(it);
}

void Ledger::note_live_locked(uint64_t id) {
  step_high_ = std::max(step_high_, stats_.live_total);
  stats_.reserved = allocator_->reserved_bytes();
  stats_.reserved_peak = std::max(stats_.reserved_peak, stats_.reserved);
  if (stats_.live_total > stats_.peak_total) {
    stats_.peak_total = stats_.live_total;
    stats_.at_peak = stats_.live;
    stats_.peak_phase = phase_;
    stats_.peak_step = step_;
    stats_.reserved_at_peak = stats_.reserved;
    peak_id_ = id;
    released_since_peak_.clear();
  }
  if (stats_.live_total > current_.total) {
    current_.total = stats_.live_total;
    current_.live = stats_.live;
    current_.reserved = stats_.reserved;
  }
}

void Ledger::close_phase_locked() {
  const bool in_window = step_ < 0 || (step_ >= timeline_first_ && step_ < timeline_first_ + timeline_steps_);
  if (timeline_on_ && in_window) {
    if (timeline_.size() < timeline_max_)
      timeline_.push_back(current_);
    else
      ++timeline_dropped_;
  }
  // The next phase starts from what is live now.
  current_ = PhaseSample{phase_, step_, stats_.live, stats_.live_total, stats_.reserved};
}

void Ledger::set_phase(std::string phase) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (phase == phase_) return;
  close_phase_locked();
  phase_ = std::move(phase);
  current_.phase = phase_;
  phase_name_ = std::make_shared<const std::string>(phase_);
}

void Ledger::set_step(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (step == step_) return;
  close_phase_locked();
  close_step_locked();
  step_ = step;
  current_.step = step_;
  step_high_ = stats_.live_total;
  step_ended_ = false;
}

namespace {
StepSample merge(const StepSample& a, const StepSample& b) {
  StepSample m = b;
  m.first_step = a.first_step;
  m.peak = std::max(a.peak, b.peak);
  return m;
}

// Step `step`'s sample as the ledger stands: its highest point and what is live and reserved now.
StepSample step_sample(int64_t step, int64_t high, const LedgerSnapshot& stats) {
  StepSample s;
  s.first_step = s.last_step = step;
  s.peak = high;
  s.end = stats.live_total;
  s.reserved = stats.reserved;
  s.end_live = stats.live;
  return s;
}

}  // namespace

void Ledger::end_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  close_step_locked();
  step_ended_ = true;
}

void Ledger::close_step_locked() {
  if (step_ < 0 || step_ended_) return;  // setup, or a step already ended: nothing open
  const StepSample s = step_sample(step_, step_high_, stats_);
  open_steps_ = open_count_ == 0 ? s : merge(open_steps_, s);
  if (++open_count_ < stride_) return;
  steps_.push_back(open_steps_);
  open_count_ = 0;
  if (steps_.size() < steps_max_) return;
  // Full: merge neighbours; from now on a sample covers twice the steps.
  std::vector<StepSample> merged;
  merged.reserve(steps_max_ / 2 + 1);
  for (size_t i = 0; i < steps_.size(); i += 2)
    merged.push_back(i + 1 < steps_.size() ? merge(steps_[i], steps_[i + 1]) : steps_[i]);
  steps_ = std::move(merged);
  stride_ *= 2;
  // An odd sample left over covers fewer steps: it stays the open group.
  if (steps_.back().last_step - steps_.back().first_step + 1 < stride_) {
    open_steps_ = steps_.back();
    open_count_ = steps_.back().last_step - steps_.back().first_step + 1;
    steps_.pop_back();
  }
}

std::vector<StepSample> Ledger::step_timeline() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<StepSample> out = steps_;
  StepSample open = open_steps_;
  bool have_open = open_count_ > 0;
  if (step_ >= 0 && !step_ended_) {  // the running step, as it stands
    const StepSample s = step_sample(step_, step_high_, stats_);
    open = have_open ? merge(open, s) : s;
    have_open = true;
  }
  if (have_open) out.push_back(open);
  return out;
}

void Ledger::set_step_timeline_limit(size_t max_samples) {
  std::lock_guard<std::mutex> lock(mutex_);
  steps_max_ = std::max<size_t>(2, max_samples);
}

void Ledger::record_timeline(int64_t first_step, int64_t steps, size_t max_samples) {
  std::lock_guard<std::mutex> lock(mutex_);
  timeline_on_ = true;
  timeline_first_ = first_step;
  timeline_steps_ = steps;
  timeline_max_ = max_samples;
}

std::vector<PhaseSample> Ledger::timeline() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timeline_;
}

int64_t Ledger::timeline_dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timeline_dropped_;
}

LedgerSnapshot Ledger::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

CategoryBytes Ledger::live() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.live;
}

std::vector<LedgerEntry> Ledger::live_entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<LedgerEntry> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(e.second.listed());
  return out;
}

PeakBuffers Ledger::peak_buffers(size_t top) const {
  std::lock_guard<std::mutex> lock(mutex_);
  // (allocation id, entry) of every buffer alive at the peak.
  std::vector<std::pair<uint64_t, const Entry*>> at_peak;
  for (const auto& [id, e] : entries_)
    if (id <= peak_id_) at_peak.emplace_back(id, &e);
  for (const auto& [id, e] : released_since_peak_) at_peak.emplace_back(id, &e);
  std::sort(at_peak.begin(), at_peak.end(), [](const auto& a, const auto& b) {
    if (a.second->bytes != b.second->bytes) return a.second->bytes > b.second->bytes;
    return a.first < b.first;
  });
  PeakBuffers out;
  const size_t listed = top == 0 ? at_peak.size() : std::min(top, at_peak.size());
  for (size_t i = 0; i < at_peak.size(); ++i) {
    const Entry& e = *at_peak[i].second;
    if (i < listed) {
      out.largest.push_back(e.listed());
    } else {
      ++out.other_count;
      out.other_bytes += e.bytes;
      out.other_by_category[static_cast<size_t>(e.category)] += e.bytes;
    }
  }
  return out;
}

void Ledger::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak = stats_.live;
  stats_.at_peak = stats_.live;
  stats_.peak_total = stats_.live_total;
  stats_.peak_phase = phase_;
  stats_.peak_step = step_;
  stats_.reserved = allocator_->reserved_bytes();
  stats_.reserved_peak = stats_.reserved;
  stats_.reserved_at_peak = stats_.reserved;
  peak_id_ = next_id_ - 1;  // what is live now is the peak's
  released_since_peak_.clear();
}

void Ledger::release_unused() {
  std::lock_guard<std::mutex> lock(mutex_);
  allocator_->release_unused();
  stats_.reserved = allocator_->reserved_bytes();
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
