// report.h: terminal rendering of the ledger.
#pragma once

#include "anatomy/core/ledger.h"

namespace anatomy::cli {

// The peak of each category, the composition at the total's peak and the phase
// in which it happened.
void print_ledger(const LedgerSnapshot& memory, Device device);

}  // namespace anatomy::cli
