// communicator.h: collectives between the ranks of a data-parallel run.
//
// Two implementations: NCCL between GPUs (dist/cuda/nccl_communicator.cpp,
// when the build has CUDA and NCCL), and one through the TCP store for CPU
// tensors (store_communicator.cpp), slow but exact, so that data parallelism
// and ZeRO are tested on a CPU, in CI, with the same trainer code.
//
// Device collectives are queued: a call returns once the collective is queued
// after the work the backend has queued so far, and it runs concurrently with
// the work queued after it until wait() (which makes the backend's later work
// wait for every collective queued so far). Every rank must call the same
// collectives in the same order with the same sizes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "anatomy/core/tensor.h"
#include "anatomy/kernels/backend.h"

namespace anatomy::distributed {

class StoreClient;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "nccl 2.28.3" or "store (TCP)", for the run's header.
  virtual std::string describe() const = 0;

  // In place: the sum over the ranks of an F32 tensor.
  virtual void all_reduce_sum(const Tensor& t) = 0;
  // `out` (F32, n elements) = rank's n-element slice of the sum over ranks of
  // `in` (F32, n · world_size elements).
  virtual void reduce_scatter_sum(const Tensor& in, const Tensor& out) = 0;
  // `out` (n · world_size elements) = the `in` (n elements) of every rank, in
  // rank order. Any dtype, the same on every rank.
  virtual void all_gather(const Tensor& in, const Tensor& out) = 0;
  // `t` of rank `root` copied to every rank.
  virtual void broadcast(const Tensor& t, int root) = 0;
  // The backend's work queued from now on waits for the collectives queued so far.
  virtual void wait() = 0;
  // Collectives called between these two run together (NCCL's group calls:
  // several broadcasts from different roots at once); nothing for the store.
  virtual void group_begin() {}
  virtual void group_end() {}

  // Host numbers summed over the ranks, in rank order (the same bits on every
  // rank); blocks until every rank has given its own.
  virtual std::vector<double> sum_host(const std::vector<double>& values) = 0;
};

// Every rank's `mine` (the same count on each rank), concatenated in rank
// order, on every rank: one sum_host with each rank's values in its own slot
// and zeros in the others' (x + 0 is x, so the values come back unchanged).
inline std::vector<double> gather_host(Communicator& comm, const std::vector<double>& mine) {
  std::vector<double> slots(static_cast<size_t>(comm.world_size()) * mine.size(), 0.0);
  std::copy(mine.begin(), mine.end(), slots.begin() + static_cast<std::ptrdiff_t>(comm.rank() * mine.size()));
  return comm.sum_host(slots);
}

// Collectives through the store, for tensors in host memory (the CPU backend).
std::unique_ptr<Communicator> make_store_communicator(Backend& backend, StoreClient& store, double timeout_seconds);

// A stand-in for the memory plan, which simulates one rank of a world: no
// collective moves anything (sum_host returns `world` times the values).
std::unique_ptr<Communicator> make_simulated_communicator(int rank, int world);

// Host numbers summed over the ranks through the store (both communicators'
// sum_host): each rank posts its values under a key of this round, reads
// every rank's and sums them in rank order.
std::vector<double> store_sum_host(StoreClient& store, uint64_t round, const std::vector<double>& values,
                                   double timeout_seconds);

}  // namespace anatomy::distributed
