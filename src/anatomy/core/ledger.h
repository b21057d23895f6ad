// ledger.h: the memory ledger. Every buffer the engine allocates on a device
// is obtained here, with the category it belongs to and a name, so that the
// live and peak bytes of each category are known exactly at every moment.
// The categories are the seed's six ("Anatomy of Model's Memory"), with the
// float32 (master) weights and their half-precision copy apart, plus input
// data, library workspaces and communication buffers. What the ledger cannot
// see buffer by buffer (the CUDA context and kernels, memory free inside the
// allocator's pool, and whatever NVML counts beyond that) is accounted for in
// anatomy/ (memory_anatomy.h) from the pool's figures and NVML.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "anatomy/core/device.h"
#include "anatomy/core/error.h"

namespace anatomy {

enum class Category {
  Weights,          // model parameters (the float32 masters under mixed precision)
  WeightsHalf,      // the bf16/fp16 copy of the weights that mixed precision computes with
  OptimizerStates,  // AdamW moments and the like
  Gradients,        // one gradient per trainable parameter
  Activations,      // forward results saved for the backward pass
  Temporary,        // buffers that live within one operation or one layer
  Functionality,    // functionality-specific memory (RNG state, loss scaling, ...)
  Data,             // input batches
  Workspace,        // library workspaces (cuBLAS / cuBLASLt)
  Communication,    // buffers for collectives between GPUs
};
constexpr size_t kCategoryCount = 10;

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
  // Bytes obtained from the device (a pool's segments), live or free inside
  // the pool; the allocator that hands out what it gets reports the live bytes.
  virtual int64_t reserved_bytes() const = 0;
  // Gives memory held free (a pool's unused segments) back to the device.
  virtual void release_unused() {}
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
  int64_t peak_step = -1;              // the step (0-based) in which it peaked; -1 before the first
  int64_t allocations = 0;             // number of allocations made so far
  int64_t reserved = 0;                // the allocator's bytes from the device now (live + free in its pool)
  int64_t reserved_peak = 0;           // the most it has held
  int64_t reserved_at_peak = 0;        // what it held when the live total peaked
};

// The memory of one phase of the run (one layer's forward, the optimizer
// step, ...): the live bytes per category at the phase's highest point.
struct PhaseSample {
  std::string phase;
  int64_t step = -1;
  CategoryBytes live{};
  int64_t total = 0;
  int64_t reserved = 0;
};

// One live buffer, as the ledger lists it.
struct LedgerEntry {
  std::string name;
  Category category;
  int64_t bytes;
  std::string phase;   // the phase that allocated it ("forward layer 3")
  int64_t step = -1;   // the step that allocated it (-1: before the first)
};

// The buffers alive when the ledger's total peaked: the largest whole, the
// rest counted, so that largest + other_bytes = the peak total.
struct PeakBuffers {
  std::vector<LedgerEntry> largest;  // largest first (ties: the earlier allocation first)
  int64_t other_count = 0;           // buffers alive at the peak and not listed
  int64_t other_bytes = 0;
  CategoryBytes other_by_category{};  // other_bytes by category
};

// The memory of one step, or of consecutive steps merged when the whole-run
// series is full: the highest live total within them and what was live when
// the last of them ended.
struct StepSample {
  int64_t first_step = 0, last_step = 0;  // inclusive, 0-based
  int64_t peak = 0;                       // the highest live total within the steps
  int64_t end = 0;                        // the live total when the last one ended
  int64_t reserved = 0;                   // the allocator's bytes when the last one ended
  CategoryBytes end_live{};               // `end` by category
};

class Ledger;

// Thrown when the device has no room for an allocation: what was asked, in
// which phase, and the ledger at that moment. Callers that can explain it
// (the out-of-memory report) catch it; what() gives one line for the rest.
class OutOfMemory : public Error {
 public:
  OutOfMemory() : Error("out of memory") {}
  Device device;
  int64_t bytes = 0;
  Category category = Category::Temporary;
  std::string name;
  std::string phase;
  int64_t step = -1;
  LedgerSnapshot ledger;  // live and peaks when it happened; `reserved` is the pool's segments
  std::string message() const;
  const char* what() const noexcept override;

 private:
  mutable std::string what_;
};

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

  // Allocates `bytes` (zero is allowed) in `category`. Throws OutOfMemory
  // naming the buffer, the request and what is held when the device is full.
  std::shared_ptr<Storage> allocate(size_t bytes, Category category, std::string name);

  // Names the phase of the run (e.g. "forward layer 3") for peak attribution
  // and the timeline.
  void set_phase(std::string phase);
  const std::string& phase() const { return phase_; }
  // The training step now running (0-based); -1 outside the steps.
  void set_step(int64_t step);
  // The running step has ended (its sample in the whole-run series takes
  // what is live now); the step number stays until the next set_step.
  void end_step();

  // Keeps a sample per phase (at most `max_samples`; later phases are
  // dropped, and counted) for steps [first_step, first_step + steps). Setup
  // phases (step -1) are always kept.
  void record_timeline(int64_t first_step, int64_t steps, size_t max_samples = 20000);
  std::vector<PhaseSample> timeline() const;
  int64_t timeline_dropped() const;

  // The whole run, a sample per step (always kept, whatever record_timeline
  // says): when `max_samples` are held, neighbours merge in pairs and each
  // later sample covers twice as many steps, so the series stays bounded and
  // spans every step. The step still running is the last sample.
  std::vector<StepSample> step_timeline() const;
  void set_step_timeline_limit(size_t max_samples);  // at least 2; default 512

  LedgerSnapshot snapshot() const;
  CategoryBytes live() const;  // the bytes held now by category (cheaper than a snapshot)
  std::vector<LedgerEntry> live_entries() const;
  // The buffers alive at the peak of snapshot().peak_total, the `top` largest
  // listed (0: all).
  PeakBuffers peak_buffers(size_t top) const;
  // Forgets the peaks, keeping what is live (e.g. to measure one step).
  void reset_peaks();
  // Gives the allocator's free memory back to the device (after a detour,
  // such as the profiler's ceilings, that the run's plan does not include).
  void release_unused();

 private:
  friend class Storage;
  void release(uint64_t id, void* ptr, size_t bytes, Category category);

  void close_phase_locked();  // ends the current phase's sample
  void close_step_locked();   // ends the current step's sample in the whole-run series
  void note_live_locked(uint64_t id);  // updates peaks (`id`: the allocation) and the high points

  Device device_;
  std::unique_ptr<DeviceAllocator> allocator_;
  mutable std::mutex mutex_;
  LedgerSnapshot stats_;
  std::string phase_ = "setup";
  int64_t step_ = -1;
  PhaseSample current_;                 // the open phase's high point
  bool timeline_on_ = false;
  int64_t timeline_first_ = 0, timeline_steps_ = 0;
  size_t timeline_max_ = 0;
  int64_t timeline_dropped_ = 0;
  std::vector<PhaseSample> timeline_;
  // The step series: closed samples, the open group of steps and its size.
  std::vector<StepSample> steps_;
  StepSample open_steps_;
  int64_t open_count_ = 0;   // steps folded into open_steps_
  int64_t stride_ = 1;       // steps per sample
  size_t steps_max_ = 512;
  int64_t step_high_ = 0;    // the highest live total in the running step
  bool step_ended_ = false;  // end_step() closed the running step's sample

  // A live buffer; the phase is shared between the buffers of one phase.
  struct Entry {
    std::string name;
    Category category;
    int64_t bytes;
    std::shared_ptr<const std::string> phase;
    int64_t step;
    LedgerEntry listed() const;
  };
  std::shared_ptr<const std::string> phase_name_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Entry> entries_;  // by allocation id: allocation order
  // The peak's buffers: those live with id <= peak_id_, and those released
  // since the peak that were allocated before it.
  uint64_t peak_id_ = 0;
  std::vector<std::pair<uint64_t, Entry>> released_since_peak_;
};

// "12.3 MiB" style rendering used by reports and errors.
std::string format_bytes(int64_t bytes);

}  // namespace anatomy
