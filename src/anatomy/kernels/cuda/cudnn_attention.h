// cudnn_attention.h: fused multi-head attention in bf16/fp16 through cuDNN 9's
// scaled-dot-product-attention graphs (the cuDNN frontend's sdpa and
// sdpa_backward nodes), the faster alternative to our own flash kernels
// (flash_attention.cuh) on Hopper. Built only when the frontend's headers were
// found (ANATOMY_HAVE_CUDNN); libcudnn.so.9 is linked.
//
// Semantics against the CPU reference (kernels/cpu/cpu_backend.cpp):
//   - scores scale·q·kᵀ, softmax over the keys, probabilities @ v, float32
//     accumulation, the row log-sum-exp (natural log) saved for backward —
//     the same [B, heads, L] float32 `saved` tensor as our flash kernels;
//   - the key padding mask is cuDNN's padding mask: key j of batch entry b is
//     attended when j < length[b]. That is the reference's mask only for masks
//     of the form 1…1 0…0 (right padding), which the data layer guarantees
//     (data/dataset.cpp refuses any other attention_mask); every query row is
//     computed, padded ones included, as Hugging Face does;
//   - dropout on the probabilities with cuDNN's own Philox stream, seeded from
//     (DropoutSpec.seed, DropoutSpec.stream): the same seed gives the same mask
//     in forward, in a recomputed forward and in backward, so results are
//     deterministic, but the mask is not the CPU reference's (nor our flash
//     kernels'). Tests compare against a reference built on the mask cuDNN
//     reports (forward_with_mask).
//   - backward with cuDNN's deterministic algorithm: same inputs, same bits.
//
// Layout: q, k, v, ctx and their gradients are [B, L, heads*D] with heads
// interleaved, 16-byte aligned, as flash_attention.cuh; with
// interleaved_grads, the gradients' rows are 3·heads·D elements apart.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "anatomy/kernels/backend.h"

namespace anatomy::cuda {

struct CudnnAttentionShape {
  int64_t B = 0, L = 0, heads = 0, D = 0;
  bool bf16 = true;       // else fp16
  bool masked = false;    // a key padding mask (right padding)
  float dropout = 0.0f;   // probability; 0: none
  bool training = true;   // forward saves the row log-sum-exp
  float scale = 0.0f;
  // Backward only: dq, dk, dv interleaved per token (Backend::
  // attention_backward_interleaved), a row of 3·heads·D elements holding the
  // three at columns 0, heads·D and 2·heads·D; pass dq, dk, dv pointing there.
  bool interleaved_grads = false;
};

class CudnnAttention {
 public:
  // cuDNN bound to `stream`; nullptr with *why set when cuDNN cannot be used
  // (library missing or too old, no fused attention for this GPU).
  static std::unique_ptr<CudnnAttention> create(cudaStream_t stream, const EngineOptions& options, std::string* why);
  virtual ~CudnnAttention() = default;

  // "cuDNN 9.14.0", for the run's header.
  virtual std::string describe() const = 0;

  // Whether cuDNN has fused graphs for this shape (forward and, when
  // training, backward); builds and caches them on first use. Failure is
  // remembered, not retried.
  virtual bool supports(const CudnnAttentionShape& s) = 0;
  // Device bytes the forward / backward need: kCudnnAttentionParamBytes(B)
  // for the lengths and seeds (cuda_memory.h), then cuDNN's workspace.
  virtual size_t forward_scratch_bytes(const CudnnAttentionShape& s) = 0;
  virtual size_t backward_scratch_bytes(const CudnnAttentionShape& s) = 0;

  // key_mask: int64 [B, L] or nullptr (when !s.masked). lse: float32
  // [B, heads, L] (written when s.training). scratch: *_scratch_bytes(s).
  // dropout_mask: nullptr, or float32 [B, heads, L, L] receiving the keep
  // mask (1 kept / 0 dropped) cuDNN drew, for tests.
  virtual void forward(const CudnnAttentionShape& s, const void* q, const void* k, const void* v,
                       const int64_t* key_mask, const DropoutSpec& dropout, void* ctx, float* lse, void* scratch,
                       float* dropout_mask = nullptr) = 0;
  // dq, dk, dv are written (=).
  virtual void backward(const CudnnAttentionShape& s, const void* dctx, const void* q, const void* k, const void* v,
                        const void* ctx, const float* lse, const int64_t* key_mask, const DropoutSpec& dropout,
                        void* dq, void* dk, void* dv, void* scratch) = 0;
};

}  // namespace anatomy::cuda
