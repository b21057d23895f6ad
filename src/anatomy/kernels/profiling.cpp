// profiling.cpp: Profiler. What each op costs is the backend's description
// (backend.cpp); this keeps the markers and the records.
#include "anatomy/kernels/profiling.h"

#include <utility>

#include "anatomy/core/error.h"

namespace anatomy {

Profiler::Profiler(Backend& backend) : backend_(backend), previous_(backend.hook()) { backend_.set_hook(this); }

Profiler::~Profiler() {
  if (backend_.hook() == this) backend_.set_hook(previous_);
}

void Profiler::begin(OpInfo info) {
  open_ = Pending{};
  open_.record.op = info.op;
  open_.record.operand = std::move(info.operand);
  open_.record.phase = backend_.ledger().phase();
  open_.record.live = backend_.ledger().live();
  open_.record.op_class = info.op_class;
  open_.record.flops = info.flops;
  open_.record.bytes = info.bytes;
  const std::string range =
      open_.record.operand.empty() ? open_.record.op : open_.record.op + " " + open_.record.operand;
  backend_.range_push(range.c_str());
  open_.begin = backend_.record_marker();
}

void Profiler::end() {
  open_.end = backend_.record_marker();
  backend_.range_pop();
  pending_.push_back(std::move(open_));
}

void Profiler::time_call(const char* op, std::string operand, OpClass c, const std::function<void()>& call) {
  if (!recording_) return call();
  begin(OpInfo{op, std::move(operand), c, 0.0, 0.0});
  call();
  end();
}

void Profiler::begin_step() {
  backend_.clear_markers();
  pending_.clear();
  recording_ = true;
  backend_.range_push("anatomy step");
  step_begin_ = backend_.record_marker();
}

StepTiming Profiler::end_step() {
  ANATOMY_CHECK(recording_, "end_step without begin_step");
  const int64_t step_end = backend_.record_marker();
  backend_.range_pop();
  recording_ = false;
  StepTiming timing;
  timing.step_ms = backend_.marker_elapsed_ms(step_begin_, step_end);
  timing.ops.reserve(pending_.size());
  for (Pending& p : pending_) {
    p.record.start_ms = backend_.marker_elapsed_ms(step_begin_, p.begin);
    p.record.ms = backend_.marker_elapsed_ms(p.begin, p.end);
    timing.ops.push_back(std::move(p.record));
  }
  pending_.clear();
  backend_.clear_markers();
  return timing;
}

}  // namespace anatomy
