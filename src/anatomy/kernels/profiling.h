// profiling.h: the profiler, the hook (backend.h) that times every op of a
// backend. While recording it brackets each op with two markers (CUDA
// events on the GPU, the clock on the CPU) and keeps what the op is, as the
// backend describes it (OpInfo: name, operand, class, FLOPs, bytes), with the
// phase from the ledger ("forward layer 3"), which the model sets.
//
// While not recording it does nothing: a profiled run costs nothing on the
// steps it does not profile beyond one test per op.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "anatomy/core/ledger.h"
#include "anatomy/kernels/backend.h"

namespace anatomy {

struct OpRecord {
  std::string op;       // backend op: "linear_forward", "attention_backward", ...
  std::string operand;  // what it works on, layer-free: "attention.self.query", "gelu", ...
  std::string phase;    // the ledger's phase when it ran: "forward layer 3"
  OpClass op_class = OpClass::Elementwise;
  double flops = 0.0;   // floating-point operations executed (recomputation included)
  double bytes = 0.0;   // bytes read + written, counted from the shapes
  double start_ms = 0.0;  // from the start of the step
  double ms = 0.0;
  CategoryBytes live{};   // the ledger's live bytes by category when the op began
};

struct StepTiming {
  double step_ms = 0.0;  // from the first marker of the step to its last
  std::vector<OpRecord> ops;
};

// Installs itself as `backend`'s hook for its lifetime.
class Profiler final : public OpHook {
 public:
  explicit Profiler(Backend& backend);
  ~Profiler() override;
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Starts recording a step (forgets any earlier markers).
  void begin_step();
  // Stops recording; waits for the step's work and returns its timings.
  StepTiming end_step();
  bool recording() const override { return recording_; }
  // Times `call`, work that is not one of the backend's ops but runs on its
  // stream or holds it up (a collective queued or waited for, numbers the
  // ranks exchange through the host), as an op of class `c` with no FLOPs or
  // bytes counted. While not recording it only calls it.
  void time_call(const char* op, std::string operand, OpClass c, const std::function<void()>& call);

  void begin(OpInfo info) override;
  void end() override;

 private:
  struct Pending {
    OpRecord record;
    int64_t begin = 0, end = 0;
  };

  Backend& backend_;
  OpHook* previous_ = nullptr;  // the hook it replaced, put back when it goes
  bool recording_ = false;
  int64_t step_begin_ = 0;
  Pending open_;  // the op begun and not yet ended
  std::vector<Pending> pending_;
};

}  // namespace anatomy
