// profiled_communicator.cpp: a Communicator timed by the profiling backend.
#include "anatomy/distributed/profiled_communicator.h"

#include <utility>

namespace anatomy::distributed {
namespace {

class ProfiledCommunicator final : public Communicator {
 public:
  ProfiledCommunicator(std::unique_ptr<Communicator> inner, Profiler& profiler)
      : inner_(std::move(inner)), profiler_(profiler) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string describe() const override { return inner_->describe(); }

  void all_reduce_sum(const Tensor& t) override {
    timed("all_reduce", t, [&] { inner_->all_reduce_sum(t); });
  }
  void reduce_scatter_sum(const Tensor& in, const Tensor& out) override {
    timed("reduce_scatter", in, [&] { inner_->reduce_scatter_sum(in, out); });
  }
  void all_gather(const Tensor& in, const Tensor& out) override {
    timed("all_gather", in, [&] { inner_->all_gather(in, out); });
  }
  void broadcast(const Tensor& t, int root) override {
    timed("broadcast", t, [&] { inner_->broadcast(t, root); });
  }
  void wait() override {
    profiler_.time_call("collective_wait", "queued collectives", OpClass::Communication, [&] { inner_->wait(); });
  }
  void group_begin() override { inner_->group_begin(); }
  void group_end() override { inner_->group_end(); }
  std::vector<double> sum_host(const std::vector<double>& values) override {
    std::vector<double> out;
    profiler_.time_call("host_sum", "host numbers", OpClass::Communication,
                        [&] { out = inner_->sum_host(values); });
    return out;
  }

 private:
  template <typename F>
  void timed(const char* op, const Tensor& t, F&& call) {
    profiler_.time_call(op, operand_name(t.name()), OpClass::Communication, call);
  }

  std::unique_ptr<Communicator> inner_;
  Profiler& profiler_;
};

}  // namespace

std::unique_ptr<Communicator> profile_communicator(std::unique_ptr<Communicator> inner, Profiler& profiler) {
  return std::make_unique<ProfiledCommunicator>(std::move(inner), profiler);
}

}  // namespace anatomy::distributed
