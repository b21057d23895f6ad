// cuda_backend.cu: CudaBackend, the Backend interface on one NVIDIA GPU.
// Matrix products go to cuBLAS in plain float32 (the seed's vanilla run) or
// TF32 when asked; every other op is a kernel of kernels.cuh. All work is queued on the
// backend's stream; ops that return a number to the host (losses, the
// gradient norm) wait for it. Memory comes from the ledger, including cuBLAS's
// workspace and the scratch space kernels need.
//
// The meta backend (kernels/meta/meta_backend.cpp) runs the model without
// computing and allocates, through its ledger, exactly what this backend
// allocates for itself. Each op's path and the memory that path takes are
// decided once, in kernels/cuda_memory.h (the *_choice and *_path functions,
// the sizes, the temporaries' names), and both backends act on that decision;
// what is left to keep in step by hand is the order of an op's allocations
// and the ops an unfused path calls (tests/gpu/test_meta_backend_cuda.cpp
// compares the two ledgers).
#include "anatomy/kernels/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <nvtx3/nvToolsExt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "anatomy/core/error.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/first_query_attention.cuh"
#include "anatomy/kernels/cuda/flash_attention.cuh"
#include "anatomy/kernels/cuda/flash_attention_f32.cuh"
#include "anatomy/kernels/cuda/hopper_attention.cuh"
#ifdef ANATOMY_HAVE_CUDNN
#include "anatomy/kernels/cuda/cudnn_attention.h"
#endif
#include "anatomy/kernels/cuda/fused.cuh"
#include "anatomy/kernels/cuda/kernels.cuh"
#include "anatomy/kernels/cuda/mixed.cuh"
#include "anatomy/kernels/cuda/optimizer_kernels.cuh"
#include "anatomy/kernels/cuda_memory.h"
#include "anatomy/kernels/gemm_tuning_cache.h"

namespace anatomy::cuda {

namespace {

#define ANATOMY_CUBLAS_CHECK(call)                                                            \
  do {                                                                                        \
    cublasStatus_t anatomy_cublas_status_ = (call);                                           \
    if (anatomy_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                      \
      ::anatomy::fail("cuBLAS error in {} ({}:{}): {}", #call, __FILE__, __LINE__,            \
                      cublasGetStatusString(anatomy_cublas_status_));                         \
  } while (0)

__global__ void broadcast_rows_kernel(const float* bias, float* out, int64_t M, int64_t N) {
  const int64_t total = M * N;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = bias[i % N];
}

int64_t rows_of(const Tensor& t) { return t.numel() / t.dim(-1); }

// A strided batch of products for cuBLASLt: `count` products whose A, B, C
// (and bias) are `stride_*` elements apart (0: the same matrix for all).
struct Batch {
  int count = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0, stride_bias = 0;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, Fp32Products fp32_products)
      : device_(device), ledger_(Device::cuda(device), make_cuda_allocator(device)), fp32_products_(fp32_products) {
    ANATOMY_CUDA_CHECK(cudaSetDevice(device));
    ANATOMY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ANATOMY_CUBLAS_CHECK(cublasCreate(&cublas_));
    ANATOMY_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    ANATOMY_CUBLAS_CHECK(cublasSetMathMode(cublas_, fp32_products == Fp32Products::Tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                                         : CUBLAS_DEFAULT_MATH));
    // The cuBLAS workspace, then the results slot (as the meta backend's constructor).
    workspace_ = Tensor::empty(ledger_, {static_cast<int64_t>(kCublasWorkspaceBytes / 4)}, DType::F32,
                               Category::Workspace, "cublas_workspace");
    ANATOMY_CUBLAS_CHECK(cublasSetWorkspace(cublas_, workspace_.raw(), kCublasWorkspaceBytes));
    ANATOMY_CUBLAS_CHECK(cublasLtCreate(&lt_));
    results_ = Tensor::empty(ledger_, {kHostResultsFloats}, DType::F32, Category::Functionality, "host_results");
  }

  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
#ifdef ANATOMY_HAVE_CUDNN
    cudnn_.reset();
#endif
    if (copy_stream_) {
      cudaStreamSynchronize(copy_stream_);
      cudaStreamDestroy(copy_stream_);
      cudaEventDestroy(compute_mark_);
      cudaEventDestroy(uploads_done_);
    }
    for (Staging& st : staging_) {
      if (st.event) cudaEventDestroy(st.event);
      if (st.host) cudaFreeHost(st.host);
    }
    for (cudaEvent_t event : markers_) cudaEventDestroy(event);
    if (tune_start_) cudaEventDestroy(tune_start_);
    if (tune_stop_) cudaEventDestroy(tune_stop_);
    for (auto& [key, plan] : lt_plans_) plan.destroy();
    cublasLtDestroy(lt_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::cuda(device_); }
  Ledger& ledger() override { return ledger_; }
  int64_t plans_tuned() const { return plans_tuned_; }

  void do_zero(const Tensor& t) override { ANATOMY_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream_)); }

  // Uploads go through a ring of pinned staging buffers on copy_stream_; a
  // buffer is refilled only after the copy that last used it has completed.
  void do_upload_async(const Tensor& dst, const void* src) override {
    const size_t bytes = dst.nbytes();
    if (bytes == 0) return;
    if (!copy_stream_) {
      ANATOMY_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
      ANATOMY_CUDA_CHECK(cudaEventCreateWithFlags(&compute_mark_, cudaEventDisableTiming));
      ANATOMY_CUDA_CHECK(cudaEventRecord(compute_mark_, stream_));
      ANATOMY_CUDA_CHECK(cudaEventCreateWithFlags(&uploads_done_, cudaEventDisableTiming));
    }
    Staging& st = staging_[next_staging_];
    next_staging_ = (next_staging_ + 1) % staging_.size();
    if (st.event) ANATOMY_CUDA_CHECK(cudaEventSynchronize(st.event));  // its previous copy is done
    else ANATOMY_CUDA_CHECK(cudaEventCreateWithFlags(&st.event, cudaEventDisableTiming));
    if (st.bytes < bytes) {
      if (st.host) ANATOMY_CUDA_CHECK(cudaFreeHost(st.host));
      st.host = nullptr;
      ANATOMY_CUDA_CHECK(cudaHostAlloc(&st.host, bytes, cudaHostAllocDefault));
      st.bytes = bytes;
    }
    std::memcpy(st.host, src, bytes);
    ANATOMY_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, compute_mark_, 0));
    ANATOMY_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), st.host, bytes, cudaMemcpyHostToDevice, copy_stream_));
    ANATOMY_CUDA_CHECK(cudaEventRecord(st.event, copy_stream_));
    ANATOMY_CUDA_CHECK(cudaEventRecord(uploads_done_, copy_stream_));
    uploads_pending_ = true;
  }
  void upload_wait() override {
    if (!copy_stream_) return;
    if (uploads_pending_) ANATOMY_CUDA_CHECK(cudaStreamWaitEvent(stream_, uploads_done_, 0));
    uploads_pending_ = false;
    ANATOMY_CUDA_CHECK(cudaEventRecord(compute_mark_, stream_));
  }
  void do_copy_from_host(const Tensor& dst, const void* src) override {
    ANATOMY_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
    ANATOMY_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host buffer may go away after return
  }
  void do_copy_to_host(const Tensor& src, void* dst) override {
    ANATOMY_CUDA_CHECK(cudaMemcpyAsync(dst, src.raw(), src.nbytes(), cudaMemcpyDeviceToHost, stream_));
    ANATOMY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void do_copy(const Tensor& dst, const Tensor& src) override {
    ANATOMY_CHECK(dst.nbytes() == src.nbytes(), "copy: {} and {} differ in size", dst.name(), src.name());
    ANATOMY_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
  }

  // Row-major y[M,N] = x[M,K] · w[N,K]ᵀ is column-major yᵀ = w · xᵀ. The
  // bias is cuBLASLt's epilogue (added in float32 before the output is
  // rounded), else a broadcast that the product accumulates onto.
  void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& y) override {
    const int64_t K = x.dim(-1), M = rows_of(x), N = w.dim(0);
    ANATOMY_CHECK(w.dim(1) == K && y.numel() == M * N, "linear_forward: shapes of {} {} {}", x.name(), w.name(),
                  y.name());
    const DType t = x.dtype();
    ANATOMY_CHECK(w.dtype() == t && y.dtype() == t && (!b || b->dtype() == t),
                  "linear_forward: {} {} {} must share one dtype", x.name(), w.name(), y.name());
    if (lt_gemm(CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, w.raw(), t, K, x.raw(), K, 0.0f, y.raw(), t, N,
                b ? b->raw() : nullptr))
      return;
    float beta = 0.0f;
    if (b) {
      if (t == DType::F32) {
        broadcast_rows_kernel<<<grid_for(M * N), 256, 0, stream_>>>(b->data<float>(), y.data<float>(), M, N);
        ANATOMY_CUDA_CHECK(cudaGetLastError());
      } else {
        broadcast_rows_half(stream_, half_type(t), b->raw(), y.raw(), M, N);
      }
      beta = 1.0f;
    }
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, w.raw(), t, K, x.raw(), t, K, beta, y.raw(), t, N);
  }

  void do_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx, const Tensor& dw,
                          const Tensor* db, bool accumulate_dx) override {
    const int64_t K = x.dim(-1), M = rows_of(x), N = w.dim(0);
    ANATOMY_CHECK(dy.numel() == M * N && (!dw.defined() || dw.numel() == N * K), "linear_backward: shapes of {} {}",
                  dy.name(), dw.name());
    const DType t = x.dtype();
    ANATOMY_CHECK(dy.dtype() == t && w.dtype() == t && (!dx || dx->dtype() == t) &&
                      (!dw.defined() || dw.dtype() == DType::F32),
                  "linear_backward: {} {} {} share one dtype and {} is float32", dy.name(), x.name(), w.name(),
                  dw.name());
    const float dx_beta = accumulate_dx ? 1.0f : 0.0f;
    if (dx && !lt_gemm(CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, w.raw(), t, K, dy.raw(), N, dx_beta, dx->raw(), t, K,
                       nullptr))  // dxᵀ[K,M] = wᵀ[K,N] · dyᵀ[N,M]
      gemm(CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, w.raw(), t, K, dy.raw(), t, N, dx_beta, dx->raw(), t, K);
    // dwᵀ[K,N] += xᵀ[K,M] · dy[M,N], accumulated in float32 whatever the inputs' type.
    if (dw.defined() &&
        !lt_gemm(CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, x.raw(), t, K, dy.raw(), N, 1.0f, dw.raw(), DType::F32, K, nullptr))
      gemm(CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, x.raw(), t, K, dy.raw(), t, N, 1.0f, dw.raw(), DType::F32, K);
    if (db) bias_gradient(dy, *db);
  }

  // db[n] += Σ_rows dy[row, n] (dy [rows, N], N = db's length, db float32).
  void bias_gradient(const Tensor& dy, const Tensor& db) {
    const int64_t N = db.numel(), M = N > 0 ? dy.numel() / N : 0;
    ANATOMY_CHECK(M * N == dy.numel() && db.dtype() == DType::F32, "bias gradient: {} is not rows of {} ({})",
                  dy.name(), N, db.name());
    const auto choice = bias_gradient_choice(dy, db);
    switch (choice.path) {
      case BiasGradientPath::Float32: return column_sums_accumulate(stream_, dy.data<float>(), M, N, db.data<float>());
      case BiasGradientPath::HalfFast:
        return column_sums_accumulate_half_fast(stream_, half_type(dy.dtype()), dy.raw(), M, N, db.data<float>(),
                                                scratch_bytes(choice.scratch));
      case BiasGradientPath::Half:
        return column_sums_accumulate_half(stream_, half_type(dy.dtype()), dy.raw(), M, N, db.data<float>());
    }
  }

  void do_residual_layernorm_forward(const Tensor& x, const Tensor& residual, const DropoutSpec& dropout,
                                     const Tensor& gamma, const Tensor& beta, double eps, const Tensor& sum,
                                     const Tensor& y, const Tensor& mean, const Tensor& rstd) override {
    ANATOMY_CHECK(x.numel() == sum.numel() && residual.numel() == sum.numel() && y.numel() == sum.numel() &&
                      x.dtype() == sum.dtype() && residual.dtype() == sum.dtype() && y.dtype() == sum.dtype(),
                  "residual_layernorm_forward: {} {} {} {} differ in size or dtype", x.name(), residual.name(),
                  sum.name(), y.name());
    const int64_t H = sum.dim(-1);
    if (fused_layernorm_supported(H, {x.raw(), residual.raw(), sum.raw(), y.raw()}))
      return residual_layernorm_forward_fused(stream_, sum.dtype(), x.raw(), residual.raw(), dropout,
                                             gamma.data<float>(), beta.data<float>(), eps, sum.raw(), y.raw(),
                                             mean.data<float>(), rstd.data<float>(), rows_of(sum), H);
    this->dropout(x, sum, dropout);
    add(sum, residual, sum);
    layernorm_forward(sum, gamma, beta, eps, y, mean, rstd);
  }

  void do_residual_layernorm_backward(const Tensor& dy, const Tensor& sum, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& gamma, const DropoutSpec& dropout, const Tensor& d_residual,
                                      const Tensor& d_x, const Tensor& dgamma, const Tensor& dbeta,
                                      const Tensor* d_bias) override {
    ANATOMY_CHECK(dy.numel() == sum.numel() && d_residual.numel() == sum.numel() && d_x.numel() == sum.numel() &&
                      dy.dtype() == sum.dtype() && d_residual.dtype() == sum.dtype() && d_x.dtype() == sum.dtype(),
                  "residual_layernorm_backward: {} {} {} {} differ in size or dtype", dy.name(), sum.name(),
                  d_residual.name(), d_x.name());
    const int64_t H = sum.dim(-1);
    ANATOMY_CHECK(!d_bias || (d_bias->numel() == H && d_bias->dtype() == DType::F32),
                  "residual_layernorm_backward: {} is not float32 [{}]", d_bias ? d_bias->name() : "", H);
    if (const auto choice = residual_layernorm_backward_choice(dy, sum, d_residual, d_x, d_bias != nullptr);
        choice.path == ResidualLayerNormPath::Fused) {
      void* scratch = scratch_bytes(choice.scratch);
      return residual_layernorm_backward_fused(stream_, sum.dtype(), dy.raw(), sum.raw(),
                                              mean.data<float>(), rstd.data<float>(), gamma.data<float>(), dropout,
                                              d_residual.raw(), d_x.raw(), dgamma.data<float>(),
                                              dbeta.data<float>(), d_bias ? d_bias->data<float>() : nullptr,
                                              rows_of(sum), H, scratch);
    }
    layernorm_backward(dy, sum, mean, rstd, gamma, d_x, dgamma, dbeta);  // d_residual may be dy
    copy(d_residual, d_x);
    this->dropout(d_x, d_x, dropout);
    if (d_bias) bias_gradient(d_x, *d_bias);
  }

  void do_linear_forward_n(const Tensor& x, const std::vector<Tensor>& w, const std::vector<Tensor>& b,
                           const std::vector<Tensor>& y) override {
    const auto sw = constant_stride(w), sb = constant_stride(b), sy = constant_stride(y);
    const int64_t K = x.dim(-1), M = rows_of(x);
    const DType t = x.dtype();
    // Batched in 16 bits only: measured on an H100 at batch 4, float32's batched
    // products ran slower than three separate ones (8.2 against 7.0 ms a step).
    if (t != DType::F32 && sw && sb && sy && w.size() == b.size() && w.size() == y.size() && w[0].dtype() == t &&
        y[0].dtype() == t &&
        b[0].dtype() == t && w[0].dim(1) == K && y[0].numel() == M * w[0].dim(0)) {
      const int64_t N = w[0].dim(0);
      Batch batch{static_cast<int>(w.size()), *sw, 0, *sy, *sb};
      if (lt_gemm(CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, w[0].raw(), t, K, x.raw(), K, 0.0f, y[0].raw(), t, N, b[0].raw(),
                  batch))
        return;
    }
    // Split TF32: x, the products' shared B operand, is split once.
    const SharedSplit shared(*this, t == DType::F32 ? SharedOperand::B : SharedOperand::None);
    Backend::do_linear_forward_n(x, w, b, y);
  }

  void do_linear_backward_weights_n(const std::vector<Tensor>& dy, const Tensor& x, const std::vector<Tensor>& w,
                                    const std::vector<Tensor>& dw, const std::vector<Tensor>& db) override {
    const int64_t K = x.dim(-1), M = rows_of(x);
    const DType t = x.dtype();
    if (const auto choice = linear_backward_weights_n_choice(dy, x, w, dw, db);
        choice.path != WeightGradientsPath::Separate) {
      const int64_t N = w[0].dim(0);
      Batch batch{static_cast<int>(dy.size()), 0, *constant_stride(dy), *constant_stride(dw), 0};
      if (lt_gemm(CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, x.raw(), t, K, dy[0].raw(), N, 1.0f, dw[0].raw(), DType::F32, K,
                  nullptr, batch)) {
        if (choice.path == WeightGradientsPath::BatchedWithBiasSums) {
          const int64_t bias = db[0].numel(), rows = dy[0].numel() / bias;
          const int planes = static_cast<int>(dy.size());
          column_sums_accumulate_half_fast(stream_, half_type(t), dy[0].raw(), rows, bias, db[0].data<float>(),
                                           scratch_bytes(choice.scratch), planes, *constant_stride(dy),
                                           *constant_stride(db));
        } else {
          for (size_t i = 0; i < dy.size(); ++i) linear_backward(dy[i], x, w[i], nullptr, Tensor(), &db[i], false);
        }
        return;
      }
    }
    // Split TF32: x, the weight gradients' shared A operand, is split once.
    const SharedSplit shared(*this, t == DType::F32 ? SharedOperand::A : SharedOperand::None);
    Backend::do_linear_backward_weights_n(dy, x, w, dw, db);
  }

  void do_embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out, bool accumulate) override {
    ANATOMY_CHECK(out.dtype() == DType::F32 && out.numel() == ids.numel() * table.dim(1),
                  "embedding_forward: {} is not float32 rows of {} for {} ids", out.name(), table.name(), ids.numel());
    if (table.dtype() != DType::F32)
      return cuda::embedding_forward_half(stream_, half_type(table.dtype()), ids.data<int64_t>(), table.raw(),
                                          out.data<float>(), ids.numel(), table.dim(1), accumulate);
    cuda::embedding_forward(stream_, ids.data<int64_t>(), table.data<float>(), out.data<float>(), ids.numel(),
                            table.dim(1), accumulate);
  }
  void do_embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                             int64_t padding_idx) override {
    void* scratch = scratch_bytes(embedding_backward_scratch_bytes(ids.numel()));
    cuda::embedding_backward(stream_, ids.data<int64_t>(), dout.data<float>(), dtable.data<float>(), ids.numel(),
                             dtable.dim(1), dtable.dim(0), padding_idx, scratch);
  }

  void do_positions_past_padding(const Tensor& ids, int64_t padding_idx, const Tensor& positions) override {
    cuda::positions_past_padding(stream_, ids.data<int64_t>(), ids.dim(0), ids.dim(1), padding_idx,
                                 positions.data<int64_t>());
  }

  void do_cast(const Tensor& src, const Tensor& dst) override {
    ANATOMY_CHECK(src.numel() == dst.numel(), "cast: {} and {} differ in size", src.name(), dst.name());
    if (src.dtype() == dst.dtype()) return copy(dst, src);
    if (src.dtype() == DType::F32)
      cast_f32_to_half(stream_, half_type(dst.dtype()), src.data<float>(), dst.raw(), src.numel());
    else if (dst.dtype() == DType::F32)
      cast_half_to_f32(stream_, half_type(src.dtype()), src.raw(), dst.data<float>(), src.numel());
    else
      ANATOMY_CHECK(false, "cast from {} to {}", dtype_name(src.dtype()), dtype_name(dst.dtype()));
  }

  // The embeddings block in one kernel each way where the shapes allow
  // (embedding_norm.cu); otherwise Backend's sequence of ops, whose own ops
  // reject what does not fit with their errors.
  static bool norm_params_fit(const Tensor& a, const Tensor& b, int64_t H) {
    return a.dtype() == DType::F32 && b.dtype() == DType::F32 && a.numel() == H && b.numel() == H;
  }
  static bool floating(const Tensor& t) {
    return t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16;
  }
  static bool stats_fit(const Tensor& mean, const Tensor& rstd, int64_t rows) {
    return mean.dtype() == DType::F32 && rstd.dtype() == DType::F32 && mean.numel() == rows && rstd.numel() == rows;
  }
  void do_embeddings_layernorm_forward(const Tensor& ids, const Tensor& positions, const Tensor& token_types,
                                       const Tensor& word, const Tensor& position, const Tensor& token_type,
                                       const Tensor& gamma, const Tensor& beta, double eps, const DropoutSpec& dropout,
                                       const Tensor& sum, const Tensor& mean, const Tensor& rstd, const Tensor& work,
                                       const Tensor& out) override {
    const int64_t H = sum.dim(-1), rows = rows_of(sum);
    const bool types = token_type.defined();  // false: a model without token types
    const bool fused =
        position.defined() && word.dtype() == DType::F32 && position.dtype() == DType::F32 && sum.dtype() == DType::F32 &&
        work.dtype() == DType::F32 && out.numel() == sum.numel() && floating(out) && word.dim(-1) == H &&
        position.dim(-1) == H && ids.numel() == rows && positions.numel() == rows && ids.dtype() == DType::I64 &&
        positions.dtype() == DType::I64 &&
        (!types || (token_type.dtype() == DType::F32 && token_type.dim(-1) == H && token_types.numel() == rows &&
                    token_types.dtype() == DType::I64)) &&
        norm_params_fit(gamma, beta, H) && stats_fit(mean, rstd, rows) &&
        embeddings_layernorm_fused_supported(H, {word.raw(), position.raw(), token_type.raw(), sum.raw(), out.raw()});
    if (!fused)
      return embeddings_layernorm_forward_unfused(ids, positions, token_types, word, position, token_type, gamma,
                                                   beta, eps, dropout, sum, mean, rstd, work, out);
    cuda::embeddings_layernorm_forward_fused(stream_, out.dtype(), ids.data<int64_t>(), positions.data<int64_t>(),
                                             types ? token_types.data<int64_t>() : nullptr, word.data<float>(),
                                             position.data<float>(), types ? token_type.data<float>() : nullptr, gamma.data<float>(), beta.data<float>(), eps,
                                             dropout, sum.data<float>(), out.raw(), mean.data<float>(),
                                             rstd.data<float>(), rows, H);
  }
  void do_embeddings_layernorm_backward(const Tensor& dout, const Tensor& sum, const Tensor& mean, const Tensor& rstd,
                                        const Tensor& gamma, const DropoutSpec& dropout, const Tensor& work,
                                        const Tensor& d_sum, const Tensor& dgamma, const Tensor& dbeta) override {
    const int64_t H = sum.dim(-1), rows = rows_of(sum);
    const bool fused = sum.dtype() == DType::F32 && work.dtype() == DType::F32 && d_sum.dtype() == DType::F32 &&
                       floating(dout) &&
                       dout.numel() == sum.numel() && work.numel() == sum.numel() && d_sum.numel() == sum.numel() &&
                       norm_params_fit(gamma, dgamma, H) && dbeta.dtype() == DType::F32 && dbeta.numel() == H &&
                       stats_fit(mean, rstd, rows) &&
                       embeddings_layernorm_fused_supported(H, {dout.raw(), sum.raw(), work.raw(), d_sum.raw()});
    if (!fused)
      return embeddings_layernorm_backward_unfused(dout, sum, mean, rstd, gamma, dropout, work, d_sum, dgamma,
                                                    dbeta);
    // The plain path's scratch too (Backend's sequence, whose layernorm_backward asks the same).
    void* scratch = scratch_bytes(layernorm_backward_scratch_bytes(rows, H));
    cuda::embeddings_layernorm_backward_fused(stream_, dout.dtype(), dout.raw(), sum.data<float>(), mean.data<float>(),
                                              rstd.data<float>(), gamma.data<float>(), dropout, work.data<float>(),
                                              d_sum.data<float>(), dgamma.data<float>(), dbeta.data<float>(), rows, H,
                                              scratch);
  }

  void do_layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                            const Tensor& mean, const Tensor& rstd) override {
    if (x.dtype() != DType::F32) {
      ANATOMY_CHECK(y.dtype() == x.dtype(), "layernorm_forward: {} and {} differ in dtype", x.name(), y.name());
      return cuda::layernorm_forward_half(stream_, half_type(x.dtype()), x.raw(), gamma.data<float>(),
                                          beta.data<float>(), eps, y.raw(), mean.data<float>(), rstd.data<float>(),
                                          rows_of(x), x.dim(-1));
    }
    cuda::layernorm_forward(stream_, x.data<float>(), gamma.data<float>(), beta.data<float>(), eps, y.data<float>(),
                            mean.data<float>(), rstd.data<float>(), rows_of(x), x.dim(-1));
  }
  void do_layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                             const Tensor& gamma, const Tensor& dx, const Tensor& dgamma,
                             const Tensor& dbeta) override {
    void* scratch = scratch_bytes(layernorm_backward_scratch_bytes(rows_of(x), x.dim(-1)));
    if (x.dtype() != DType::F32)
      return cuda::layernorm_backward_half(stream_, half_type(x.dtype()), dy.raw(), x.raw(), mean.data<float>(),
                                           rstd.data<float>(), gamma.data<float>(), dx.raw(), dgamma.data<float>(),
                                           dbeta.data<float>(), rows_of(x), x.dim(-1), scratch);
    cuda::layernorm_backward(stream_, dy.data<float>(), x.data<float>(), mean.data<float>(), rstd.data<float>(),
                             gamma.data<float>(), dx.data<float>(), dgamma.data<float>(), dbeta.data<float>(),
                             rows_of(x), x.dim(-1), scratch);
  }

  void do_add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    if (a.dtype() != DType::F32) return add_half(stream_, half_type(a.dtype()), a.raw(), b.raw(), out.raw(), a.numel());
    cuda::add(stream_, a.data<float>(), b.data<float>(), out.data<float>(), a.numel());
  }
  void do_add_inplace(const Tensor& dst, const Tensor& src) override {
    if (dst.dtype() != DType::F32)
      return add_inplace_half(stream_, half_type(dst.dtype()), dst.raw(), src.raw(), dst.numel());
    cuda::add_inplace(stream_, dst.data<float>(), src.data<float>(), dst.numel());
  }
  void do_activation_forward(ActivationKind kind, const Tensor& x, const Tensor& y) override {
    if (x.dtype() != DType::F32 && (kind == ActivationKind::GeluErf || kind == ActivationKind::GeluTanh))
      return gelu_forward_half(stream_, half_type(x.dtype()), kind, x.raw(), y.raw(), x.numel());
    if (x.dtype() != DType::F32)
      return activation_forward_half(stream_, half_type(x.dtype()), kind, x.raw(), y.raw(), x.numel());
    cuda::activation_forward(stream_, kind, x.data<float>(), y.data<float>(), x.numel());
  }
  void do_activation_backward(ActivationKind kind, const Tensor& saved, const Tensor& dy, const Tensor& dx) override {
    if (saved.dtype() != DType::F32)
      return activation_backward_half(stream_, half_type(saved.dtype()), kind, saved.raw(), dy.raw(), dx.raw(),
                                      saved.numel());
    cuda::activation_backward(stream_, kind, saved.data<float>(), dy.data<float>(), dx.data<float>(), saved.numel());
  }
  void do_activation_backward_recompute(ActivationKind kind, const Tensor& x, const Tensor& dy, const Tensor& dx,
                                        const Tensor& y, const Tensor* d_bias) override {
    ANATOMY_CHECK(kind != ActivationKind::Tanh, "activation_backward_recompute: tanh saves its output, not its input");
    ANATOMY_CHECK(x.numel() == dy.numel() && x.numel() == dx.numel() && x.numel() == y.numel() &&
                      dy.dtype() == x.dtype() && dx.dtype() == x.dtype() && y.dtype() == x.dtype(),
                  "activation_backward_recompute: {} {} {} {} differ in size or dtype", x.name(), dy.name(), dx.name(),
                  y.name());
    const int64_t N = x.dim(-1);
    ANATOMY_CHECK(!d_bias || (d_bias->numel() == N && d_bias->dtype() == DType::F32),
                  "activation_backward_recompute: {} is not float32 [{}]", d_bias ? d_bias->name() : "", N);
    if (const auto choice = activation_backward_recompute_choice(x, dy, dx, y, d_bias != nullptr);
        choice.path == RecomputePath::WithBias)
      return activation_backward_recompute_bias(stream_, x.dtype(), kind, x.raw(), dy.raw(), dx.raw(), y.raw(),
                                                rows_of(x), N, d_bias->data<float>(), scratch_bytes(choice.scratch));
    if (x.dtype() != DType::F32) {
      activation_backward_recompute_half(stream_, half_type(x.dtype()), kind, x.raw(), dy.raw(), dx.raw(), y.raw(),
                                         x.numel());
    } else {
      activation_forward(kind, x, y);
      activation_backward(kind, x, dy, dx);
    }
    if (d_bias) bias_gradient(dx, *d_bias);
  }

  void do_dropout(const Tensor& x, const Tensor& y, const DropoutSpec& spec) override {
    if (x.dtype() != DType::F32) return dropout_half(stream_, half_type(x.dtype()), x.raw(), y.raw(), x.numel(), spec);
    cuda::dropout(stream_, x.data<float>(), y.data<float>(), x.numel(), spec);
  }
  void do_select_row(const Tensor& x, int64_t row, const Tensor& out) override {
    if (x.dtype() != DType::F32)
      return select_row_half(stream_, half_type(x.dtype()), x.raw(), x.dim(0), x.dim(1), x.dim(2), row, out.raw());
    cuda::select_row(stream_, x.data<float>(), x.dim(0), x.dim(1), x.dim(2), row, out.data<float>());
  }
  void do_select_row_backward(const Tensor& dout, int64_t row, const Tensor& dx) override {
    if (dx.dtype() != DType::F32)
      return select_row_backward_half(stream_, half_type(dx.dtype()), dout.raw(), dx.dim(0), dx.dim(1), dx.dim(2), row,
                                      dx.raw());
    cuda::select_row_backward(stream_, dout.data<float>(), dx.dim(0), dx.dim(1), dx.dim(2), row, dx.data<float>());
  }

  void do_mask_rows(const Tensor& x, const Tensor& mask) override {
    cuda::mask_rows(stream_, x.dtype() == DType::F32 ? std::optional<Half>() : std::optional<Half>(half_type(x.dtype())),
                    x.raw(), mask.data<int64_t>(), x.dim(0) * x.dim(1), x.dim(2));
  }

  // Attention is fused (flash: no [B, heads, L, L] probabilities kept) for the
  // head sizes the kernels have: 32, 64, 128 in 16 bits, 32 and 64 in float32
  // (CUDA-core FMA, no TF32): fused_attention of cuda_memory.h. Other sizes
  // take the materialised float32 path (through casts for 16-bit data).
  bool attention_saves_probabilities(DType dtype, int64_t head_dim) const override {
    return !fused_attention(dtype, head_dim);
  }
  // The Hopper kernels, where the options allow them (--attention), the
  // device runs them (sm_90a) and the shape fits, come before cuDNN; with
  // dropout they keep the forward's mask as bits in `saved`.
  bool hopper_attention(DType dtype, int64_t head_dim, int64_t L) const {
    return hopper_attention_runs(dtype, head_dim, L, options(), [&] { return hopper_attention_available(head_dim); });
  }
  bool attention_keeps_dropout_bits(DType dtype, int64_t head_dim, int64_t L) const override {
    return hopper_attention(dtype, head_dim, L);
  }
  // The parts of a Hopper path's `saved`: the mask bits (when it holds them)
  // and the log-sum-exp after them.
  struct HopperSaved {
    uint32_t* bits = nullptr;
    float* lse = nullptr;
  };
  static HopperSaved hopper_saved(const Tensor& saved, int64_t B, int64_t heads, int64_t L) {
    const int64_t rows = B * heads * L;
    if (saved.numel() == rows) return HopperSaved{nullptr, saved.data<float>()};
    const int64_t words = attention_keep_words(L);
    ANATOMY_CHECK(saved.numel() == rows * (words + 1),
                  "attention: {} holds {} floats, not {} (log-sum-exp) or {} (mask bits too)", saved.name(),
                  saved.numel(), rows, rows * (words + 1));
    return HopperSaved{reinterpret_cast<uint32_t*>(saved.data<float>()), saved.data<float>() + rows * words};
  }

  // A float32 copy of a 16-bit tensor (temporary memory).
  Tensor as_f32(const Tensor& t, const char* name) {
    Tensor out = Tensor::empty(ledger_, t.shape(), DType::F32, Category::Temporary, name);
    cast(t, out);
    return out;
  }
  Tensor f32_like(const Tensor& t, const char* name) {
    return Tensor::empty(ledger_, t.shape(), DType::F32, Category::Temporary, name);
  }
  // A 16-bit attention's operands as float32 copies (gradients and outputs
  // empty, inputs cast), made in kForwardFloat32Copies' / kBackwardFloat32Copies'
  // order (a braced initialisation runs left to right, which the meta backend
  // mirrors) and freed together.
  struct ForwardCopies {
    Tensor ctx, q, k, v;
  };
  ForwardCopies forward_copies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& ctx) {
    return {f32_like(ctx, kForwardFloat32Copies[0]), as_f32(q, kForwardFloat32Copies[1]),
            as_f32(k, kForwardFloat32Copies[2]), as_f32(v, kForwardFloat32Copies[3])};
  }
  struct BackwardCopies {
    Tensor dq, dk, dv, dctx, q, k, v;
  };
  BackwardCopies backward_copies(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& dq, const Tensor& dk, const Tensor& dv) {
    return {f32_like(dq, kBackwardFloat32Copies[0]),  f32_like(dk, kBackwardFloat32Copies[1]),
            f32_like(dv, kBackwardFloat32Copies[2]),  as_f32(dctx, kBackwardFloat32Copies[3]),
            as_f32(q, kBackwardFloat32Copies[4]),     as_f32(k, kBackwardFloat32Copies[5]),
            as_f32(v, kBackwardFloat32Copies[6])};
  }

  AttentionCall call_of(const Tensor& q, const Tensor& saved, int64_t heads, const DropoutSpec& dropout) const {
    return attention_call(q, saved, heads, dropout.p, hopper_attention(q.dtype(), q.dim(2) / heads, q.dim(1)));
  }
  // cuDNN's fused attention for this call, or nullptr (attention_*_path asks
  // only where it matters). With training, the backward's shape, its
  // gradients `grad_row_stride` elements a row.
  struct CudnnPick {
#ifdef ANATOMY_HAVE_CUDNN
    CudnnAttention* attention = nullptr;
    CudnnAttentionShape shape;
#endif
  };
  bool cudnn_takes(CudnnPick& pick, const Tensor& q, const Tensor& key_mask, int64_t heads, double scale,
                   const DropoutSpec& dropout, bool training, int64_t grad_row_stride) {
#ifdef ANATOMY_HAVE_CUDNN
    pick.shape = cudnn_shape(q, key_mask, heads, scale, dropout, training);
    if (grad_row_stride > 0) {
      pick.shape.interleaved_grads = grad_row_stride != q.dim(2);
      ANATOMY_CHECK(grad_row_stride == (pick.shape.interleaved_grads ? 3 : 1) * q.dim(2),
                    "attention_backward: cuDNN writes gradient rows {} or {} apart, not {}", q.dim(2), 3 * q.dim(2),
                    grad_row_stride);
    }
    pick.attention = cudnn_for(pick.shape);
    return pick.attention != nullptr;
#else
    (void)pick, (void)q, (void)key_mask, (void)heads, (void)scale, (void)dropout, (void)training, (void)grad_row_stride;
    return false;
#endif
  }

  void do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, int64_t heads,
                            double scale, const DropoutSpec& dropout, const Tensor& probs, const Tensor& ctx) override {
    const AttentionCall c = call_of(q, probs, heads, dropout);
    const int64_t B = c.B, L = c.L, D = c.D;
    const int64_t* mask = key_mask.defined() ? key_mask.data<int64_t>() : nullptr;
    CudnnPick cudnn;
    const AttentionPath path = attention_forward_path(
        c, probs.defined(), [&] { return cudnn_takes(cudnn, q, key_mask, heads, scale, dropout, probs.defined(), 0); });
    switch (path) {
      case AttentionPath::Float32Copies: {
        const ForwardCopies f = forward_copies(q, k, v, ctx);
        attention_forward(f.q, f.k, f.v, key_mask, heads, scale, dropout, probs, f.ctx);
        return cast(f.ctx, ctx);
      }
      case AttentionPath::FlashF32:
        return flash_attention_f32_forward(stream_, q.data<float>(), k.data<float>(), v.data<float>(), mask, B, L,
                                           heads, D, static_cast<float>(scale), dropout, ctx.data<float>(),
                                           probs.data<float>());
      case AttentionPath::Hopper: {
        // Its own mask (attention_keep8 of core/random.h), which only the Hopper backward replays.
        const HopperSaved saved = hopper_saved(probs, B, heads, L);
        return hopper_attention_forward(stream_, attn_type(q.dtype()), q.raw(), k.raw(), v.raw(), mask, B, L, heads,
                                        D, static_cast<float>(scale), dropout, ctx.raw(), saved.lse, saved.bits);
      }
      case AttentionPath::Cudnn: {
#ifdef ANATOMY_HAVE_CUDNN
        // The larger of the planned scratch and what cuDNN asks.
        void* scratch = scratch_bytes(
            std::max(attention_forward_scratch_bytes(path, c), cudnn.attention->forward_scratch_bytes(cudnn.shape)));
        return cudnn.attention->forward(cudnn.shape, q.raw(), k.raw(), v.raw(), mask, dropout, ctx.raw(),
                                        probs.defined() ? probs.data<float>() : nullptr, scratch);
#else
        break;
#endif
      }
      case AttentionPath::Flash:
        return flash_attention_forward(stream_, attn_type(q.dtype()), q.raw(), k.raw(), v.raw(), mask, B, L, heads, D,
                                       static_cast<float>(scale), dropout, ctx.raw(), probs.data<float>());
      case AttentionPath::Materialised: {
        void* scratch = scratch_bytes(attention_forward_scratch_bytes(path, c));
        return cuda::attention_forward(stream_, cublas_, q.data<float>(), k.data<float>(), v.data<float>(), mask, B,
                                       L, heads, D, scale, dropout, probs.data<float>(), ctx.data<float>(), scratch);
      }
    }
    fail("attention_forward: no path for {} head size {}", dtype_name(q.dtype()), D);
  }
  // Windowed attention: the flash kernels with a window where fused
  // (cuda::window_attention_fused: 16-bit, the flash head sizes, no dropout on
  // the probabilities), else the materialised kernels (float32; 16-bit through
  // float32 copies, in the order and under the names the unwindowed path uses).
  bool attention_window_saves_probabilities(DType dtype, int64_t head_dim, float dropout_p) const override {
    return !window_attention_fused(dtype, head_dim, dropout_p);
  }
  void do_attention_window_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                   int64_t heads, double scale, int64_t window, const DropoutSpec& dropout,
                                   const Tensor& saved, const Tensor& ctx) override {
    const int64_t B = q.dim(0), L = q.dim(1), D = q.dim(2) / heads;
    const int64_t* mask = key_mask.defined() ? key_mask.data<int64_t>() : nullptr;
    if (!attention_window_saves_probabilities(q.dtype(), D, dropout.p))
      return flash_attention_forward(stream_, attn_type(q.dtype()), q.raw(), k.raw(), v.raw(), mask, B, L, heads, D,
                                     static_cast<float>(scale), dropout, ctx.raw(), saved.data<float>(), window);
    if (q.dtype() != DType::F32) {
      const ForwardCopies f = forward_copies(q, k, v, ctx);
      attention_window_forward(f.q, f.k, f.v, key_mask, heads, scale, window, dropout, saved, f.ctx);
      return cast(f.ctx, ctx);
    }
    void* scratch = scratch_bytes(attention_scratch_bytes(B, heads, L));
    cuda::attention_forward(stream_, cublas_, q.data<float>(), k.data<float>(), v.data<float>(), mask, B, L, heads, D,
                            scale, dropout, saved.data<float>(), ctx.data<float>(), scratch, window);
  }
  void do_attention_window_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& ctx, const Tensor& saved, const Tensor& key_mask, int64_t heads,
                                    double scale, int64_t window, const DropoutSpec& dropout, const Tensor& dq,
                                    const Tensor& dk, const Tensor& dv) override {
    const int64_t B = q.dim(0), L = q.dim(1), D = q.dim(2) / heads;
    if (!attention_window_saves_probabilities(q.dtype(), D, dropout.p)) {
      void* scratch = scratch_bytes(flash_window_scratch_bytes(B, L, heads, D));
      return flash_attention_backward(stream_, attn_type(q.dtype()), dctx.raw(), q.raw(), k.raw(), v.raw(),
                                      ctx.raw(), saved.data<float>(),
                                      key_mask.defined() ? key_mask.data<int64_t>() : nullptr, B, L, heads, D,
                                      static_cast<float>(scale), dropout, dq.raw(), dk.raw(), dv.raw(), scratch,
                                      window);
    }
    if (q.dtype() != DType::F32) {
      const BackwardCopies b = backward_copies(dctx, q, k, v, dq, dk, dv);
      attention_window_backward(b.dctx, b.q, b.k, b.v, ctx, saved, key_mask, heads, scale, window, dropout, b.dq,
                                b.dk, b.dv);
      cast(b.dq, dq);
      cast(b.dk, dk);
      return cast(b.dv, dv);
    }
    void* scratch = scratch_bytes(attention_scratch_bytes(B, heads, L));
    cuda::attention_backward(stream_, cublas_, dctx.data<float>(), q.data<float>(), k.data<float>(), v.data<float>(),
                             saved.data<float>(), B, L, heads, D, scale, dropout, dq.data<float>(), dk.data<float>(),
                             dv.data<float>(), scratch);
  }
  // DeBERTa's attention: the materialised kernels (float32; 16-bit through
  // float32 copies, the plain path's under its names, then the position
  // operands' in kRelativeFloat32Copies' order).
  void do_attention_relative_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_q,
                                     const Tensor& pos_k, const Tensor& rel_index, const Tensor& rel_ranges,
                                     const Tensor& key_mask, int64_t heads, double scale, const DropoutSpec& dropout,
                                     const Tensor& probs, const Tensor& ctx) override {
    if (q.dtype() != DType::F32) {
      const ForwardCopies f = forward_copies(q, k, v, ctx);
      const auto& n = kRelativeFloat32Copies;
      const Tensor pq = pos_q.defined() ? as_f32(pos_q, n[0]) : Tensor();
      const Tensor pk = pos_k.defined() ? as_f32(pos_k, n[1]) : Tensor();
      attention_relative_forward(f.q, f.k, f.v, pq, pk, rel_index, rel_ranges, key_mask, heads, scale, dropout, probs,
                                 f.ctx);
      return cast(f.ctx, ctx);
    }
    const int64_t B = q.dim(0), L = q.dim(1), D = q.dim(2) / heads, P = rel_ranges.dim(0);
    void* scratch = scratch_bytes(relative_attention_scratch_bytes(B, heads, L, P));
    cuda::attention_relative_forward(stream_, cublas_, q.data<float>(), k.data<float>(), v.data<float>(),
                                     pos_q.defined() ? pos_q.data<float>() : nullptr,
                                     pos_k.defined() ? pos_k.data<float>() : nullptr, rel_index.data<int64_t>(), P,
                                     key_mask.defined() ? key_mask.data<int64_t>() : nullptr, B, L, heads, D, scale,
                                     dropout, probs.data<float>(), ctx.data<float>(), scratch);
  }
  void do_attention_relative_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& pos_q, const Tensor& pos_k, const Tensor& rel_index,
                                      const Tensor& rel_ranges, const Tensor& probs, int64_t heads, double scale,
                                      const DropoutSpec& dropout, const Tensor& dq, const Tensor& dk,
                                      const Tensor& dv, const Tensor& dpos_q, const Tensor& dpos_k) override {
    if (q.dtype() != DType::F32) {
      const BackwardCopies b = backward_copies(dctx, q, k, v, dq, dk, dv);
      const auto& n = kRelativeFloat32Copies;
      const Tensor pq = pos_q.defined() ? as_f32(pos_q, n[0]) : Tensor();
      const Tensor pk = pos_k.defined() ? as_f32(pos_k, n[1]) : Tensor();
      const Tensor dpq = dpos_q.defined() ? f32_like(dpos_q, n[2]) : Tensor();
      const Tensor dpk = dpos_k.defined() ? f32_like(dpos_k, n[3]) : Tensor();
      attention_relative_backward(b.dctx, b.q, b.k, b.v, pq, pk, rel_index, rel_ranges, probs, heads, scale, dropout,
                                  b.dq, b.dk, b.dv, dpq, dpk);
      cast(b.dq, dq);
      cast(b.dk, dk);
      cast(b.dv, dv);
      if (dpq.defined()) cast(dpq, dpos_q);
      if (dpk.defined()) cast(dpk, dpos_k);
      return;
    }
    const int64_t B = q.dim(0), L = q.dim(1), D = q.dim(2) / heads, P = rel_ranges.dim(0);
    void* scratch = scratch_bytes(relative_attention_scratch_bytes(B, heads, L, P));
    cuda::attention_relative_backward(stream_, cublas_, dctx.data<float>(), q.data<float>(), k.data<float>(),
                                      v.data<float>(), pos_q.defined() ? pos_q.data<float>() : nullptr,
                                      pos_k.defined() ? pos_k.data<float>() : nullptr, rel_ranges.data<int64_t>(), P,
                                      probs.data<float>(), B, L, heads, D, scale, dropout, dq.data<float>(),
                                      dk.data<float>(), dv.data<float>(),
                                      dpos_q.defined() ? dpos_q.data<float>() : nullptr,
                                      dpos_k.defined() ? dpos_k.data<float>() : nullptr, scratch);
  }
  void do_rotary(const Tensor& x, int64_t heads, double theta, bool inverse) override {
    cuda::rotary(stream_, x.dtype(), x.raw(), x.dim(0), x.dim(1), heads, x.dim(2) / heads, theta, inverse);
  }
  void do_gated_activation_forward(ActivationKind kind, const Tensor& u, const Tensor& y) override {
    cuda::gated_activation_forward(stream_, u.dtype(), kind, u.raw(), y.raw(), y.numel() / y.dim(-1), y.dim(-1));
  }
  void do_gated_activation_backward(ActivationKind kind, const Tensor& u, const Tensor& dy,
                                    const Tensor& du) override {
    cuda::gated_activation_backward(stream_, u.dtype(), kind, u.raw(), dy.raw(), du.raw(), dy.numel() / dy.dim(-1),
                                    dy.dim(-1));
  }

  // Packed sequences: one launch of the flash forward over every sequence
  // where the head size has a 16-bit kernel; otherwise one sequence at a time.
  void do_attention_forward_packed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& offsets,
                                   const std::vector<int64_t>& host_offsets, int64_t heads, double scale,
                                   const Tensor& ctx) override {
    const int64_t D = q.rank() == 2 && heads > 0 ? q.dim(1) / heads : 0;
    if (q.dtype() == DType::F32 || !fused_attention(q.dtype(), D))
      return attention_forward_packed_one_by_one(q, k, v, offsets, host_offsets, heads, scale, ctx);
    ANATOMY_CHECK(k.shape() == q.shape() && v.shape() == q.shape() && ctx.shape() == q.shape() &&
                      k.dtype() == q.dtype() && v.dtype() == q.dtype() && ctx.dtype() == q.dtype(),
                  "attention_forward_packed: q, k, v and ctx differ");
    ANATOMY_CHECK(offsets.dtype() == DType::I64 && offsets.numel() == static_cast<int64_t>(host_offsets.size()) &&
                      host_offsets.size() >= 2 && host_offsets.back() == q.dim(0),
                  "attention_forward_packed: {} does not describe the {} packed rows", offsets.name(), q.dim(0));
    int64_t longest = 0;
    for (size_t b = 0; b + 1 < host_offsets.size(); ++b)
      longest = std::max(longest, host_offsets[b + 1] - host_offsets[b]);
    flash_attention_forward_packed(stream_, attn_type(q.dtype()), q.raw(), k.raw(), v.raw(), offsets.data<int64_t>(),
                                   static_cast<int64_t>(host_offsets.size()) - 1, longest, q.dim(0), heads, D,
                                   static_cast<float>(scale), ctx.raw());
  }
  // The backward's path for gradients written `grad_row_stride` elements a
  // row (H, or 3H interleaved); cuDNN is asked only where it matters.
  AttentionPath backward_path(const AttentionCall& c, CudnnPick& cudnn, const Tensor& q, const Tensor& key_mask,
                              int64_t heads, double scale, const DropoutSpec& dropout, int64_t grad_row_stride) {
    return attention_backward_path(
        c, [&] { return cudnn_takes(cudnn, q, key_mask, heads, scale, dropout, true, grad_row_stride); });
  }
  // The backward on one of the paths that write dq, dk and dv at any row
  // stride (attention_backward_strided(path)).
  void backward_strided(AttentionPath path, const AttentionCall& c, const CudnnPick& cudnn, const Tensor& dctx,
                        const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& ctx, const Tensor& probs,
                        const Tensor& key_mask, double scale, const DropoutSpec& dropout, void* dq, void* dk,
                        void* dv, int64_t grad_row_stride) {
    const int64_t B = c.B, L = c.L, heads = c.heads, D = c.D;
    const int64_t* mask = key_mask.defined() ? key_mask.data<int64_t>() : nullptr;
    switch (path) {
      case AttentionPath::FlashF32: {
        void* scratch = scratch_bytes(attention_backward_scratch_bytes(path, c));
        return flash_attention_f32_backward(stream_, dctx.data<float>(), q.data<float>(), k.data<float>(),
                                            v.data<float>(), ctx.data<float>(), probs.data<float>(), mask, B, L,
                                            heads, D, static_cast<float>(scale), dropout, static_cast<float*>(dq),
                                            static_cast<float*>(dk), static_cast<float*>(dv), scratch,
                                            grad_row_stride);
      }
      case AttentionPath::Hopper: {
        const HopperSaved saved = hopper_saved(probs, B, heads, L);
        void* scratch = scratch_bytes(attention_backward_scratch_bytes(path, c));
        return hopper_attention_backward(stream_, attn_type(q.dtype()), dctx.raw(), q.raw(), k.raw(), v.raw(),
                                         ctx.raw(), saved.lse, mask, B, L, heads, D, static_cast<float>(scale),
                                         dropout, dq, dk, dv, scratch, grad_row_stride, saved.bits);
      }
      case AttentionPath::Cudnn: {
#ifdef ANATOMY_HAVE_CUDNN
        // The larger of the planned scratch and what cuDNN asks.
        void* scratch = scratch_bytes(
            std::max(attention_backward_scratch_bytes(path, c), cudnn.attention->backward_scratch_bytes(cudnn.shape)));
        return cudnn.attention->backward(cudnn.shape, dctx.raw(), q.raw(), k.raw(), v.raw(), ctx.raw(),
                                         probs.data<float>(), mask, dropout, dq, dk, dv, scratch);
#else
        (void)cudnn;
        break;
#endif
      }
      default: break;
    }
    fail("attention_backward: the path taken cannot write strided gradients");
  }

  void do_attention_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& ctx,
                             const Tensor& probs, const Tensor& key_mask, int64_t heads, double scale,
                             const DropoutSpec& dropout, const Tensor& dq, const Tensor& dk,
                             const Tensor& dv) override {
    const AttentionCall c = call_of(q, probs, heads, dropout);
    const int64_t B = c.B, L = c.L, D = c.D;
    CudnnPick cudnn;
    const AttentionPath path = backward_path(c, cudnn, q, key_mask, heads, scale, dropout, q.dim(2));
    if (cuda::attention_backward_strided(path))
      return backward_strided(path, c, cudnn, dctx, q, k, v, ctx, probs, key_mask, scale, dropout, dq.raw(),
                                        dk.raw(), dv.raw(), q.dim(2));
    switch (path) {
      case AttentionPath::Float32Copies: {
        const BackwardCopies b = backward_copies(dctx, q, k, v, dq, dk, dv);
        attention_backward(b.dctx, b.q, b.k, b.v, ctx, probs, key_mask, heads, scale, dropout, b.dq, b.dk, b.dv);
        cast(b.dq, dq);
        cast(b.dk, dk);
        return cast(b.dv, dv);
      }
      case AttentionPath::Flash: {
        void* scratch = scratch_bytes(attention_backward_scratch_bytes(path, c));
        return flash_attention_backward(stream_, attn_type(q.dtype()), dctx.raw(), q.raw(), k.raw(), v.raw(),
                                        ctx.raw(), probs.data<float>(),
                                        key_mask.defined() ? key_mask.data<int64_t>() : nullptr, B, L, heads, D,
                                        static_cast<float>(scale), dropout, dq.raw(), dk.raw(), dv.raw(), scratch);
      }
      case AttentionPath::Materialised: {
        void* scratch = scratch_bytes(attention_backward_scratch_bytes(path, c));
        return cuda::attention_backward(stream_, cublas_, dctx.data<float>(), q.data<float>(), k.data<float>(),
                                        v.data<float>(), probs.data<float>(), B, L, heads, D, scale, dropout,
                                        dq.data<float>(), dk.data<float>(), dv.data<float>(), scratch);
      }
      default: break;
    }
    fail("attention_backward: no path for {} head size {}", dtype_name(q.dtype()), D);
  }

  // The strided paths write the interleaved gradients themselves; the others
  // write three temporaries that three strided copies interleave.
  void do_attention_backward_interleaved(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& ctx, const Tensor& probs, const Tensor& key_mask, int64_t heads,
                                         double scale, const DropoutSpec& dropout, const Tensor& dqkv) override {
    check_interleaved_gradients(dqkv, q);
    const int64_t B = q.dim(0), L = q.dim(1), H = q.dim(2);
    const size_t row = static_cast<size_t>(H) * dtype_size(q.dtype());
    auto* d = static_cast<std::byte*>(dqkv.raw());
    const AttentionCall c = call_of(q, probs, heads, dropout);
    CudnnPick cudnn;
    const AttentionPath path = backward_path(c, cudnn, q, key_mask, heads, scale, dropout, 3 * H);
    if (cuda::attention_backward_strided(path))
      return backward_strided(path, c, cudnn, dctx, q, k, v, ctx, probs, key_mask, scale, dropout, d,
                                        d + row, d + 2 * row, 3 * H);
    // kInterleavedTemporaries, in this order, freed together.
    Tensor dq = Tensor::empty(ledger_, q.shape(), q.dtype(), Category::Temporary, kInterleavedTemporaries[0]);
    Tensor dk = Tensor::empty(ledger_, q.shape(), q.dtype(), Category::Temporary, kInterleavedTemporaries[1]);
    Tensor dv = Tensor::empty(ledger_, q.shape(), q.dtype(), Category::Temporary, kInterleavedTemporaries[2]);
    attention_backward(dctx, q, k, v, ctx, probs, key_mask, heads, scale, dropout, dq, dk, dv);
    for (int i = 0; i < 3; ++i) {
      const Tensor& part = i == 0 ? dq : i == 1 ? dk : dv;
      ANATOMY_CUDA_CHECK(cudaMemcpy2DAsync(d + i * row, 3 * row, part.raw(), row, row, static_cast<size_t>(B * L),
                                           cudaMemcpyDeviceToDevice, stream_));
    }
  }
  bool attention_first_query_supported(int64_t head_dim, int64_t L) const override {
    return first_query_attention_shape(head_dim, L);
  }
  void do_attention_first_query_forward(const Tensor& q0, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                        int64_t heads, double scale, const DropoutSpec& dropout, const Tensor& probs,
                                        const Tensor& ctx0) override {
    const FirstQueryShape s = first_query_shape(q0, k, v, ctx0, probs, heads, scale, "attention_first_query_forward");
    first_query_attention_forward(stream_, k.dtype(), s, q0.raw(), k.raw(), v.raw(),
                                  key_mask.defined() ? key_mask.data<int64_t>() : nullptr, dropout,
                                  probs.data<float>(), ctx0.raw());
  }
  void do_attention_first_query_backward(const Tensor& dctx0, const Tensor& q0, const Tensor& k, const Tensor& v,
                                         const Tensor& probs, int64_t heads, double scale, const DropoutSpec& dropout,
                                         const Tensor& dq0, const Tensor& dk, const Tensor& dv) override {
    const FirstQueryShape s = first_query_shape(q0, k, v, dctx0, probs, heads, scale, "attention_first_query_backward");
    ANATOMY_CHECK(dq0.numel() == q0.numel() && dk.numel() == k.numel() && dv.numel() == v.numel() &&
                      dq0.dtype() == k.dtype() && dk.dtype() == k.dtype() && dv.dtype() == k.dtype(),
                  "attention_first_query_backward: {}, {}, {} do not match the inputs", dq0.name(), dk.name(),
                  dv.name());
    first_query_attention_backward(stream_, k.dtype(), s, dctx0.raw(), q0.raw(), k.raw(), v.raw(), probs.data<float>(),
                                   dropout, dq0.raw(), dk.raw(), dv.raw());
  }
  static FirstQueryShape first_query_shape(const Tensor& q0, const Tensor& k, const Tensor& v, const Tensor& ctx0,
                                           const Tensor& probs, int64_t heads, double scale, const char* what) {
    FirstQueryShape s;
    s.B = k.dim(0);
    s.L = k.dim(1);
    s.H = k.dim(2);
    s.heads = heads;
    s.scale = scale;
    ANATOMY_CHECK(v.shape() == k.shape() && q0.numel() == s.B * s.H && ctx0.numel() == s.B * s.H &&
                      probs.numel() == s.B * heads * s.L && probs.dtype() == DType::F32 && q0.dtype() == k.dtype() &&
                      v.dtype() == k.dtype() && ctx0.dtype() == k.dtype(),
                  "{}: shapes or types of {}, {}, {}, {}, {}", what, q0.name(), k.name(), v.name(), ctx0.name(),
                  probs.name());
    ANATOMY_CHECK(first_query_attention_shape(s.H / std::max<int64_t>(heads, 1), s.L),
                  "{}: head size {} and {} keys (at most {} and {})", what, s.H / std::max<int64_t>(heads, 1), s.L,
                  kFirstQueryMaxHeadSize, kFirstQueryMaxL);
    return s;
  }

  double do_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& dlogits,
                          double label_smoothing) override {
    cuda::cross_entropy(stream_, logits.data<float>(), labels.data<int64_t>(), dlogits.data<float>(), result_slot(),
                        logits.dim(0), logits.dim(1), label_smoothing);
    return read_result();
  }
  double do_cross_entropy_sum(const Tensor& logits, const Tensor& labels, const Tensor& dlogits,
                              double scale) override {
    void* scratch = scratch_bytes(cross_entropy_sum_scratch_bytes(logits.dim(0)));
    cuda::cross_entropy_sum(stream_, logits.dtype(), logits.raw(), labels.data<int64_t>(),
                            dlogits.defined() ? dlogits.dtype() : DType::F32,
                            dlogits.defined() ? dlogits.raw() : nullptr, scale, result_slot(), logits.dim(0),
                            logits.dim(1), scratch);
    return read_result();
  }
  double do_mse(const Tensor& logits, const Tensor& targets, const Tensor& dlogits) override {
    cuda::mse(stream_, logits.data<float>(), targets.data<float>(), dlogits.data<float>(), result_slot(),
              logits.numel());
    return read_result();
  }
  double do_bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor& dlogits) override {
    cuda::bce_with_logits(stream_, logits.data<float>(), targets.data<float>(), dlogits.data<float>(), result_slot(),
                          logits.numel());
    return read_result();
  }

  double do_sum_of_squares(const Tensor& t) override {
    void* scratch = scratch_bytes(sum_of_squares_scratch_bytes(t.numel()));
    cuda::sum_of_squares(stream_, t.data<float>(), t.numel(), result_slot(), scratch);
    return read_result();
  }
  void do_scale(const Tensor& t, double factor) override {
    cuda::scale(stream_, t.data<float>(), static_cast<float>(factor), t.numel());
  }
  void do_adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const AdamWHyper& hyper) override {
    cuda::adamw_step(stream_, param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
                     exp_avg_sq.data<float>(), param.numel(), hyper);
  }

  void do_sgd_step_flat(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                        const std::vector<ParamSegment>& segments, const SgdHyper& hyper,
                        const Tensor* half_copy) override {
    cuda::sgd_step_flat(stream_, param, grad, momentum_buf, segments, hyper, half_copy);
  }
  void do_adafactor_step(const Tensor& param, const Tensor& grad, const Tensor& row_state, const Tensor& col_state,
                         const Tensor& v_state, const AdafactorHyper& hyper, const Tensor* half_copy) override {
    void* scratch = scratch_bytes(adafactor_scratch_bytes(param.numel()));
    cuda::adafactor_step(stream_, param, grad, row_state, col_state, v_state, hyper, half_copy, scratch);
  }
  void do_adamw8bit_step(const Tensor& param, const Tensor& grad, const Tensor& state1, const Tensor& state2,
                         const Tensor& absmax1, const Tensor& absmax2, const Tensor& qmap1, const Tensor& qmap2,
                         const AdamWHyper& hyper, const Tensor* half_copy) override {
    cuda::adamw8bit_step(stream_, param, grad, state1, state2, absmax1, absmax2, qmap1, qmap2, hyper, half_copy);
  }

  void do_adamw_step_flat(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                          const std::vector<ParamSegment>& segments, const AdamWHyper& hyper,
                          const Tensor* half_copy) override {
    ANATOMY_CHECK(param.numel() == grad.numel() && param.numel() == exp_avg.numel() &&
                      param.numel() == exp_avg_sq.numel() && (!half_copy || half_copy->numel() == param.numel()),
                  "adamw_step_flat: {} {} {} {} differ in size", param.name(), grad.name(), exp_avg.name(),
                  exp_avg_sq.name());
    check_segments(segments, param, "adamw_step_flat");
    // The chunk table is built and uploaded once per distinct segment list.
    // The old table is released before the new one is allocated.
    if (!adamw_table_.defined() || segments != adamw_segments_) {
      std::vector<unsigned char> table;
      adamw_chunks_ = adamw_chunk_table(segments, table);
      adamw_table_ = Tensor();
      adamw_table_ = Tensor::empty(ledger_, {adamw_chunk_table_floats(table.size())}, DType::F32,
                                   Category::Functionality, "adamw_chunk_table");
      if (!table.empty()) {
        ANATOMY_CUDA_CHECK(
            cudaMemcpyAsync(adamw_table_.raw(), table.data(), table.size(), cudaMemcpyHostToDevice, stream_));
        synchronize();
      }
      adamw_segments_ = segments;
    }
    const int64_t chunks = adamw_chunks_;
    Half copy_type{};
    if (half_copy) copy_type = half_type(half_copy->dtype());
    adamw_step_chunks(stream_, param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
                      exp_avg_sq.data<float>(), adamw_table_.raw(), chunks, hyper, half_copy ? &copy_type : nullptr,
                      half_copy ? half_copy->raw() : nullptr);
  }

  void synchronize() override { ANATOMY_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  void release_scratch() override {
    synchronize();  // a queued op may still use it
    scratch_ = Tensor();
    ++scratch_generation_;
  }
  void* native_stream() override { return stream_; }

  // Markers are CUDA events recorded on the stream, from a pool kept across steps.
  int64_t record_marker() override {
    if (markers_used_ == markers_.size()) {
      cudaEvent_t event = nullptr;
      ANATOMY_CUDA_CHECK(cudaEventCreate(&event));
      markers_.push_back(event);
    }
    ANATOMY_CUDA_CHECK(cudaEventRecord(markers_[markers_used_], stream_));
    return static_cast<int64_t>(markers_used_++);
  }
  double marker_elapsed_ms(int64_t from, int64_t to) override {
    ANATOMY_CHECK(from >= 0 && to >= 0 && static_cast<size_t>(from) < markers_used_ &&
                      static_cast<size_t>(to) < markers_used_,
                  "marker_elapsed_ms: no markers {} and {}", from, to);
    ANATOMY_CUDA_CHECK(cudaEventSynchronize(markers_[to]));
    float ms = 0.0f;
    ANATOMY_CUDA_CHECK(cudaEventElapsedTime(&ms, markers_[from], markers_[to]));
    return ms;
  }
  void clear_markers() override { markers_used_ = 0; }
  // NVTX 3 is header-only: without a tool attached (Nsight Systems) these do nothing.
  void range_push(const char* name) override { nvtxRangePushA(name); }
  void range_pop() override { nvtxRangePop(); }

 private:
  static unsigned grid_for(int64_t n) {
    return static_cast<unsigned>(std::clamp<int64_t>((n + 255) / 256, 1, 132 * 16));
  }

#ifdef ANATOMY_HAVE_CUDNN
  static CudnnAttentionShape cudnn_shape(const Tensor& q, const Tensor& key_mask, int64_t heads, double scale,
                                         const DropoutSpec& dropout, bool training) {
    CudnnAttentionShape s;
    s.B = q.dim(0);
    s.L = q.dim(1);
    s.heads = heads;
    s.D = q.dim(2) / heads;
    s.bf16 = q.dtype() == DType::BF16;
    s.masked = key_mask.defined();
    s.dropout = dropout.p;
    s.training = training;
    s.scale = static_cast<float>(scale);
    return s;
  }
  // cuDNN's fused attention for this shape, or nullptr for our flash kernels:
  // when --attention anatomy, when cuDNN cannot be loaded, or when it
  // has no fused graph for the shape.
  CudnnAttention* cudnn_for(const CudnnAttentionShape& s) {
    if (!cudnn_tried_) {
      cudnn_tried_ = true;
      if (cudnn_attention_selected(options())) {
        std::string why;
        cudnn_ = CudnnAttention::create(stream_, options(), &why);
        if (!cudnn_)
          std::fprintf(stderr, "warning: cuDNN attention unavailable (%s); using our flash kernels\n", why.c_str());
      }
    }
    if (!cudnn_) return nullptr;
    return cudnn_->supports(s) ? cudnn_.get() : nullptr;
  }
  std::unique_ptr<CudnnAttention> cudnn_;
  bool cudnn_tried_ = false;
#endif

  // Scratch space shared by ops (one op at a time on the stream), grown on
  // demand and kept; the ledger counts it as temporary memory. The old
  // scratch is released before the larger one is allocated (as the meta
  // backend's scratch_bytes).
  void* scratch_bytes(size_t bytes) {
    if (bytes == 0) return nullptr;
    if (!scratch_.defined() || scratch_.nbytes() < bytes) {
      synchronize();  // a queued op may still read the old scratch
      scratch_ = Tensor();
      const int64_t words = static_cast<int64_t>(scratch_allocation_bytes(bytes) / 4);
      scratch_ = Tensor::empty(ledger_, {words}, DType::F32, Category::Temporary, "kernel_scratch");
      ++scratch_generation_;
    }
    return scratch_.raw();
  }

  static Half half_type(DType t) {
    ANATOMY_CHECK(t == DType::BF16 || t == DType::F16, "expected a 16-bit dtype, got {}", dtype_name(t));
    return t == DType::BF16 ? Half::BF16 : Half::F16;
  }

  static AttnType attn_type(DType t) { return half_type(t) == Half::BF16 ? AttnType::BF16 : AttnType::F16; }

  static cudaDataType_t cuda_type(DType t) {
    switch (t) {
      case DType::F32: return CUDA_R_32F;
      case DType::BF16: return CUDA_R_16BF;
      case DType::F16: return CUDA_R_16F;
      default: ANATOMY_CHECK(false, "no matrix products in {}", dtype_name(t));
    }
    return CUDA_R_32F;
  }

  // The compute type of a product whose inputs are a_type: TF32 for float32
  // inputs under Fp32Products::Tf32, else float32 (a split-TF32 product's
  // split operands are given FAST_TF32 by lt_gemm itself).
  cublasComputeType_t compute_for(DType a_type) const {
    return a_type == DType::F32 && fp32_products_ == Fp32Products::Tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                       : CUBLAS_COMPUTE_32F;
  }

  // Column-major C[m,n] = α op(A) op(B) + β C with float32 accumulation; A and
  // B share a type, C may be wider. Float32 inputs run in TF32 under
  // Fp32Products::Tf32, else in plain float32 (this is the fallback when
  // cuBLASLt has no algorithm, split-TF32's included).
  void gemm(cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n, int64_t k, const void* A,
            DType a_type, int64_t lda, const void* B, DType b_type, int64_t ldb, float beta, void* C, DType c_type,
            int64_t ldc) {
    const float alpha = 1.0f;
    const cublasComputeType_t compute = compute_for(a_type);
    ANATOMY_CUBLAS_CHECK(cublasGemmEx(cublas_, op_a, op_b, m, n, k, &alpha, A, cuda_type(a_type), lda, B,
                                      cuda_type(b_type), ldb, &beta, C, cuda_type(c_type), ldc, compute,
                                      CUBLAS_GEMM_DEFAULT));
  }

  // cuBLASLt products: a plan per shape, pointer alignment and epilogue, made
  // once: the descriptors and up to kLtCandidates algorithms in the order of
  // cuBLASLt's heuristic. Same arguments as gemm(); A and B share a_type;
  // `bias` (of C's type, length m) selects the bias epilogue. Returns false
  // when cuBLASLt has no algorithm for the case, which the caller then hands
  // to cublasGemmEx.
  //
  // The heuristic's first algorithm is not always the fastest: on an H100 the
  // fastest of its first 8 took up to 13% less time on bert-large's bf16
  // products (4096 x 16384 x 1024: 0.2008 against 0.1743 ms), about 4% of a
  // step. So the first call of a plan times the candidates (tune_lt_plan) and
  // keeps the fastest, and the choice goes to a cache file
  // (kernels/gemm_tuning_cache.h) that later runs read instead of timing
  // again: timings are noisy, and two runs that chose differently would give
  // different bits for the same inputs. --gemm-tuning false keeps the
  // heuristic's first.
  //
  // With float32 operands, each candidate that does not split the depth also
  // comes split in 2 and 4 (reduced in place, or in a float32 buffer: both
  // deterministic), which the heuristic rarely offers at these shapes. On an H100 in float32, the
  // one [T, 3H]·[3H, H] query/key/value input gradient at T = 2048 took
  // 0.2598 ms split against 0.2732 ms for the best of the heuristic's 8, and
  // its [3H, T]·[T, H] weight gradient 0.2745 against 0.3157 ms.
  static constexpr int kLtCandidates = 8;
  static constexpr int kSplitKs[] = {2, 4};
  static constexpr cublasLtReductionScheme_t kSplitKReductions[] = {CUBLASLT_REDUCTION_SCHEME_INPLACE,
                                                                    CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE};
  static constexpr int kLtMaxCandidates =
      kLtCandidates * (1 + static_cast<int>(std::size(kSplitKs) * std::size(kSplitKReductions)));
  static constexpr int kTuneWarmups = 3, kTuneRuns = 10;
  using LtKey = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, bool, bool, int,
                           int, int, int64_t, int64_t, int64_t, int64_t, int>;
  struct LtPlan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    // The heuristic's candidates, its first choice first. (An array, not a
    // std::vector: nvcc 13.0's front end crashes destroying a vector of this
    // unnamed struct type.)
    cublasLtMatmulAlgo_t algos[kLtMaxCandidates] = {};
    int candidates = 0;
    int chosen = 0;         // the index in algos that the products use
    bool decided = false;   // chosen is final: cached, timed, or nothing to choose from
    std::string cache_key;  // the plan's key in the tuning cache
    void destroy() {
      if (a) cublasLtMatrixLayoutDestroy(a);
      if (b) cublasLtMatrixLayoutDestroy(b);
      if (c) cublasLtMatrixLayoutDestroy(c);
      if (op) cublasLtMatmulDescDestroy(op);
    }
  };

  static int alignment_of(const void* p) {
    const auto v = reinterpret_cast<uintptr_t>(p);
    int a = 256;
    while (a > 1 && v % a != 0) a /= 2;
    return a;
  }

  // Bytes from the first element of a column-major rows x cols matrix with
  // leading dimension ld (or of a strided batch of them) to past its last.
  static size_t extent_bytes(int64_t rows, int64_t cols, int64_t ld, int count, int64_t stride, DType t) {
    if (rows <= 0 || cols <= 0) return 0;
    return static_cast<size_t>((cols - 1) * ld + rows + int64_t{count - 1} * stride) * dtype_size(t);
  }
  static bool overlap(const void* p, size_t p_bytes, const void* q, size_t q_bytes) {
    const auto x = reinterpret_cast<uintptr_t>(p), y = reinterpret_cast<uintptr_t>(q);
    return x < y + q_bytes && y < x + p_bytes;
  }

  // lt_gemm itself: under Fp32Products::SplitTf32 a float32 product is split
  // first (split_operands) and runs as one TF32 product of depth 3k; when
  // cuBLASLt has no algorithm for that, the caller's cublasGemmEx fallback
  // computes it in plain float32 from the unsplit operands.
  bool lt_gemm(cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n, int64_t k, const void* A,
               DType a_type, int64_t lda, const void* B, int64_t ldb, float beta, void* C, DType c_type, int64_t ldc,
               const void* bias, const Batch& batch = {}) {
    if (a_type == DType::F32 && fp32_products_ == Fp32Products::SplitTf32 && batch.count <= 1 && m > 0 && n > 0 &&
        k > 0) {
      const SplitOperands split = split_operands(op_a, op_b, m, n, k, static_cast<const float*>(A), lda,
                                                 static_cast<const float*>(B), ldb);
      return lt_gemm_with(CUBLAS_COMPUTE_32F_FAST_TF32, op_a, op_b, m, n, 3 * k, split.a, a_type, split.lda, split.b,
                          split.ldb, beta, C, c_type, ldc, bias, batch);
    }
    return lt_gemm_with(compute_for(a_type), op_a, op_b, m, n, k, A, a_type, lda, B, ldb, beta, C, c_type, ldc, bias,
                        batch);
  }

  // The split operands of a split-TF32 product, in the kernel scratch:
  // op(A') = [A_lo A_hi A_hi] (m x 3k) and op(B') = [B_hi; B_lo; B_hi]
  // (3k x n), each stored as its operand is (transposed or not), so that
  // op(A')·op(B') = A_lo·B_hi + A_hi·B_lo + A_hi·B_hi. The pieces are laid
  // one after another along k: down the columns where k is the stored
  // matrix's row index, as column blocks where it is the column index.
  //
  // The small terms come first. Added last, onto an accumulator that
  // already held the large result, they lost accuracy: on an H100
  // (test_cuda_split_tf32.cpp), hi·hi first left products off by up to
  // 3.1e-6 of Σ|a·b|, small terms first by up to 7.8e-7 (float32 on CUDA
  // cores: up to 3.9e-7). Tensor cores are reported to align and truncate,
  // rather than round, when they add within an instruction; late small terms
  // would then each lose up to an ulp of the large accumulator, all in one
  // direction.
  struct SplitOperands {
    const float* a = nullptr;
    const float* b = nullptr;
    int64_t lda = 0, ldb = 0;
  };
  SplitOperands split_operands(cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n, int64_t k,
                               const float* A, int64_t lda, const float* B, int64_t ldb) {
    // The scratch of the split operands (as the meta backend's split_tf32_scratch).
    auto* scratch = static_cast<std::byte*>(scratch_bytes(split_tf32_scratch_bytes(m, n, k)));
    auto* a = reinterpret_cast<float*>(scratch);
    auto* b = reinterpret_cast<float*>(scratch + split_tf32_b_offset(m, k));
    constexpr unsigned kALo = 0b001, kBLo = 0b010;  // A: lo hi hi; B: hi lo hi
    const SplitOperands out{a, b, op_a == CUBLAS_OP_N ? m : 3 * k, op_b == CUBLAS_OP_N ? 3 * k : n};
    // A shared operand already split into this scratch (same generation) is not split again.
    const auto fresh = [&](SharedOperand side) {
      if (shared_operand_ != side) return true;
      const bool done = shared_split_generation_ == scratch_generation_;
      shared_split_generation_ = scratch_generation_;
      return !done;
    };
    if (fresh(SharedOperand::A)) {
      if (op_a == CUBLAS_OP_N) split_tf32(stream_, A, m, k, lda, /*along_rows=*/false, kALo, a);  // A stored m x k
      else split_tf32(stream_, A, k, m, lda, /*along_rows=*/true, kALo, a);                       // A stored k x m
    }
    if (fresh(SharedOperand::B)) {
      if (op_b == CUBLAS_OP_N) split_tf32(stream_, B, k, n, ldb, /*along_rows=*/true, kBLo, b);  // B stored k x n
      else split_tf32(stream_, B, n, k, ldb, /*along_rows=*/false, kBLo, b);                     // B stored n x k
    }
    return out;
  }

  // Within one linear_forward_n or linear_backward_weights_n (all products
  // of one shape, one x), the operand that every product shares is split
  // once: SharedSplit marks which side it is for the call's duration, and
  // shared_split_generation_ records the scratch it was split into (-1: not
  // yet). A scratch grown in between is a new generation, split again.
  enum class SharedOperand { None, A, B };
  struct SharedSplit {
    CudaBackend& backend;
    SharedSplit(CudaBackend& b, SharedOperand side) : backend(b) {
      backend.shared_operand_ = b.fp32_products_ == Fp32Products::SplitTf32 ? side : SharedOperand::None;
      backend.shared_split_generation_ = -1;
    }
    ~SharedSplit() {
      backend.shared_operand_ = SharedOperand::None;
      backend.shared_split_generation_ = -1;
    }
    SharedSplit(const SharedSplit&) = delete;
    SharedSplit& operator=(const SharedSplit&) = delete;
  };
  SharedOperand shared_operand_ = SharedOperand::None;
  int64_t shared_split_generation_ = -1;

  bool lt_gemm_with(cublasComputeType_t compute, cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n,
                    int64_t k, const void* A, DType a_type, int64_t lda, const void* B, int64_t ldb, float beta,
                    void* C, DType c_type, int64_t ldc, const void* bias, const Batch& batch) {
    const int align = std::min({alignment_of(A), alignment_of(B), alignment_of(C)});
    const LtKey key = std::make_tuple(static_cast<int>(op_a), static_cast<int>(op_b), m, n, k, lda, ldb, ldc,
                                      static_cast<int>(a_type), static_cast<int>(c_type), bias != nullptr,
                                      beta != 0.0f, align, bias ? alignment_of(bias) : 0, batch.count,
                                      batch.stride_a, batch.stride_b, batch.stride_c, batch.stride_bias,
                                      static_cast<int>(compute));
    auto found = lt_plans_.find(key);
    if (found == lt_plans_.end()) {
      found = lt_plans_.emplace(key, make_lt_plan(compute, op_a, op_b, m, n, k, a_type, lda, ldb, c_type, ldc,
                                                  bias != nullptr, beta, align, batch)).first;
      choose_from_cache(found->second, key);
    }
    LtPlan& plan = found->second;
    if (plan.candidates == 0) return false;
    if (bias) {
      ANATOMY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                          sizeof(bias)));
    }
    if (!plan.decided) {
      const size_t a_bytes = extent_bytes(op_a == CUBLAS_OP_N ? m : k, op_a == CUBLAS_OP_N ? k : m, lda,
                                          batch.count, batch.stride_a, a_type);
      const size_t b_bytes = extent_bytes(op_b == CUBLAS_OP_N ? k : n, op_b == CUBLAS_OP_N ? n : k, ldb,
                                          batch.count, batch.stride_b, a_type);
      const size_t c_bytes = extent_bytes(m, n, ldc, batch.count, batch.stride_c, c_type);
      tune_lt_plan(plan, A, a_bytes, B, b_bytes, beta, C, c_bytes);
    }
    const float alpha = 1.0f;
    ANATOMY_CUBLAS_CHECK(cublasLtMatmul(lt_, plan.op, &alpha, A, plan.a, B, plan.b, &beta, C, plan.c, C, plan.c,
                                        &plan.algos[plan.chosen], workspace_.raw(), kCublasWorkspaceBytes, stream_));
    return true;
  }

  // A new plan with candidates to choose from takes the tuning cache's choice
  // when the cache has one for this GPU, cuBLASLt version and plan; else its
  // first call times them.
  void choose_from_cache(LtPlan& plan, const LtKey& key) {
    if (plan.candidates <= 1 || !options().gemm_tuning) {
      plan.decided = true;
      return;
    }
    if (!gemm_choices_) {
      gemm_choices_path_ = gemm_tuning_cache_path();
      gemm_choices_ = load_gemm_choices(gemm_choices_path_, /*warn=*/true);
      // The heuristic's list depends on the GPU and on cuBLASLt's version.
      // "split-K 2,4": the candidates include the split variants (choices
      // cached before them were made without them, and are timed again).
      gemm_key_prefix_ =
          fmt::format("{} | cuBLASLt {} | split-K 2,4", device_identity(device_), cublasLtGetVersion());
    }
    plan.cache_key = gemm_key_prefix_ + " | " + describe_lt_key(key);
    const auto cached = gemm_choices_->find(plan.cache_key);
    if (cached != gemm_choices_->end() && cached->second < plan.candidates) {
      plan.chosen = cached->second;
      plan.decided = true;
    }
  }

  // Every field of the plan's key, the compute type (TF32 or not) included.
  std::string describe_lt_key(const LtKey& key) const {
    const auto& [op_a, op_b, m, n, k, lda, ldb, ldc, a_type, c_type, has_bias, accumulate, align, bias_align, count,
                 stride_a, stride_b, stride_c, stride_bias, compute] = key;
    const auto op = [](int o) { return o == CUBLAS_OP_N ? 'N' : 'T'; };
    const auto a = static_cast<DType>(a_type);
    return fmt::format(
        "{}{} m={} n={} k={} ld={},{},{} {}->{} compute={} bias={} beta={} align={},{} batch={} "
        "strides={},{},{},{}",
        op(op_a), op(op_b), m, n, k, lda, ldb, ldc, dtype_name(a), dtype_name(static_cast<DType>(c_type)),
        compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? "tf32" : "32F", has_bias ? 1 : 0, accumulate ? 1 : 0, align,
        bias_align, count, stride_a, stride_b, stride_c, stride_bias);
  }

  // Times each candidate of `plan` on this call's own operands (kTuneWarmups
  // runs, then the mean of kTuneRuns between two events) and keeps the
  // fastest; a candidate that cuBLASLt refuses is skipped. The candidates
  // write C, which must come out as it went in: with β = 0 the real product
  // that follows overwrites it; with β ≠ 0 (accumulated gradients) it is
  // saved to host memory and restored, host because every device byte goes
  // through the ledger and the memory plan, which a timing copy would escape.
  // Not while stream_ is being captured into a CUDA graph (the timing waits
  // on the host, which a capture forbids), nor when C overlaps A or B (the
  // runs would change the inputs): that call takes the first candidate, and a
  // later call tunes.
  void tune_lt_plan(LtPlan& plan, const void* A, size_t a_bytes, const void* B, size_t b_bytes, float beta, void* C,
                    size_t c_bytes) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    ANATOMY_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
    if (capture != cudaStreamCaptureStatusNone) return;
    if (overlap(C, c_bytes, A, a_bytes) || overlap(C, c_bytes, B, b_bytes)) return;
    std::vector<std::byte> saved;
    if (beta != 0.0f) {
      saved.resize(c_bytes);
      ANATOMY_CUDA_CHECK(cudaMemcpyAsync(saved.data(), C, c_bytes, cudaMemcpyDeviceToHost, stream_));
      ANATOMY_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    if (!tune_start_) {
      ANATOMY_CUDA_CHECK(cudaEventCreate(&tune_start_));
      ANATOMY_CUDA_CHECK(cudaEventCreate(&tune_stop_));
    }
    const float alpha = 1.0f;
    int best = -1;
    float best_ms = 0.0f;
    for (int i = 0; i < plan.candidates; ++i) {
      const auto run = [&] {
        return cublasLtMatmul(lt_, plan.op, &alpha, A, plan.a, B, plan.b, &beta, C, plan.c, C, plan.c, &plan.algos[i],
                              workspace_.raw(), kCublasWorkspaceBytes, stream_) == CUBLAS_STATUS_SUCCESS;
      };
      bool ok = true;
      for (int r = 0; r < kTuneWarmups && ok; ++r) ok = run();
      ANATOMY_CUDA_CHECK(cudaEventRecord(tune_start_, stream_));
      for (int r = 0; r < kTuneRuns && ok; ++r) ok = run();
      ANATOMY_CUDA_CHECK(cudaEventRecord(tune_stop_, stream_));
      ANATOMY_CUDA_CHECK(cudaEventSynchronize(tune_stop_));
      if (!ok) {
        (void)cudaGetLastError();  // a refused launch must not surface at the next kernel's check
        continue;
      }
      float ms = 0.0f;
      ANATOMY_CUDA_CHECK(cudaEventElapsedTime(&ms, tune_start_, tune_stop_));
      if (best < 0 || ms < best_ms) {  // a tie keeps the heuristic's order
        best = i;
        best_ms = ms;
      }
    }
    if (beta != 0.0f) {
      ANATOMY_CUDA_CHECK(cudaMemcpyAsync(C, saved.data(), c_bytes, cudaMemcpyHostToDevice, stream_));
      ANATOMY_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    if (best < 0) return;  // none ran: the real call reports cuBLASLt's error
    ++plans_tuned_;
    // Another process sharing the cache (another rank) may have chosen first:
    // its choice is the one to compute with.
    bool stored = false;
    plan.chosen = record_gemm_choice(gemm_choices_path_, plan.cache_key, best, plan.candidates, &stored);
    plan.decided = true;
    if (!stored && !gemm_store_warned_) {
      gemm_store_warned_ = true;
      std::fprintf(stderr, "warning: cannot write %s; the matrix products' algorithms will be timed again next run\n",
                   gemm_choices_path_.c_str());
    }
  }

  LtPlan make_lt_plan(cublasComputeType_t compute, cublasOperation_t op_a, cublasOperation_t op_b, int64_t m,
                      int64_t n, int64_t k, DType a_type, int64_t lda, int64_t ldb, DType c_type, int64_t ldc,
                      bool bias, float beta, int align, const Batch& batch) {
    LtPlan plan;
    ANATOMY_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, compute, CUDA_R_32F));
    ANATOMY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    ANATOMY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    if (bias) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      ANATOMY_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
      const cudaDataType_t bias_type = cuda_type(c_type);
      ANATOMY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                          sizeof(bias_type)));
    }
    const cudaDataType_t at = cuda_type(a_type), ct = cuda_type(c_type);
    // Column-major layouts of the stored matrices (before the transposes).
    ANATOMY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, at, op_a == CUBLAS_OP_N ? m : k,
                                                    op_a == CUBLAS_OP_N ? k : m, lda));
    ANATOMY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, at, op_b == CUBLAS_OP_N ? k : n,
                                                    op_b == CUBLAS_OP_N ? n : k, ldb));
    ANATOMY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, ct, m, n, ldc));
    if (batch.count > 1) {
      const int32_t count = batch.count;
      const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[] = {
          {plan.a, batch.stride_a}, {plan.b, batch.stride_b}, {plan.c, batch.stride_c}};
      for (const auto& [layout, stride] : layouts) {
        ANATOMY_CUBLAS_CHECK(
            cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
        ANATOMY_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                              &stride, sizeof(stride)));
      }
      if (bias)
        ANATOMY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                                            &batch.stride_bias, sizeof(batch.stride_bias)));
    }
    cublasLtMatmulPreference_t pref = nullptr;
    ANATOMY_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t workspace = kCublasWorkspaceBytes;
    ANATOMY_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                              &workspace, sizeof(workspace)));
    const uint32_t align_bytes = static_cast<uint32_t>(align);
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      ANATOMY_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align_bytes, sizeof(align_bytes)));
    cublasLtMatmulHeuristicResult_t results[kLtCandidates] = {};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt_, plan.op, plan.a, plan.b, plan.c, plan.c, pref,
                                                                 kLtCandidates, results, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (status == CUBLAS_STATUS_SUCCESS) {
      found = std::min(found, kLtCandidates);
      for (int i = 0; i < found; ++i) plan.algos[plan.candidates++] = results[i].algo;
      // The split variants after the heuristic's own, so that a cached index
      // below `found` means the same algorithm. float32 operands only: in 16
      // bits they gained nothing (28f6a8e, and this change's measurements).
      for (int i = 0; i < found && a_type == DType::F32; ++i) {
        int32_t splits = 1;
        size_t written = 0;
        if (cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                                 sizeof(splits), &written) != CUBLAS_STATUS_SUCCESS ||
            splits > 1)
          continue;
        for (const int split : kSplitKs) {
          if (k < 128 * split) continue;
          for (const cublasLtReductionScheme_t reduction : kSplitKReductions) {
            cublasLtMatmulAlgo_t algo = results[i].algo;
            const int32_t split_num = split;
            const uint32_t scheme = reduction;
            cublasLtMatmulHeuristicResult_t check = {};
            if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split_num,
                                                     sizeof(split_num)) != CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                     sizeof(scheme)) != CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulAlgoCheck(lt_, plan.op, plan.a, plan.b, plan.c, plan.c, &algo, &check) !=
                    CUBLAS_STATUS_SUCCESS ||
                check.workspaceSize > kCublasWorkspaceBytes)
              continue;
            plan.algos[plan.candidates++] = algo;
          }
        }
      }
    }
    (void)beta;
    return plan;
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
  Fp32Products fp32_products_ = Fp32Products::Float32;
  Tensor workspace_;
  Tensor scratch_;
  int64_t scratch_generation_ = 0;  // counts the scratch's (re)allocations
  Tensor results_;
  std::vector<cudaEvent_t> markers_;
  size_t markers_used_ = 0;
  cublasLtHandle_t lt_ = nullptr;
  // Asynchronous uploads: the copy stream, the compute stream's mark at the
  // latest upload_wait(), the last upload's completion, pinned staging.
  struct Staging {
    void* host = nullptr;
    size_t bytes = 0;
    cudaEvent_t event = nullptr;
  };
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t compute_mark_ = nullptr, uploads_done_ = nullptr;
  bool uploads_pending_ = false;
  std::vector<Staging> staging_ = std::vector<Staging>(16);
  size_t next_staging_ = 0;
  Tensor adamw_table_;
  std::vector<ParamSegment> adamw_segments_;  // what adamw_table_ was built from
  int64_t adamw_chunks_ = 0;
  std::map<LtKey, LtPlan> lt_plans_;
  // cuBLASLt algorithm tuning (see lt_gemm), on unless options().gemm_tuning is off:
  // the cache's choices (read at the first plan with a choice to make), its
  // path, the GPU and library part of its keys, the events that time the
  // candidates, and how many plans were timed (gemm_plans_tuned, for tests).
  std::optional<GemmChoices> gemm_choices_;
  std::string gemm_choices_path_;
  std::string gemm_key_prefix_;
  bool gemm_store_warned_ = false;
  cudaEvent_t tune_start_ = nullptr, tune_stop_ = nullptr;
  int64_t plans_tuned_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, Fp32Products fp32_products, const EngineOptions& options) {
  if (device < 0 || device >= device_count())
    fail("--device cuda:{}: no such GPU ({} visible)", device, device_count());
  auto backend = std::make_unique<CudaBackend>(device, fp32_products);
  backend->set_options(options);
  return backend;
}

int64_t gemm_plans_tuned(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  ANATOMY_CHECK(cuda, "gemm_plans_tuned: {} is not a CUDA backend", backend.device().str());
  return cuda->plans_tuned();
}

}  // namespace anatomy::cuda
