// store_communicator.cpp: collectives through the TCP store, for CPU tensors,
// and the store's host sums that the NCCL communicator uses too.
//
// Every collective is one exchange: each rank posts its bytes under a key of
// the round and reads every rank's key. A rank erases its key of round k − 2
// when it enters round k: by then every other rank has finished round k − 2
// (it posted its key of round k − 1 afterwards, and this rank read that key),
// so nobody reads the erased key again and the store stays small.
#include <cstring>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/distributed/communicator.h"
#include "anatomy/distributed/store.h"

namespace anatomy::distributed {

namespace {

std::string round_key(const char* prefix, uint64_t round, int rank) {
  return fmt::format("{}/{}/{}", prefix, round, rank);
}

// Every rank's `mine`, in rank order.
std::vector<std::string> exchange(StoreClient& store, const char* prefix, uint64_t round, std::string mine,
                                  double timeout_seconds) {
  const int rank = store.rank(), world = store.world_size();
  if (round >= 2) store.erase(round_key(prefix, round - 2, rank));
  store.set(round_key(prefix, round, rank), mine);
  std::vector<std::string> all(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    all[static_cast<size_t>(r)] = r == rank ? std::move(mine) : store.get(round_key(prefix, round, r), Seconds(timeout_seconds));
  return all;
}

class StoreCommunicator final : public Communicator {
 public:
  StoreCommunicator(Backend& backend, StoreClient& store, double timeout)
      : backend_(backend), store_(store), timeout_(timeout) {
    if (!backend.device().is_cpu())
      fail("the store's collectives move host memory; a {} backend needs NCCL", backend.device().str());
  }

  int rank() const override { return store_.rank(); }
  int world_size() const override { return store_.world_size(); }
  std::string describe() const override { return "the TCP store (CPU tensors)"; }

  void all_reduce_sum(const Tensor& t) override {
    check_f32(t, "all_reduce_sum");
    const std::vector<std::string> all = exchange_bytes(t);
    float* out = t.data<float>();
    const auto n = static_cast<size_t>(t.numel());
    sum_in_rank_order(all, 0, n, out);
  }

  void reduce_scatter_sum(const Tensor& in, const Tensor& out) override {
    check_f32(in, "reduce_scatter_sum");
    check_f32(out, "reduce_scatter_sum");
    ANATOMY_CHECK(in.numel() == out.numel() * world_size(), "reduce_scatter_sum: {} elements in, {} out, {} ranks",
                  in.numel(), out.numel(), world_size());
    const std::vector<std::string> all = exchange_bytes(in);
    const auto n = static_cast<size_t>(out.numel());
    sum_in_rank_order(all, static_cast<size_t>(rank()) * n, n, out.data<float>());
  }

  void all_gather(const Tensor& in, const Tensor& out) override {
    ANATOMY_CHECK(out.nbytes() == in.nbytes() * static_cast<size_t>(world_size()) && in.dtype() == out.dtype(),
                  "all_gather: {} bytes in, {} out, {} ranks", in.nbytes(), out.nbytes(), world_size());
    const std::vector<std::string> all = exchange_bytes(in);
    auto* dst = static_cast<char*>(out.raw());
    for (const std::string& part : all) {
      check_size(part, in.nbytes());
      std::memcpy(dst, part.data(), part.size());
      dst += part.size();
    }
  }

  void broadcast(const Tensor& t, int root) override {
    const std::vector<std::string> all =
        exchange(store_, "c", round_++, rank() == root ? bytes_of(t) : std::string(), timeout_);
    const std::string& part = all[static_cast<size_t>(root)];
    check_size(part, t.nbytes());
    if (rank() != root) std::memcpy(t.raw(), part.data(), part.size());
  }

  void wait() override {}  // every collective above has finished when it returns

  std::vector<double> sum_host(const std::vector<double>& values) override {
    return store_sum_host(store_, host_round_++, values, timeout_);
  }

 private:
  static void check_f32(const Tensor& t, const char* what) {
    ANATOMY_CHECK(t.dtype() == DType::F32, "{}: {} is {}, not f32", what, t.name(), dtype_name(t.dtype()));
  }
  static std::string bytes_of(const Tensor& t) { return std::string(static_cast<const char*>(t.raw()), t.nbytes()); }
  void check_size(const std::string& part, size_t expected) const {
    if (part.size() != expected)
      fail("a rank sent {} bytes to a collective that expects {}: the ranks run different models or settings",
           part.size(), expected);
  }
  std::vector<std::string> exchange_bytes(const Tensor& t) {
    std::vector<std::string> all = exchange(store_, "c", round_++, bytes_of(t), timeout_);
    for (const std::string& part : all) check_size(part, t.nbytes());
    return all;
  }
  // out[i] = Σ_r rank r's element (offset + i), summed from rank 0 up: the same bits everywhere.
  static void sum_in_rank_order(const std::vector<std::string>& all, size_t offset, size_t n, float* out) {
    std::vector<float> acc(n, 0.0f);
    for (const std::string& part : all) {
      const auto* x = reinterpret_cast<const float*>(part.data()) + offset;
      for (size_t i = 0; i < n; ++i) acc[i] += x[i];
    }
    std::memcpy(out, acc.data(), n * sizeof(float));
  }

  Backend& backend_;
  StoreClient& store_;
  double timeout_;
  uint64_t round_ = 0, host_round_ = 0;
};

}  // namespace

std::vector<double> store_sum_host(StoreClient& store, uint64_t round, const std::vector<double>& values,
                                   double timeout_seconds) {
  const std::string mine(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double));
  const std::vector<std::string> all = exchange(store, "h", round, mine, timeout_seconds);
  std::vector<double> sum(values.size(), 0.0);
  for (const std::string& part : all) {
    if (part.size() != mine.size())
      fail("a rank sent {} numbers to a sum that expects {}: the ranks disagree", part.size() / sizeof(double),
           values.size());
    const auto* x = reinterpret_cast<const double*>(part.data());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += x[i];
  }
  return sum;
}

namespace {
class SimulatedCommunicator final : public Communicator {
 public:
  SimulatedCommunicator(int rank, int world) : rank_(rank), world_(world) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string describe() const override { return "simulated"; }
  void all_reduce_sum(const Tensor&) override {}
  void reduce_scatter_sum(const Tensor&, const Tensor&) override {}
  void all_gather(const Tensor&, const Tensor&) override {}
  void broadcast(const Tensor&, int) override {}
  void wait() override {}
  std::vector<double> sum_host(const std::vector<double>& values) override {
    std::vector<double> out = values;
    for (double& v : out) v *= world_;
    return out;
  }

 private:
  int rank_, world_;
};
}  // namespace

std::unique_ptr<Communicator> make_simulated_communicator(int rank, int world) {
  ANATOMY_CHECK(world >= 1 && rank >= 0 && rank < world, "simulated communicator: rank {} of {}", rank, world);
  return std::make_unique<SimulatedCommunicator>(rank, world);
}

std::unique_ptr<Communicator> make_store_communicator(Backend& backend, StoreClient& store, double timeout_seconds) {
  return std::make_unique<StoreCommunicator>(backend, store, timeout_seconds);
}


}  // namespace anatomy::distributed
