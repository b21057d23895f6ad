// profile.cpp: aggregation, the terminal table, JSON and the trace.
#include "anatomy/analysis/profile.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace anatomy {

const char* step_part_name(StepPart p) {
  switch (p) {
    case StepPart::Data: return "data";
    case StepPart::Forward: return "forward";
    case StepPart::Backward: return "backward";
    case StepPart::Optimizer: return "optimizer";
    case StepPart::Other: return "other";
  }
  return "other";
}

StepPart step_part_of(const std::string& phase) {
  auto starts = [&](const char* p) { return phase.rfind(p, 0) == 0; };
  if (starts("forward") || phase == "loss") return StepPart::Forward;
  if (starts("backward")) return StepPart::Backward;
  if (starts("optimizer")) return StepPart::Optimizer;
  if (starts("data")) return StepPart::Data;
  return StepPart::Other;
}

int layer_of(const std::string& phase) {
  const size_t at = phase.find("layer ");
  if (at == std::string::npos) return -1;
  size_t i = at + 6;
  if (i >= phase.size() || !std::isdigit(static_cast<unsigned char>(phase[i]))) return -1;
  int value = 0;
  while (i < phase.size() && std::isdigit(static_cast<unsigned char>(phase[i]))) value = value * 10 + (phase[i++] - '0');
  return value;
}

double ProfileSummary::executed_flops() const {
  double f = 0.0;
  for (const ClassShare& c : classes) f += c.flops;
  return f;
}

std::optional<double> ProfileSummary::fraction_of_ceiling(OpClass c, double ms, double flops, double bytes) const {
  if (!ceilings || ms <= 0.0 || c == OpClass::Communication) return std::nullopt;  // no bytes counted for it
  if (c == OpClass::Contraction)
    return ceilings->matmul_tflops > 0 ? flops / (ms * 1e9) / ceilings->matmul_tflops : std::optional<double>();
  return ceilings->copy_gbps > 0 ? bytes / (ms * 1e6) / ceilings->copy_gbps : std::optional<double>();
}

double ProfileSummary::floor_ms() const {
  if (!ceilings || ceilings->matmul_tflops <= 0 || ceilings->copy_gbps <= 0) return 0.0;
  double ms = 0.0;
  for (const ProfileRow& r : rows) {
    if (r.op_class == OpClass::Contraction)
      ms += r.flops / (ceilings->matmul_tflops * 1e9);
    else if (r.op_class == OpClass::Data || r.op_class == OpClass::Communication)
      ms += r.ms;
    else
      ms += r.bytes / (ceilings->copy_gbps * 1e6);
  }
  return ms;
}

std::optional<double> ProfileSummary::mfu() const {
  if (!peak_tflops || model_flops <= 0.0 || step_ms <= 0.0) return std::nullopt;
  return model_flops / (step_ms * 1e-3) / (*peak_tflops * 1e12);
}

ProfileSummary summarize_profile(const std::vector<StepTiming>& steps, double model_flops_per_step,
                                 std::optional<double> peak_tflops) {
  ProfileSummary s;
  s.steps = static_cast<int>(steps.size());
  s.model_flops = model_flops_per_step;
  s.peak_tflops = peak_tflops;
  if (steps.empty()) return s;
  const double n = static_cast<double>(steps.size());
  std::map<std::tuple<StepPart, std::string, std::string>, ProfileRow> rows;
  std::map<std::string, double> phase_ms;
  std::vector<std::string> phase_order;
  for (const StepTiming& step : steps) {
    s.step_ms += step.step_ms / n;
    for (const OpRecord& r : step.ops) {
      const StepPart part = step_part_of(r.phase);
      ProfileRow& row = rows[{part, r.op, r.operand}];
      row.part = part;
      row.op = r.op;
      row.operand = r.operand;
      row.op_class = r.op_class;
      row.calls += 1.0 / n;
      row.ms += r.ms / n;
      row.flops += r.flops / n;
      row.bytes += r.bytes / n;
      ClassShare& c = s.classes[static_cast<int>(r.op_class)];
      c.ms += r.ms / n;
      c.flops += r.flops / n;
      c.bytes += r.bytes / n;
      s.ops_ms += r.ms / n;
      double* part_ms = part == StepPart::Forward    ? &s.forward_ms
                        : part == StepPart::Backward ? &s.backward_ms
                        : part == StepPart::Optimizer ? &s.optimizer_ms
                        : part == StepPart::Data      ? &s.data_ms
                                                      : &s.other_ms;
      *part_ms += r.ms / n;
      if (!phase_ms.count(r.phase)) phase_order.push_back(r.phase);
      phase_ms[r.phase] += r.ms / n;
    }
  }
  for (auto& [key, row] : rows) s.rows.push_back(row);
  std::sort(s.rows.begin(), s.rows.end(), [](const ProfileRow& a, const ProfileRow& b) { return a.ms > b.ms; });
  for (const std::string& p : phase_order) s.phases.emplace_back(p, phase_ms[p]);
  return s;
}

void print_profile(const ProfileSummary& s, std::FILE* out, int top) {
  if (s.steps == 0) {
    fmt::print(out, "Profile: no step was profiled.\n");
    return;
  }
  fmt::print(out,
             "Time anatomy of a step (mean of {} profiled step{}): {:.2f} ms measured, {:.2f} ms in ops ({:.1f}%)\n",
             s.steps, s.steps == 1 ? "" : "s", s.step_ms, s.ops_ms, 100.0 * s.ops_ms / std::max(s.step_ms, 1e-9));
  fmt::print(
      out, "  forward {:.2f} ms, backward {:.2f} ms (backward/forward {:.2f}), optimizer {:.2f} ms, data {:.2f} ms{}\n",
      s.forward_ms, s.backward_ms, s.forward_ms > 0 ? s.backward_ms / s.forward_ms : 0.0, s.optimizer_ms, s.data_ms,
      s.other_ms > 0 ? fmt::format(", other {:.2f} ms", s.other_ms) : std::string());
  const double flops = std::max(s.executed_flops(), 1.0), ms = std::max(s.ops_ms, 1e-9);
  auto ceiling_text = [&](OpClass c, double op_ms, double op_flops, double op_bytes) {
    const auto f = s.fraction_of_ceiling(c, op_ms, op_flops, op_bytes);
    return f ? fmt::format("{:.0f}%", 100.0 * *f) : std::string("-");
  };
  if (s.ceilings)
    fmt::print(out, "  ceilings measured on {}: {:.1f} TFLOP/s ({} product {}^3), {:.0f} GB/s (copy, read + write)\n",
               s.ceilings->device, s.ceilings->matmul_tflops, s.ceilings->matmul_dtype, s.ceilings->matmul_size,
               s.ceilings->copy_gbps);
  fmt::print(out, "  {:<26} {:>9} {:>9} {:>10} {:>10} {:>9} {:>9}\n", "class", "% FLOPs", "% time", "ms", "TFLOP/s",
             "GB/s", "% ceiling");
  for (int c = 0; c < kOpClassCount; ++c) {
    const ClassShare& share = s.classes[c];
    if (share.ms == 0.0 && share.flops == 0.0) continue;
    fmt::print(out, "  {:<26} {:>8.2f}% {:>8.1f}% {:>10.2f} {:>10.1f} {:>9.0f} {:>9}\n",
               op_class_name(static_cast<OpClass>(c)), 100.0 * share.flops / flops, 100.0 * share.ms / ms, share.ms,
               share.ms > 0 ? share.flops / (share.ms * 1e9) : 0.0, share.ms > 0 ? share.bytes / (share.ms * 1e6) : 0.0,
               ceiling_text(static_cast<OpClass>(c), share.ms, share.flops, share.bytes));
  }
  if (const double floor = s.floor_ms(); floor > 0.0)
    fmt::print(out,
               "  at the ceilings (products at the product rate, the rest at the copy rate; data and communication as "
               "measured) the operations would take {:.2f} ms: the step is {:.2f}x that\n",
               floor, s.step_ms / floor);
  if (const double comm = s.communication_ms(); comm > 0.0)
    fmt::print(out,
               "  communication: the step waited {:.2f} ms ({:.1f}%) for exchanges between ranks that it could not "
               "overlap\n",
               comm, 100.0 * comm / std::max(s.step_ms, 1e-9));
  if (const auto mfu = s.mfu())
    fmt::print(out, "  MFU {:.1f}% ({:.1f} TFLOP/s of model FLOPs against a {:.1f} TFLOP/s bf16 peak)\n", 100.0 * *mfu,
               s.model_flops / (s.step_ms * 1e9), *s.peak_tflops);
  fmt::print(out, "  Top {} operations (all layers):\n", std::min<size_t>(top, s.rows.size()));
  fmt::print(out, "  {:<9} {:<20} {:<32} {:>6} {:>9} {:>6} {:>8} {:>8} {:>9}\n", "part", "op", "operand", "calls", "ms",
             "%", "TFLOP/s", "GB/s", "% ceiling");
  for (size_t i = 0; i < s.rows.size() && static_cast<int>(i) < top; ++i) {
    const ProfileRow& r = s.rows[i];
    fmt::print(out, "  {:<9} {:<20} {:<32} {:>6.0f} {:>9.3f} {:>5.1f}% {:>8.1f} {:>8.0f} {:>9}\n",
               step_part_name(r.part), r.op, r.operand.substr(0, 32), r.calls, r.ms, 100.0 * r.ms / ms, r.tflops(),
               r.gbps(), ceiling_text(r.op_class, r.ms, r.flops, r.bytes));
  }
}

void print_profile_line(const ProfileSummary& s, std::FILE* out) {
  if (s.steps == 0) {
    fmt::print(out, "Profile: no step was profiled.\n");
    return;
  }
  const double comm = s.communication_ms();
  fmt::print(out,
             "Time anatomy of a step (mean of {} profiled step{}): {:.2f} ms measured; forward {:.2f} ms, backward "
             "{:.2f} ms, optimizer {:.2f} ms; communication waited for {:.2f} ms ({:.1f}%)\n",
             s.steps, s.steps == 1 ? "" : "s", s.step_ms, s.forward_ms, s.backward_ms, s.optimizer_ms, comm,
             100.0 * comm / std::max(s.step_ms, 1e-9));
}

std::vector<double> rank_time_fields(const ProfileSummary& s) {
  return {s.step_ms, s.forward_ms, s.backward_ms, s.optimizer_ms, s.communication_ms()};
}

RankTime rank_time_from_fields(int rank, const double* f) {
  return RankTime{rank, f[0], f[1], f[2], f[3], f[4]};
}

std::string format_rank_time_table(const std::vector<RankTime>& ranks) {
  if (ranks.empty()) return {};
  std::string out = "Time per rank (mean of the profiled steps):\n";
  out += fmt::format("  {:<6} {:>10} {:>10} {:>10} {:>10} {:>24}\n", "rank", "step ms", "forward", "backward",
                     "optimizer", "communication waited");
  double slowest = ranks[0].step_ms, fastest = ranks[0].step_ms;
  for (const RankTime& r : ranks) {
    out += fmt::format("  {:<6} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>15.2f} ({:>5.1f}%)\n", r.rank, r.step_ms,
                       r.forward_ms, r.backward_ms, r.optimizer_ms, r.communication_ms,
                       100.0 * r.communication_ms / std::max(r.step_ms, 1e-9));
    slowest = std::max(slowest, r.step_ms);
    fastest = std::min(fastest, r.step_ms);
  }
  out += fmt::format("  the slowest rank's step is {:.2f} ms ({:.1f}%) longer than the fastest's\n", slowest - fastest,
                     100.0 * (slowest - fastest) / std::max(fastest, 1e-9));
  return out;
}

std::string profile_json(const ProfileSummary& s) {
  nlohmann::json j;
  j["profiled_steps"] = s.steps;
  j["step_ms"] = s.step_ms;
  j["ops_ms"] = s.ops_ms;
  j["forward_ms"] = s.forward_ms;
  j["backward_ms"] = s.backward_ms;
  j["optimizer_ms"] = s.optimizer_ms;
  j["data_ms"] = s.data_ms;
  j["other_ms"] = s.other_ms;
  j["backward_forward_ratio"] = s.forward_ms > 0 ? s.backward_ms / s.forward_ms : 0.0;
  j["model_flops_per_step"] = s.model_flops;
  j["peak_tflops"] = s.peak_tflops ? nlohmann::json(*s.peak_tflops) : nlohmann::json(nullptr);
  j["mfu"] = s.mfu() ? nlohmann::json(*s.mfu()) : nlohmann::json(nullptr);
  j["floor_ms"] = s.floor_ms() > 0.0 ? nlohmann::json(s.floor_ms()) : nlohmann::json(nullptr);
  if (s.ceilings)
    j["ceilings"] = {{"device", s.ceilings->device},
                     {"matmul_dtype", s.ceilings->matmul_dtype},
                     {"matmul_tflops", s.ceilings->matmul_tflops},
                     {"copy_gbps", s.ceilings->copy_gbps}};
  else
    j["ceilings"] = nullptr;
  auto fraction_json = [&](OpClass c, double ms, double flops, double bytes) {
    const auto f = s.fraction_of_ceiling(c, ms, flops, bytes);
    return f ? nlohmann::json(*f) : nlohmann::json(nullptr);
  };
  nlohmann::json classes = nlohmann::json::object();
  for (int c = 0; c < kOpClassCount; ++c)
    classes[op_class_name(static_cast<OpClass>(c))] = {
        {"ms", s.classes[c].ms},
        {"flops", s.classes[c].flops},
        {"bytes", s.classes[c].bytes},
        {"fraction_of_ceiling",
         fraction_json(static_cast<OpClass>(c), s.classes[c].ms, s.classes[c].flops, s.classes[c].bytes)}};
  j["classes"] = classes;
  if (!s.ranks.empty()) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const RankTime& r : s.ranks)
      ranks.push_back({{"rank", r.rank},
                       {"step_ms", r.step_ms},
                       {"forward_ms", r.forward_ms},
                       {"backward_ms", r.backward_ms},
                       {"optimizer_ms", r.optimizer_ms},
                       {"communication_ms", r.communication_ms}});
    j["ranks"] = ranks;
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const ProfileRow& r : s.rows)
    rows.push_back({{"part", step_part_name(r.part)},
                    {"op", r.op},
                    {"operand", r.operand},
                    {"class", op_class_name(r.op_class)},
                    {"calls", r.calls},
                    {"ms", r.ms},
                    {"flops", r.flops},
                    {"bytes", r.bytes},
                    {"fraction_of_ceiling", fraction_json(r.op_class, r.ms, r.flops, r.bytes)}});
  j["operations"] = rows;
  nlohmann::json phases = nlohmann::json::array();
  for (const auto& [phase, ms] : s.phases) phases.push_back({{"phase", phase}, {"ms", ms}});
  j["phases"] = phases;
  return j.dump(1) + "\n";
}

std::string trace_json(const std::vector<StepTiming>& steps) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", "anatomy"}}}});
  // Memory counters: the ledger's live bytes when each op began, by category
  // (the categories that hold anything in the profiled steps) and in all, an
  // event each time they change.
  std::array<bool, kCategoryCount> used{};
  for (const StepTiming& t : steps)
    for (const OpRecord& r : t.ops)
      for (size_t c = 0; c < kCategoryCount; ++c) used[c] = used[c] || r.live[c] != 0;
  std::optional<CategoryBytes> last_live;
  auto counters = [&](const CategoryBytes& live, double ts) {
    if (last_live && *last_live == live) return;
    last_live = live;
    nlohmann::json by_category = nlohmann::json::object();
    int64_t total = 0;
    for (size_t c = 0; c < kCategoryCount; ++c) {
      total += live[c];
      if (used[c]) by_category[std::string(category_name(static_cast<Category>(c)))] = live[c];
    }
    // Counters belong to the process; tid 0 is its metadata track, as every event carries one.
    events.push_back({{"name", "ledger bytes by category"}, {"ph", "C"}, {"ts", ts}, {"pid", 1}, {"tid", 0},
                      {"args", by_category}});
    events.push_back({{"name", "ledger bytes live"}, {"ph", "C"}, {"ts", ts}, {"pid", 1}, {"tid", 0},
                      {"args", {{"live", total}}}});
  };
  double offset_us = 0.0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const int tid = static_cast<int>(i) + 1;
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 1},
                      {"tid", tid},
                      {"args", {{"name", fmt::format("profiled step {}", i + 1)}}}});
    events.push_back({{"name", "step"},
                      {"cat", "step"},
                      {"ph", "X"},
                      {"ts", offset_us},
                      {"dur", steps[i].step_ms * 1e3},
                      {"pid", 1},
                      {"tid", tid}});
    for (const OpRecord& r : steps[i].ops) {
      counters(r.live, offset_us + r.start_ms * 1e3);
      events.push_back({{"name", r.operand.empty() ? r.op : fmt::format("{} {}", r.op, r.operand)},
                        {"cat", op_class_name(r.op_class)},
                        {"ph", "X"},
                        {"ts", offset_us + r.start_ms * 1e3},
                        {"dur", r.ms * 1e3},
                        {"pid", 1},
                        {"tid", tid},
                        {"args", {{"phase", r.phase}, {"flops", r.flops}, {"bytes", r.bytes}}}});
    }
    offset_us += steps[i].step_ms * 1e3;
  }
  nlohmann::json trace = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return trace.dump() + "\n";
}

}  // namespace anatomy
