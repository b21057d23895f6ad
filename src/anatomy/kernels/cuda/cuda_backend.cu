// cuda_backend.cu: CudaBackend, the Backend interface on one NVIDIA GPU.
// Matrix products go to cuBLAS in plain float32 (the seed's vanilla run) or
// TF32 when asked; every other op is a kernel of kernels.cuh. All work is queued on the
// backend's stream; ops that return a number to the host (losses, the
// gradient norm) wait for it. Memory comes from the ledger, including cuBLAS's
// workspace and the scratch space kernels need.
#include "anatomy/kernels/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "anatomy/core/error.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/kernels.cuh"

namespace anatomy::cuda {

namespace {

#define ANATOMY_CUBLAS_CHECK(call)                                                            \
  do {                                                                                        \
    cublasStatus_t anatomy_cublas_status_ = (call);                                           \
    if (anatomy_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                      \
      ::anatomy::fail("cuBLAS error in {} ({}:{}): {}", #call, __FILE__, __LINE__,            \
                      cublasGetStatusString(anatomy_cublas_status_));                         \
  } while (0)

// cuBLAS wants a workspace on Hopper of up to 32 MiB; given through the ledger.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

__global__ void broadcast_rows_kernel(const float* bias, float* out, int64_t M, int64_t N) {
  const int64_t total = M * N;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = bias[i % N];
}

void expect_gpu_f32(const Tensor& t, const char* op) {
  ANATOMY_CHECK(t.defined() && t.dtype() == DType::F32 && t.device().type == DeviceType::CUDA,
                "{}: '{}' must be a float32 tensor on the GPU", op, t.name());
}

int64_t rows_of(const Tensor& t) { return t.numel() / t.dim(-1); }

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, bool tf32) : device_(device), ledger_(Device::cuda(device), make_cuda_allocator(device)) {
    ANATOMY_CUDA_CHECK(cudaSetDevice(device));
    ANATOMY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ANATOMY_CUBLAS_CHECK(cublasCreate(&cublas_));
    ANATOMY_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    ANATOMY_CUBLAS_CHECK(cublasSetMathMode(cublas_, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    workspace_ = Tensor::empty(ledger_, {static_cast<int64_t>(kCublasWorkspaceBytes / 4)}, DType::F32,
                               Category::Temporary, "cublas_workspace");
    ANATOMY_CUBLAS_CHECK(cublasSetWorkspace(cublas_, workspace_.raw(), kCublasWorkspaceBytes));
    results_ = Tensor::empty(ledger_, {4}, DType::F32, Category::Functionality, "host_results");
  }

  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::cuda(device_); }
  Ledger& ledger() override { return ledger_; }

  void zero(const Tensor& t) override { ANATOMY_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream_)); }
  void copy_from_host(const Tensor& dst, const void* src) override {
    ANATOMY_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
    ANATOMY_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host buffer may go away after return
  }
  void copy_to_host(const Tensor& src, void* dst) override {
    ANATOMY_CUDA_CHECK(cudaMemcpyAsync(dst, src.raw(), src.nbytes(), cudaMemcpyDeviceToHost, stream_));
    ANATOMY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy(const Tensor& dst, const Tensor& src) override {
    ANATOMY_CHECK(dst.nbytes() == src.nbytes(), "copy: {} and {} differ in size", dst.name(), src.name());
    ANATOMY_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
  }

  // Row-major y[M,N] = x[M,K] · w[N,K]ᵀ is column-major yᵀ = w · xᵀ.
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& y) override {
    expect_gpu_f32(x, "linear_forward");
    const int64_t K = x.dim(-1), M = rows_of(x), N = w.dim(0);
    ANATOMY_CHECK(w.dim(1) == K && y.numel() == M * N, "linear_forward: shapes of {} {} {}", x.name(), w.name(),
                  y.name());
    float beta = 0.0f;
    if (b) {
      broadcast_rows_kernel<<<grid_for(M * N), 256, 0, stream_>>>(b->data<float>(), y.data<float>(), M, N);
      ANATOMY_CUDA_CHECK(cudaGetLastError());
      beta = 1.0f;
    }
    const float alpha = 1.0f;
    ANATOMY_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w.data<float>(), K,
                                     x.data<float>(), K, &beta, y.data<float>(), N));
  }

  void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx, const Tensor& dw,
                       const Tensor* db) override {
    const int64_t K = x.dim(-1), M = rows_of(x), N = w.dim(0);
    ANATOMY_CHECK(dy.numel() == M * N && dw.numel() == N * K, "linear_backward: shapes of {} {}", dy.name(),
                  dw.name());
    const float one = 1.0f, zero = 0.0f;
    if (dx)  // dxᵀ[K,M] = wᵀ[K,N] · dyᵀ[N,M]
      ANATOMY_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, &one, w.data<float>(), K,
                                       dy.data<float>(), N, &zero, dx->data<float>(), K));
    // dwᵀ[K,N] += xᵀ[K,M] · dy[M,N]
    ANATOMY_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, &one, x.data<float>(), K,
                                     dy.data<float>(), N, &one, dw.data<float>(), K));
    if (db) column_sums_accumulate(stream_, dy.data<float>(), M, N, db->data<float>());
  }

  void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out, bool accumulate) override {
    cuda::embedding_forward(stream_, ids.data<int64_t>(), table.data<float>(), out.data<float>(), ids.numel(),
                            table.dim(1), accumulate);
  }
  void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t padding_idx) override {
    void* scratch = scratch_bytes(embedding_backward_scratch_bytes(ids.numel()));
    cuda::embedding_backward(stream_, ids.data<int64_t>(), dout.data<float>(), dtable.data<float>(), ids.numel(),
                             dtable.dim(1), dtable.dim(0), padding_idx, scratch);
  }

  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                         const Tensor& mean, const Tensor& rstd) override {
    cuda::layernorm_forward(stream_, x.data<float>(), gamma.data<float>(), beta.data<float>(), eps, y.data<float>(),
                            mean.data<float>(), rstd.data<float>(), rows_of(x), x.dim(-1));
  }
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                          const Tensor& gamma, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) override {
    void* scratch = scratch_bytes(layernorm_backward_scratch_bytes(rows_of(x), x.dim(-1)));
    cuda::layernorm_backward(stream_, dy.data<float>(), x.data<float>(), mean.data<float>(), rstd.data<float>(),
                             gamma.data<float>(), dx.data<float>(), dgamma.data<float>(), dbeta.data<float>(),
                             rows_of(x), x.dim(-1), scratch);
  }

  void add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    cuda::add(stream_, a.data<float>(), b.data<float>(), out.data<float>(), a.numel());
  }
  void add_inplace(const Tensor& dst, const Tensor& src) override {
    cuda::add_inplace(stream_, dst.data<float>(), src.data<float>(), dst.numel());
  }
  void activation_forward(ActivationKind kind, const Tensor& x, const Tensor& y) override {
    cuda::activation_forward(stream_, kind, x.data<float>(), y.data<float>(), x.numel());
  }
  void activation_backward(ActivationKind kind, const Tensor& saved, const Tensor& dy, const Tensor& dx) override {
    cuda::activation_backward(stream_, kind, saved.data<float>(), dy.data<float>(), dx.data<float>(), saved.numel());
  }
  void dropout(const Tensor& x, const Tensor& y, const DropoutSpec& spec) override {
    cuda::dropout(stream_, x.data<float>(), y.data<float>(), x.numel(), spec);
  }
  void select_row(const Tensor& x, int64_t row, const Tensor& out) override {
    cuda::select_row(stream_, x.data<float>(), x.dim(0), x.dim(1), x.dim(2), row, out.data<float>());
  }
  void select_row_backward(const Tensor& dout, int64_t row, const Tensor& dx) override {
    cuda::select_row_backward(stream_, dout.data<float>(), dx.dim(0), dx.dim(1), dx.dim(2), row, dx.data<float>());
  }

  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, int64_t heads,
                         double scale, const DropoutSpec& dropout, const Tensor& probs, const Tensor& ctx) override {
    const int64_t B = q.dim(0), L = q.dim(1), D = q.dim(2) / heads;
    void* scratch = scratch_bytes(attention_scratch_bytes(B, heads, L));
    cuda::attention_forward(stream_, cublas_, q.data<float>(), k.data<float>(), v.data<float>(),
                            key_mask.defined() ? key_mask.data<int64_t>() : nullptr, B, L, heads, D, scale, dropout,
                            probs.data<float>(), ctx.data<float>(), scratch);
  }
  void attention_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                          int64_t heads, double scale, const DropoutSpec& dropout, const Tensor& dq, const Tensor& dk,
                          const Tensor& dv) override {
    const int64_t B = q.dim(0), L = q.dim(1), D = q.dim(2) / heads;
    void* scratch = scratch_bytes(attention_scratch_bytes(B, heads, L));
    cuda::attention_backward(stream_, cublas_, dctx.data<float>(), q.data<float>(), k.data<float>(), v.data<float>(),
                             probs.data<float>(), B, L, heads, D, scale, dropout, dq.data<float>(), dk.data<float>(),
                             dv.data<float>(), scratch);
  }

  double cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& dlogits) override {
    cuda::cross_entropy(stream_, logits.data<float>(), labels.data<int64_t>(), dlogits.data<float>(), result_slot(),
                        logits.dim(0), logits.dim(1));
    return read_result();
  }
  double mse(const Tensor& logits, const Tensor& targets, const Tensor& dlogits) override {
    cuda::mse(stream_, logits.data<float>(), targets.data<float>(), dlogits.data<float>(), result_slot(),
              logits.numel());
    return read_result();
  }
  double bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor& dlogits) override {
    cuda::bce_with_logits(stream_, logits.data<float>(), targets.data<float>(), dlogits.data<float>(), result_slot(),
                          logits.numel());
    return read_result();
  }

  double sum_of_squares(const Tensor& t) override {
    void* scratch = scratch_bytes(sum_of_squares_scratch_bytes(t.numel()));
    cuda::sum_of_squares(stream_, t.data<float>(), t.numel(), result_slot(), scratch);
    return read_result();
  }
  void scale(const Tensor& t, double factor) override {
    cuda::scale(stream_, t.data<float>(), static_cast<float>(factor), t.numel());
  }
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const AdamWHyper& hyper) override {
    cuda::adamw_step(stream_, param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
                     exp_avg_sq.data<float>(), param.numel(), hyper);
  }

  void synchronize() override { ANATOMY_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  static unsigned grid_for(int64_t n) {
    return static_cast<unsigned>(std::clamp<int64_t>((n + 255) / 256, 1, 132 * 16));
  }

  // Scratch space shared by ops (one op at a time on the stream), grown on
  // demand and kept; the ledger counts it as temporary memory.
  void* scratch_bytes(size_t bytes) {
    if (bytes == 0) return nullptr;
    if (!scratch_.defined() || scratch_.nbytes() < bytes) {
      synchronize();  // a queued op may still read the old scratch
      scratch_ = Tensor();
      const int64_t words = static_cast<int64_t>((bytes + 255) / 256 * 256 / 4);
      scratch_ = Tensor::empty(ledger_, {words}, DType::F32, Category::Temporary, "kernel_scratch");
    }
    return scratch_.raw();
  }

  double* result_slot() { return static_cast<double*>(results_.raw()); }
  double read_result() {
    double value = 0.0;
    ANATOMY_CUDA_CHECK(cudaMemcpyAsync(&value, results_.raw(), sizeof(double), cudaMemcpyDeviceToHost, stream_));
    ANATOMY_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return value;
  }

  int device_;
  Ledger ledger_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  Tensor workspace_;
  Tensor scratch_;
  Tensor results_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, bool tf32) {
  if (device < 0 || device >= device_count()) fail("--device cuda:{}: no such GPU ({} visible)", device, device_count());
  return std::make_unique<CudaBackend>(device, tf32);
}

}  // namespace anatomy::cuda
