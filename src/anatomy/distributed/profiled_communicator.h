// profiled_communicator.h: what the exchanges between ranks cost a profiled
// step. `anatomy profile` under `anatomy launch` wraps each rank's
// communicator in this one, which forwards every call and times it as an op of
// class "communication" on the profiling backend, the way that backend times
// its own ops: two markers on the compute stream around the call.
//
// What that measures is the communication the step could not hide. On a GPU a
// collective is queued on NCCL's stream and its call costs the compute stream
// nothing (its row shows the calls, near 0 ms); the compute stream stalls only
// at wait(), until the collectives queued so far are done, and at the host's
// exchanges (sum_host), so those rows carry the time that overlapping did not
// hide. Through the store (CPU ranks) every collective blocks where it is
// called, so there the collective rows carry it all.
#pragma once

#include <memory>

#include "anatomy/distributed/communicator.h"
#include "anatomy/kernels/profiling.h"

namespace anatomy::distributed {

std::unique_ptr<Communicator> profile_communicator(std::unique_ptr<Communicator> inner, Profiler& profiler);

}  // namespace anatomy::distributed
