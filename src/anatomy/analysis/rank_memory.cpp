// rank_memory.cpp: the per-rank memory table and ranks.json.
#include "anatomy/analysis/rank_memory.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"

namespace anatomy {

namespace {

// Column headings, short enough for a table of every category.
constexpr std::array<const char*, kCategoryCount> kShortLabels = {
    "weights", "half copy", "optimizer", "gradients", "activations", "temporary", "function.", "data",
    "workspace", "comm."};

int64_t to_bytes(double v) { return static_cast<int64_t>(std::llround(v)); }

RankMemory total_of(const std::vector<RankMemory>& ranks) {
  RankMemory total;
  for (const RankMemory& r : ranks) {
    total.peak_total += r.peak_total;
    for (size_t c = 0; c < kCategoryCount; ++c) total.at_peak[c] += r.at_peak[c];
  }
  return total;
}

nlohmann::ordered_json by_category(const CategoryBytes& bytes) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (size_t c = 0; c < kCategoryCount; ++c) out[std::string(category_name(static_cast<Category>(c)))] = bytes[c];
  return out;
}

}  // namespace

std::vector<double> rank_memory_fields(const LedgerSnapshot& ledger) {
  std::vector<double> out = {static_cast<double>(ledger.peak_total), static_cast<double>(ledger.peak_step)};
  for (size_t c = 0; c < kCategoryCount; ++c) out.push_back(static_cast<double>(ledger.at_peak[c]));
  return out;
}

RankMemory rank_memory_from_fields(int rank, const double* fields) {
  RankMemory r;
  r.rank = rank;
  r.peak_total = to_bytes(fields[0]);
  r.peak_step = to_bytes(fields[1]);
  for (size_t c = 0; c < kCategoryCount; ++c) r.at_peak[c] = to_bytes(fields[2 + c]);
  return r;
}

std::string format_rank_memory_table(const std::vector<RankMemory>& ranks) {
  ANATOMY_CHECK(!ranks.empty(), "format_rank_memory_table: no ranks");
  const RankMemory total = total_of(ranks);
  std::vector<size_t> shown;  // the categories some rank held at its peak
  for (size_t c = 0; c < kCategoryCount; ++c)
    if (total.at_peak[c] > 0) shown.push_back(c);
  constexpr int kWidth = 11;
  std::string out = "Memory per rank (the ledger at each rank's peak):\n";
  out += fmt::format("  {:<6}{:>{}}", "rank", "peak", kWidth);
  for (size_t c : shown) out += fmt::format("{:>{}}", kShortLabels[c], kWidth + 1);
  out += "  peak in step\n";
  auto line = [&](const std::string& name, const RankMemory& r, const std::string& step) {
    std::string text = fmt::format("  {:<6}{:>{}}", name, format_bytes(r.peak_total), kWidth);
    for (size_t c : shown) text += fmt::format("{:>{}}", format_bytes(r.at_peak[c]), kWidth + 1);
    return text + (step.empty() ? "" : "  " + step) + "\n";
  };
  for (const RankMemory& r : ranks)
    out += line(std::to_string(r.rank), r, r.peak_step >= 0 ? std::to_string(r.peak_step + 1) : "before the first");
  out += line("total", total, "");
  return out;
}

std::string rank_memory_json(const std::vector<RankMemory>& ranks, int zero_stage) {
  nlohmann::ordered_json j;
  j["world_size"] = ranks.size();
  j["zero_stage"] = zero_stage;
  j["ranks"] = nlohmann::ordered_json::array();
  for (const RankMemory& r : ranks)
    j["ranks"].push_back(
        {{"rank", r.rank}, {"peak", r.peak_total}, {"peak_step", r.peak_step}, {"at_peak", by_category(r.at_peak)}});
  const RankMemory total = total_of(ranks);
  // The peaks of the ranks need not be simultaneous: their sum bounds what the world held at once.
  j["total"] = {{"peak", total.peak_total}, {"at_peak", by_category(total.at_peak)}};
  return j.dump(2) + "\n";
}

std::vector<RankMemory> gather_rank_memory(distributed::Communicator& comm, const LedgerSnapshot& ledger) {
  const auto world = static_cast<size_t>(comm.world_size());
  const std::vector<double> all = distributed::gather_host(comm, rank_memory_fields(ledger));
  std::vector<RankMemory> out;
  for (size_t r = 0; r < world; ++r) out.push_back(rank_memory_from_fields(static_cast<int>(r), &all[r * kRankMemoryFields]));
  return out;
}

}  // namespace anatomy
