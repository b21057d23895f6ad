// report.cpp: the ledger as a table with bars.
#include "anatomy/cli/report.h"

#include <algorithm>

#include <fmt/format.h>

namespace anatomy::cli {

void print_ledger(const LedgerSnapshot& m, Device device) {
  fmt::print("Memory ledger on {}: peak {} during \"{}\"\n", device.str(), format_bytes(m.peak_total), m.peak_phase);
  fmt::print("  {:<18} {:>12} {:>12}\n", "category", "at peak", "own peak");
  const int64_t scale = std::max<int64_t>(m.peak_total, 1);
  for (size_t c = 0; c < kCategoryCount; ++c) {
    const int bar = static_cast<int>(24 * m.at_peak[c] / scale);
    fmt::print("  {:<18} {:>12} {:>12}  {}\n", category_name(static_cast<Category>(c)), format_bytes(m.at_peak[c]),
               format_bytes(m.peak[c]), std::string(bar, '#'));
  }
}

}  // namespace anatomy::cli
