// profile.h: the time anatomy of a training step. Takes the op timings of a
// few profiled steps (kernels/profiling.h) and answers where the milliseconds
// go: per operation (summed over layers), per class of operation (% of FLOPs
// against % of time, as "Data Movement Is All You Need" tabulates), forward
// against backward, per layer, and the step's MFU. Writes the summary as JSON
// and the steps as a trace that Perfetto and chrome://tracing open.
#pragma once

#include <array>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "anatomy/analysis/ceilings.h"
#include "anatomy/kernels/profiling.h"

namespace anatomy {

// Where in the step an op ran, from the ledger's phase.
enum class StepPart { Data, Forward, Backward, Optimizer, Other };
const char* step_part_name(StepPart p);
StepPart step_part_of(const std::string& phase);
// The layer index in a phase such as "backward layer 7", or -1.
int layer_of(const std::string& phase);

// One operation of the step, over all layers: per-step means.
struct ProfileRow {
  StepPart part = StepPart::Other;
  std::string op, operand;
  OpClass op_class = OpClass::Elementwise;
  double calls = 0.0, ms = 0.0, flops = 0.0, bytes = 0.0;
  double tflops() const { return ms > 0 ? flops / (ms * 1e9) : 0.0; }
  double gbps() const { return ms > 0 ? bytes / (ms * 1e6) : 0.0; }
};

struct ClassShare {
  double ms = 0.0, flops = 0.0, bytes = 0.0;
};

// One rank's profiled step in a data-parallel run (the table across ranks).
struct RankTime {
  int rank = 0;
  double step_ms = 0.0, forward_ms = 0.0, backward_ms = 0.0, optimizer_ms = 0.0, communication_ms = 0.0;
};

struct ProfileSummary {
  int steps = 0;               // profiled steps averaged over
  double step_ms = 0.0;        // mean measured step time
  double ops_ms = 0.0;         // mean sum of the op times
  double forward_ms = 0.0, backward_ms = 0.0, optimizer_ms = 0.0, data_ms = 0.0, other_ms = 0.0;
  std::vector<ProfileRow> rows;                   // by time, largest first
  std::array<ClassShare, kOpClassCount> classes{};
  std::vector<std::pair<std::string, double>> phases;  // ms per phase, in step order
  double model_flops = 0.0;                        // per step (BASELINES.md's count), 0 if unknown
  std::optional<double> peak_tflops;               // the GPU's dense bf16 peak
  std::optional<Ceilings> ceilings;                // measured matrix-product and copy rates
  std::vector<RankTime> ranks;                     // every rank's step (rank 0 of a launch), else empty
  double executed_flops() const;
  // An op class's achieved rate as a fraction of the measured ceiling: FLOP
  // rate against the product's for tensor contractions, bandwidth against the
  // copy's for the others.
  std::optional<double> fraction_of_ceiling(OpClass c, double ms, double flops, double bytes) const;
  std::optional<double> mfu() const;              // model FLOPs / step time / peak
  // The time the step waited for exchanges between ranks (the communication class).
  double communication_ms() const { return classes[static_cast<size_t>(OpClass::Communication)].ms; }
  // The operations' time if each ran at its class's measured ceiling (the
  // products' FLOPs at the product rate, the other computing classes' bytes
  // at the copy rate), with the data and communication rows at their measured
  // time: a floor for this step on this device with these kernels' work. 0
  // without ceilings.
  double floor_ms() const;
};

// `model_flops_per_step`: the training FLOPs of one step's samples
// (training_flops_per_sequence × batch).
ProfileSummary summarize_profile(const std::vector<StepTiming>& steps, double model_flops_per_step,
                                 std::optional<double> peak_tflops);

// The terminal report, to `out`: totals, the class table, forward/backward, the top ops.
void print_profile(const ProfileSummary& summary, std::FILE* out, int top = 10);
// One line, to `out`: the step, its parts and the communication it waited for
// (the other ranks of a data-parallel run, whose full report rank 0 prints).
void print_profile_line(const ProfileSummary& summary, std::FILE* out);

// A rank's figures as numbers, to pass through the communicator's sums, and
// back: kRankTimeFields numbers per rank.
inline constexpr size_t kRankTimeFields = 5;
std::vector<double> rank_time_fields(const ProfileSummary& summary);
RankTime rank_time_from_fields(int rank, const double* fields);
// "Time per rank": a line per rank and the spread of the step between the
// slowest and the fastest rank.
std::string format_rank_time_table(const std::vector<RankTime>& ranks);

// JSON (summary + rows) and Chrome trace-event JSON ("X" events in µs, one
// track per profiled step); both written atomically.
std::string profile_json(const ProfileSummary& summary);
std::string trace_json(const std::vector<StepTiming>& steps);

}  // namespace anatomy
