// rank_memory.h: the memory anatomy across the ranks of a data-parallel run:
// each rank's ledger peak and its composition at that peak, by category, and
// the sums over the ranks. Rank 0 prints it at the end of training ("Memory
// per rank") and writes it to OUTPUT_DIR/ranks.json; the numbers come from
// every rank through the communicator (gather_rank_memory below).
//
// The ranks peak at their own moments, so the total of the peaks is an upper
// bound of what the ranks held at once, not a reading of one moment.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "anatomy/core/ledger.h"
#include "anatomy/distributed/communicator.h"

namespace anatomy {

struct RankMemory {
  int rank = 0;
  int64_t peak_total = 0;    // the ledger's peak
  int64_t peak_step = -1;    // 0-based step of the peak; -1 before the first
  CategoryBytes at_peak{};   // the composition at the peak
};

// One rank's figures as numbers (to pass through the communicator's sums),
// and back: kRankMemoryFields numbers per rank.
inline constexpr size_t kRankMemoryFields = 2 + kCategoryCount;
std::vector<double> rank_memory_fields(const LedgerSnapshot& ledger);
RankMemory rank_memory_from_fields(int rank, const double* fields);

// The terminal table: a line per rank (the peak, then the categories that
// any rank held at its peak) and the total over the ranks.
std::string format_rank_memory_table(const std::vector<RankMemory>& ranks);

// ranks.json: {"world_size", "zero_stage", "ranks": [{"rank", "peak", "peak_step",
// "at_peak": {category: bytes}}], "total": {"peak", "at_peak": {...}}}.
std::string rank_memory_json(const std::vector<RankMemory>& ranks, int zero_stage);

// Every rank's ledger peak and composition at it, gathered through the
// communicator's host sums (each rank fills its own slot of a world-sized
// vector, so the sum is everyone's figures). Every rank must call it.
std::vector<RankMemory> gather_rank_memory(distributed::Communicator& comm, const LedgerSnapshot& ledger);

}  // namespace anatomy
