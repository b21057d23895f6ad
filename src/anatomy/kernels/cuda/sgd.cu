// sgd.cu: torch.optim.SGD over the flat buffers, one launch per parameter
// tensor (segment). Every operation is rounded as the CPU reference rounds it:
// each of torch's `x.add(y, alpha=a)` one fused multiply-add (__fmaf_rn), the
// lone product __fmul_rn (kept from fusing), so both give torch's bits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/half_types.cuh"
#include "anatomy/kernels/cuda/optimizer_kernels.cuh"

namespace anatomy::cuda {

namespace {

template <typename HalfT>
__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ buf,
                           HalfT* __restrict__ half, int64_t begin, int64_t end, float lr, float wd, float mu,
                           float keep, float grad_scale, bool first_step, bool nesterov) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < end; i += stride) {
    float d = __fmul_rn(g[i], grad_scale);  // exact when the scale is 1
    const float w = p[i];
    if (wd != 0.0f) d = __fmaf_rn(w, wd, d);
    if (buf != nullptr) {
      const float b = first_step ? d : __fmaf_rn(d, keep, __fmul_rn(mu, buf[i]));
      buf[i] = b;
      d = nesterov ? __fmaf_rn(b, mu, d) : b;
    }
    const float updated = __fmaf_rn(d, -lr, w);
    p[i] = updated;
    if (half != nullptr) half[i] = from_float<HalfT>(updated);
  }
}

template <typename HalfT>
void launch(cudaStream_t stream, const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
            const std::vector<ParamSegment>& segments, const SgdHyper& h, HalfT* half) {
  float* buf = h.momentum != 0.0 ? momentum_buf.data<float>() : nullptr;
  for (const ParamSegment& seg : segments) {
    if (seg.count == 0) continue;
    constexpr int kThreads = 256;
    const auto blocks = static_cast<unsigned>(std::min<int64_t>((seg.count + kThreads - 1) / kThreads, 132 * 8));
    sgd_kernel<HalfT><<<blocks, kThreads, 0, stream>>>(
        param.data<float>(), grad.data<float>(), buf, half, seg.offset, seg.offset + seg.count,
        static_cast<float>(h.lr), seg.weight_decay ? static_cast<float>(h.weight_decay) : 0.0f,
        static_cast<float>(h.momentum), static_cast<float>(1.0 - h.dampening), static_cast<float>(h.grad_scale),
        h.first_step, h.nesterov);
    ANATOMY_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace

void sgd_step_flat(cudaStream_t stream, const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                   const std::vector<ParamSegment>& segments, const SgdHyper& h, const Tensor* half_copy) {
  ANATOMY_CHECK(param.numel() == grad.numel(), "sgd_step_flat: {} and {} differ in size", param.name(), grad.name());
  ANATOMY_CHECK(h.momentum == 0.0 || (momentum_buf.defined() && momentum_buf.numel() == param.numel()),
                "sgd_step_flat: momentum {} needs a momentum buffer of {} elements", h.momentum, param.numel());
  check_segments(segments, param, "sgd_step_flat");
  if (!half_copy) return launch<float>(stream, param, grad, momentum_buf, segments, h, nullptr);
  ANATOMY_CHECK(half_copy->numel() == param.numel(), "sgd_step_flat: the half copy {} differs in size",
                half_copy->name());
  if (half_copy->dtype() == DType::BF16)
    return launch(stream, param, grad, momentum_buf, segments, h, half_copy->data<__nv_bfloat16>());
  ANATOMY_CHECK(half_copy->dtype() == DType::F16, "sgd_step_flat: the half copy {} is {}", half_copy->name(),
                dtype_name(half_copy->dtype()));
  launch(stream, param, grad, momentum_buf, segments, h, half_copy->data<__half>());
}

}  // namespace anatomy::cuda
