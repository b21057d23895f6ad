// nccl_communicator.cpp: the Communicator of GPUs, through NCCL.
#include "anatomy/distributed/cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/distributed/store.h"
#include "anatomy/kernels/cuda/cuda_device.h"

namespace anatomy::distributed {

namespace {

void nccl_check(ncclResult_t result, const char* what) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  fail("NCCL: {} failed: {} ({})", what, ncclGetErrorString(result), ncclGetLastError(nullptr));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I64: return ncclInt64;
    case DType::U8: return ncclUint8;
    default: break;
  }
  fail("NCCL: no collective for {} tensors", dtype_name(dtype));
}

// EngineOptions::nccl_high_priority (a diagnostic): off, NCCL's stream has
// the default priority, as the compute stream; on, the device's greatest, so
// that the blocks of a collective are scheduled ahead of the compute kernels'
// waiting blocks.
int stream_priority(const EngineOptions& options) {
  if (!options.nccl_high_priority) return 0;
  int least = 0, greatest = 0;
  ANATOMY_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return greatest;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Backend& backend, StoreClient& store, double timeout)
      : store_(store), timeout_(timeout), compute_(static_cast<cudaStream_t>(backend.native_stream())) {
    if (compute_ == nullptr || backend.device().is_cpu())
      fail("NCCL needs a CUDA backend; this one runs on {}", backend.device().str());
    ANATOMY_CUDA_CHECK(cudaSetDevice(backend.device().index));
    const int priority = stream_priority(backend.options());
    ncclUniqueId id;
    if (store.rank() == 0) {
      nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store.set("nccl/unique_id", std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
    } else {
      const std::string bytes = store.get("nccl/unique_id", Seconds(timeout));
      if (bytes.size() != sizeof(id)) fail("NCCL: the unique id from rank 0 has {} bytes, not {}", bytes.size(), sizeof(id));
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
    // The warm-up's buffer comes from the pool before the measurement, so that only NCCL's own memory is counted.
    const Tensor probe = Tensor::empty(backend.ledger(), {64}, DType::F32, Category::Communication, "nccl_warm_up");
    ANATOMY_CUDA_CHECK(cudaDeviceSynchronize());
    size_t free_before = 0, free_after = 0, total = 0;
    ANATOMY_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
    nccl_check(ncclCommInitRank(&comm_, store.world_size(), id, store.rank()), "ncclCommInitRank");
    ANATOMY_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority));
    ANATOMY_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    ANATOMY_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    // One collective forces NCCL to set up its channels and buffers now, so that the
    // memory it takes is measured here rather than in the middle of a step.
    {
      nccl_check(ncclAllReduce(probe.raw(), probe.raw(), 64, ncclFloat32, ncclSum, comm_, stream_),
                 "ncclAllReduce (warm-up)");
      ANATOMY_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    ANATOMY_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
    own_bytes_ = free_before > free_after ? static_cast<int64_t>(free_before - free_after) : 0;
    int version = 0;
    ncclGetVersion(&version);
    version_ = fmt::format("NCCL {}.{}.{}", version / 10000, (version / 100) % 100, version % 100);
  }

  ~NcclCommunicator() override {
    if (stream_) cudaStreamSynchronize(stream_);
    if (comm_) ncclCommDestroy(comm_);
    if (ready_) cudaEventDestroy(ready_);
    if (done_) cudaEventDestroy(done_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return store_.rank(); }
  int world_size() const override { return store_.world_size(); }
  std::string describe() const override { return version_; }
  int64_t own_bytes() const { return own_bytes_; }

  void all_reduce_sum(const Tensor& t) override {
    ANATOMY_CHECK(t.dtype() == DType::F32, "all_reduce_sum: {} is {}", t.name(), dtype_name(t.dtype()));
    after_compute();
    nccl_check(ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), ncclFloat32, ncclSum, comm_, stream_),
               "ncclAllReduce");
  }

  void reduce_scatter_sum(const Tensor& in, const Tensor& out) override {
    ANATOMY_CHECK(in.dtype() == DType::F32 && out.dtype() == DType::F32 && in.numel() == out.numel() * world_size(),
                  "reduce_scatter_sum: {} elements in, {} out, {} ranks", in.numel(), out.numel(), world_size());
    after_compute();
    nccl_check(ncclReduceScatter(in.raw(), out.raw(), static_cast<size_t>(out.numel()), ncclFloat32, ncclSum, comm_,
                                 stream_),
               "ncclReduceScatter");
  }

  void all_gather(const Tensor& in, const Tensor& out) override {
    ANATOMY_CHECK(in.dtype() == out.dtype() && out.numel() == in.numel() * world_size(),
                  "all_gather: {} elements in, {} out, {} ranks", in.numel(), out.numel(), world_size());
    after_compute();
    nccl_check(ncclAllGather(in.raw(), out.raw(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()), comm_,
                             stream_),
               "ncclAllGather");
  }

  void broadcast(const Tensor& t, int root) override {
    after_compute();
    nccl_check(ncclBroadcast(t.raw(), t.raw(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), root, comm_,
                             stream_),
               "ncclBroadcast");
  }

  void group_begin() override { nccl_check(ncclGroupStart(), "ncclGroupStart"); }
  void group_end() override { nccl_check(ncclGroupEnd(), "ncclGroupEnd"); }

  void wait() override {
    if (!pending_) return;
    ANATOMY_CUDA_CHECK(cudaEventRecord(done_, stream_));
    ANATOMY_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
    pending_ = false;
  }

  std::vector<double> sum_host(const std::vector<double>& values) override {
    return store_sum_host(store_, host_round_++, values, timeout_);
  }

 private:
  // The next collective starts after everything queued on the compute stream so far.
  void after_compute() {
    ANATOMY_CUDA_CHECK(cudaEventRecord(ready_, compute_));
    ANATOMY_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
    pending_ = true;
  }

  StoreClient& store_;
  double timeout_;
  cudaStream_t compute_ = nullptr, stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  ncclComm_t comm_ = nullptr;
  bool pending_ = false;
  uint64_t host_round_ = 0;
  int64_t own_bytes_ = 0;
  std::string version_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Backend& backend, StoreClient& store, double timeout_seconds) {
  return std::make_unique<NcclCommunicator>(backend, store, timeout_seconds);
}

int64_t nccl_own_bytes(const Communicator& communicator) {
  const auto* nccl = dynamic_cast<const NcclCommunicator*>(&communicator);
  return nccl ? nccl->own_bytes() : 0;
}

}  // namespace anatomy::distributed
