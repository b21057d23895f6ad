// nccl_communicator.h: collectives between GPUs through NCCL (only in builds
// with CUDA and NCCL: ANATOMY_HAVE_NCCL).
#pragma once

#include <memory>

#include "anatomy/distributed/communicator.h"

namespace anatomy::distributed {

// NCCL among the ranks of `store`'s world, on the GPU of `backend` (a CUDA
// backend): rank 0 makes the unique id and passes it through the store. The
// collectives run on a stream of their own, after the work queued on the
// backend's stream when they are called. `version` of the library loaded.
std::unique_ptr<Communicator> make_nccl_communicator(Backend& backend, StoreClient& store, double timeout_seconds);

// The device memory NCCL took for itself when the communicator was made
// (measured with cudaMemGetInfo around its initialisation): buffers outside
// the ledger's allocator, reported as communication.
int64_t nccl_own_bytes(const Communicator& communicator);

}  // namespace anatomy::distributed
