// cuda_memory.h: every size of device memory the CUDA backend allocates for
// itself, in plain C++ (no CUDA types: it compiles in a CPU-only build). The
// CUDA backend (kernels/cuda) and its kernels use these functions, and so does
// the meta backend (kernels/meta), which runs the model without computing and
// allocates what the CUDA backend would; one definition of each size, so the
// two cannot drift apart. What is here:
//
//   - the CUDA backend's own buffers: the cuBLAS workspace, the host results
//     slot, the grow-on-demand kernel scratch (rounded to 256 bytes);
//   - each kernel's scratch needs, and the shape decisions those depend on
//     (chunks of partial sums, splits of the fused attention's backward, ...),
//     which the launchers use too, so that a scratch size and the launch that
//     fills the scratch cannot disagree;
//   - which attention and LayerNorm cases are fused (the unfused ones take
//     other paths, with other temporaries);
//   - each op's path where it has several with different memory (the
//     *_choice and *_path functions, with the scratch and the temporaries'
//     names of each path): both backends act on the one decision;
//   - AdamW's multi-tensor chunk table.
//
// Kernel sources keep their compile-time tile constants and static_assert
// them against the ones here.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "anatomy/core/dtype.h"
#include "anatomy/core/error.h"
#include "anatomy/kernels/backend.h"

namespace anatomy::cuda {

// ---- the backend's own buffers (cuda_backend.cu) ----

// cuBLAS wants a workspace on Hopper of up to 32 MiB; given through the ledger
// ("cublas_workspace", category workspace), for cuBLAS and cuBLASLt alike.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
// "host_results" (category functionality): float32 elements of the slot that
// losses and sums land in before they are read back (one double is used).
constexpr int64_t kHostResultsFloats = 4;
// The shared kernel scratch ("kernel_scratch", category temporary) is grown to
// the largest need so far, rounded up to this many bytes.
constexpr size_t kScratchRounding = 256;
constexpr size_t scratch_allocation_bytes(size_t need) {
  return (need + kScratchRounding - 1) / kScratchRounding * kScratchRounding;
}

inline bool is_16_byte_aligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// ---- attention ----

// Head sizes of the fused ("flash") kernels: 32, 64 and 128 in bf16/fp16
// (flash_attention.cu); 32 and 64 in float32 (flash_attention_f32.cu).
constexpr bool flash_attention_supported(int64_t head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 128;
}
constexpr bool flash_attention_f32_supported(int64_t head_dim) { return head_dim == 32 || head_dim == 64; }
// Whether the CUDA backend's attention of this dtype and head size is fused
// (saves the row log-sum-exp, not the probabilities). Unfused 16-bit attention
// runs the float32 materialised path on float32 copies of its inputs.
constexpr bool fused_attention(DType dtype, int64_t head_dim) {
  return dtype == DType::F32 ? flash_attention_f32_supported(head_dim) : flash_attention_supported(head_dim);
}

// Materialised float32 attention (attention.cu): the dropped probabilities
// (forward), then dP / dS (backward), one [B, heads, L, L] float buffer.
constexpr size_t attention_scratch_bytes(int64_t B, int64_t heads, int64_t L) {
  return static_cast<size_t>(B * heads * L * L) * sizeof(float);
}

// DeBERTa's relative attention (attention.cu): the materialised attention's
// buffer, then the content-to-position and position-to-content products
// (forward) or their gradients (backward), [heads, B, L, P] floats each, each
// part starting 256-byte aligned.
constexpr size_t relative_attention_part_bytes(size_t bytes) { return (bytes + 255) / 256 * 256; }
constexpr size_t relative_attention_scratch_bytes(int64_t B, int64_t heads, int64_t L, int64_t P) {
  return relative_attention_part_bytes(attention_scratch_bytes(B, heads, L)) +
         2 * relative_attention_part_bytes(static_cast<size_t>(B * heads * L * P) * sizeof(float));
}

// The 16-bit flash backward (flash_attention.cu): query rows per tile, the
// shared memory a block may have on sm_90, keys per tile, and the splits of
// the key tiles (about two blocks per SM of a 132-SM GPU, at most one per key
// tile). dQ stays in shared memory ("resident") when the whole dQ of a
// (batch entry, head) fits next to the tiles and there are enough pairs to
// fill the GPU with one block each. Functions of the shapes only.
constexpr int64_t kFlashTile = 64;
constexpr int64_t kFlashMaxSmem = 232448;
constexpr int64_t kFlashTargetBlocks = 264;
constexpr int64_t flash_backward_keys(int64_t D) { return D <= 64 ? 128 : 64; }
// Shared memory of the backward block besides dQ: K, V; 2 × Q, 2 × dO; dSᵀ; 2 × (lse, Δ).
constexpr int64_t flash_backward_base_smem(int64_t D) {
  const int64_t keys = flash_backward_keys(D);
  return (2 * keys + 4 * kFlashTile) * (D + 8) * 2 + keys * (kFlashTile + 8) * 2 + 4 * kFlashTile * 4;
}
constexpr int64_t flash_backward_splits(int64_t bh, int64_t L, int64_t D) {
  const int64_t tiles = (L + flash_backward_keys(D) - 1) / flash_backward_keys(D);
  const int64_t want = (kFlashTargetBlocks + bh - 1) / bh;
  return std::clamp<int64_t>(want, 1, tiles);
}
constexpr int64_t flash_backward_resident_smem(int64_t L, int64_t D) {
  return flash_backward_base_smem(D) + (L + kFlashTile - 1) / kFlashTile * kFlashTile * D * 4;
}
constexpr bool flash_backward_resident(int64_t bh, int64_t L, int64_t D) {
  return D <= 64 && bh >= 128 && flash_backward_resident_smem(L, D) <= kFlashMaxSmem;
}
// Its scratch: Δ and lse · log2 e (bh·L floats each, 256-byte aligned), then
// the split dQ accumulators unless dQ stays in shared memory.
struct FlashScratchLayout {
  size_t rows = 0, accum = 0, total = 0;
};
constexpr FlashScratchLayout flash_attention_scratch_layout(int64_t bh, int64_t L, int64_t D) {
  FlashScratchLayout s{};
  s.rows = (static_cast<size_t>(bh * L) * sizeof(float) + 255) / 256 * 256;
  s.accum = flash_backward_resident(bh, L, D)
                ? 0
                : static_cast<size_t>(flash_backward_splits(bh, L, D) * bh * L * D) * sizeof(float);
  s.total = 2 * s.rows + s.accum;
  return s;
}
constexpr size_t flash_attention_scratch_bytes(int64_t B, int64_t L, int64_t heads, int64_t D) {
  const int64_t bh = B * heads;
  if (bh <= 0 || L <= 0 || D <= 0) return 0;
  return flash_attention_scratch_layout(bh, L, D).total;
}

// Windowed attention (ModernBERT's local layers) is fused for 16-bit data
// of the flash kernels' head sizes without dropout on the probabilities: the
// flash kernels with a window visit only the key (forward) and query
// (backward) tiles within it. Otherwise the materialised path, which keeps
// the probabilities.
constexpr bool window_attention_fused(DType dtype, int64_t head_dim, float dropout_p) {
  return dtype != DType::F32 && flash_attention_supported(head_dim) && dropout_p <= 0.0f;
}
// The windowed backward's scratch: the flash backward's, then one byte per
// (batch entry, head, query tile of kFlashTile) saying whether a row of the
// tile attends uniformly (no kept key within its window), 256-byte rounded.
constexpr size_t flash_window_flags_bytes(int64_t bh, int64_t L) {
  return (static_cast<size_t>(bh * ((L + kFlashTile - 1) / kFlashTile)) + 255) / 256 * 256;
}
constexpr size_t flash_window_scratch_bytes(int64_t B, int64_t L, int64_t heads, int64_t D) {
  const int64_t bh = B * heads;
  if (bh <= 0 || L <= 0 || D <= 0) return 0;
  return flash_attention_scratch_layout(bh, L, D).total + flash_window_flags_bytes(bh, L);
}

// cuDNN's fused attention (cudnn_attention.cpp): its device inputs at the
// front of the kernel scratch — the dropout seed and offset (two int64), then
// from kCudnnAttentionLengthsOffset the query and key lengths (int32 [B]
// each) — and cuDNN's workspace after them.
constexpr size_t kCudnnAttentionLengthsOffset = 256;
constexpr size_t cudnn_attention_param_bytes(int64_t B) {
  return kCudnnAttentionLengthsOffset + scratch_allocation_bytes(static_cast<size_t>(std::max<int64_t>(B, 0)) * 8);
}
// The scratch the backend reserves for cuDNN's attention (the meta backend
// mirrors it): the inputs above, then room for cuDNN's workspace. cuDNN 9.14
// on an H100 asks 256 bytes for the forward; for its deterministic backward,
// at L a multiple of 128, those 256 bytes, a 16-bit [B, heads, L, L] buffer
// and [B, heads, L] floats, and at other lengths somewhat less than that
// with L rounded up to a multiple of 128. The reservation is that rounded
// size plus 4 KiB, and the backend gives cuDNN the larger of it and what
// cuDNN asks, so the plan is exact unless cuDNN asks for more (which
// test_cuda_cudnn_attention.cpp checks it does not, over shapes from L = 64
// to 1024; the report would show the difference).
constexpr size_t kCudnnAttentionForwardWorkspaceBytes = 256;
constexpr size_t cudnn_attention_forward_scratch_bytes(int64_t B) {
  return cudnn_attention_param_bytes(B) + kCudnnAttentionForwardWorkspaceBytes;
}
constexpr size_t cudnn_attention_backward_scratch_bytes(int64_t B, int64_t L, int64_t heads) {
  const int64_t rounded = (L + 127) / 128 * 128;
  return cudnn_attention_param_bytes(B) + kCudnnAttentionForwardWorkspaceBytes + 4096 +
         static_cast<size_t>(B * heads * rounded) * static_cast<size_t>(2 * rounded + 4);
}
// Whether the CUDA backend's 16-bit fused attention may run through cuDNN:
// the build has cuDNN's attention (ANATOMY_HAVE_CUDNN) and the options do not
// ask for our flash kernels (EngineOptions::attention). (The Hopper kernels
// come first where they apply.)
inline bool cudnn_attention_selected(const EngineOptions& options) {
#ifdef ANATOMY_HAVE_CUDNN
  return options.attention != AttentionKernels::Anatomy;
#else
  (void)options;
  return false;
#endif
}
// Whether the options allow the Hopper kernels (the default). They are the
// default because their own dropout mask makes bert-large's bf16 steps faster
// than with cuDNN's attention (docs/BENCHMARKS.md).
inline bool hopper_attention_selected(const EngineOptions& options) {
  return options.attention == AttentionKernels::Hopper;
}

// The Hopper attention kernels (hopper_attention.cu, wgmma on sm_90a): 16-bit,
// head size 64, and L <= 512 (the backward keeps dQ of a whole batch entry
// and head in shared memory). Where the CUDA backend runs them with dropout it
// keeps the forward's mask as bits, attention_keep_words(L) uint32 words a
// row of the probabilities (backend.h), for the backward to read.
constexpr int64_t kHopperAttentionMaxL = 512;
constexpr bool hopper_attention_shape(DType dtype, int64_t head_dim, int64_t L) {
  return dtype != DType::F32 && head_dim == 64 && L >= 1 && L <= kHopperAttentionMaxL;
}
using anatomy::attention_keep_words;
// The backward's scratch: the row terms Δ and lse·log2(e), [B, heads, L] floats each.
constexpr size_t hopper_attention_scratch_bytes(int64_t B, int64_t L, int64_t heads) {
  return 2 * scratch_allocation_bytes(static_cast<size_t>(std::max<int64_t>(B * heads * L, 0)) * sizeof(float));
}

// The first-query attention kernels (first_query_attention.cu): one block of
// kFirstQueryThreads threads per (batch entry, head), with the query row and a
// row of probabilities in shared memory. The backward, the larger, holds
// 2·kFirstQueryMaxHeadSize + 2·L + kFirstQueryThreads floats, within the 227 KiB
// a block may have on sm_90. Elsewhere the model computes its whole last layer
// (Backend::attention_first_query_supported).
constexpr int64_t kFirstQueryThreads = 256;
constexpr int64_t kFirstQueryMaxHeadSize = 256;
constexpr int64_t kFirstQueryMaxL = (227 * 1024 / 4 - 2 * kFirstQueryMaxHeadSize - kFirstQueryThreads) / 2;
constexpr bool first_query_attention_shape(int64_t head_dim, int64_t L) {
  return head_dim >= 1 && head_dim <= kFirstQueryMaxHeadSize && L >= 1 && L <= kFirstQueryMaxL;
}

// The float32 flash backward (flash_attention_f32.cu): keys per tile, and the
// splits of the key tiles (about kFlashF32TargetBlocks blocks, each with the
// same number of tiles). Its scratch: Δ (bh·L floats, 256-byte aligned), then
// the dQ partial sums of every split.
constexpr int64_t kFlashF32Keys = 64;
constexpr int64_t kFlashF32TargetBlocks = 264;
constexpr int64_t flash_f32_backward_splits(int64_t bh, int64_t L) {
  const int64_t tiles = (L + kFlashF32Keys - 1) / kFlashF32Keys;
  const int64_t want = std::clamp<int64_t>((kFlashF32TargetBlocks + bh - 1) / bh, 1, tiles);
  const int64_t per_block = (tiles + want - 1) / want;
  return (tiles + per_block - 1) / per_block;
}
constexpr size_t flash_f32_delta_bytes(int64_t bh, int64_t L) {
  return (static_cast<size_t>(bh * L) * sizeof(float) + 255) / 256 * 256;
}
constexpr size_t flash_attention_f32_scratch_bytes(int64_t B, int64_t L, int64_t heads, int64_t D) {
  const int64_t bh = B * heads;
  if (bh <= 0 || L <= 0 || D <= 0) return 0;
  return flash_f32_delta_bytes(bh, L) +
         static_cast<size_t>(flash_f32_backward_splits(bh, L) * bh * L * D) * sizeof(float);
}

// ---- the attention ops' paths: one decision, for the CUDA and the meta backend ----

// The paths the CUDA backend's attention takes (cuda_backend.cu), in the order
// it tries them.
enum class AttentionPath {
  Float32Copies,  // 16-bit data whose head size has no fused kernel: the float32 path on float32 copies
  FlashF32,       // the float32 flash kernels
  Hopper,         // the Hopper (sm_90a) kernels
  Cudnn,          // cuDNN's fused attention
  Flash,          // our 16-bit flash kernels
  Materialised,   // float32, probabilities materialised (attention.cu)
};
// What decides the path besides the shapes: whether the device runs the
// Hopper kernels for this shape and the options select them, whether cuDNN
// would take it (asked only where it matters: the CUDA backend loads cuDNN
// the first time), and, with dropout, whether `saved` has room for the
// Hopper kernels' mask bits.
struct AttentionCall {
  DType dtype = DType::F32;
  int64_t B = 0, L = 0, heads = 1, D = 0;
  float dropout = 0.0f;
  bool saved_keeps_bits = false;
  bool hopper = false;
};
// Whether the Hopper kernels run this attention: the shape fits, the options
// select them, and the device runs them (asked last: the CUDA backend probes
// the device the first time).
template <typename DeviceRuns>
bool hopper_attention_runs(DType dtype, int64_t head_dim, int64_t L, const EngineOptions& options,
                           DeviceRuns&& device_runs) {
  return hopper_attention_shape(dtype, head_dim, L) && hopper_attention_selected(options) && device_runs();
}
// The call as attention_forward and attention_backward receive it: q
// [B, L, heads·D], `saved` the tensor the model sized for the backward.
inline AttentionCall attention_call(const Tensor& q, const Tensor& saved, int64_t heads, float dropout, bool hopper) {
  AttentionCall c;
  c.dtype = q.dtype();
  c.B = q.dim(0);
  c.L = q.dim(1);
  c.heads = heads;
  c.D = q.dim(2) / heads;
  c.dropout = dropout;
  c.saved_keeps_bits = saved.defined() && saved.numel() == c.B * heads * c.L * (attention_keep_words(c.L) + 1);
  c.hopper = hopper;
  return c;
}
template <typename CudnnTakes>
AttentionPath attention_forward_path(const AttentionCall& c, bool saved_defined, CudnnTakes&& cudnn_takes) {
  if (c.dtype != DType::F32 && !fused_attention(c.dtype, c.D)) return AttentionPath::Float32Copies;
  if (c.dtype == DType::F32 && fused_attention(DType::F32, c.D)) return AttentionPath::FlashF32;
  // With dropout the Hopper forward where `saved` has room for its mask bits;
  // without dropout cuDNN's forward is the faster, and either backward reads
  // its log-sum-exp.
  if (saved_defined && c.dropout > 0.0f && c.hopper && c.saved_keeps_bits) return AttentionPath::Hopper;
  if (c.dtype != DType::F32) return cudnn_takes() ? AttentionPath::Cudnn : AttentionPath::Flash;
  return AttentionPath::Materialised;
}
template <typename CudnnTakes>
AttentionPath attention_backward_path(const AttentionCall& c, CudnnTakes&& cudnn_takes) {
  if (c.dtype != DType::F32 && !fused_attention(c.dtype, c.D)) return AttentionPath::Float32Copies;
  if (c.dtype == DType::F32 && fused_attention(DType::F32, c.D)) return AttentionPath::FlashF32;
  if (c.hopper && (c.dropout == 0.0f || c.saved_keeps_bits)) return AttentionPath::Hopper;
  if (c.dtype != DType::F32) return cudnn_takes() ? AttentionPath::Cudnn : AttentionPath::Flash;
  return AttentionPath::Materialised;
}
// The kernel scratch a path plans for (Float32Copies: none of its own; the
// float32 call it makes plans its own). cuDNN gets the larger of this and
// what it asks, which its test checks is never more.
constexpr size_t attention_forward_scratch_bytes(AttentionPath path, const AttentionCall& c) {
  switch (path) {
    case AttentionPath::Cudnn: return cudnn_attention_forward_scratch_bytes(c.B);
    case AttentionPath::Materialised: return attention_scratch_bytes(c.B, c.heads, c.L);
    default: return 0;
  }
}
constexpr size_t attention_backward_scratch_bytes(AttentionPath path, const AttentionCall& c) {
  switch (path) {
    case AttentionPath::FlashF32: return flash_attention_f32_scratch_bytes(c.B, c.L, c.heads, c.D);
    case AttentionPath::Hopper: return hopper_attention_scratch_bytes(c.B, c.L, c.heads);
    case AttentionPath::Cudnn: return cudnn_attention_backward_scratch_bytes(c.B, c.L, c.heads);
    case AttentionPath::Flash: return flash_attention_scratch_bytes(c.B, c.L, c.heads, c.D);
    case AttentionPath::Materialised: return attention_scratch_bytes(c.B, c.heads, c.L);
    default: return 0;
  }
}
// The backward paths that write dq, dk and dv at any row stride, and so write
// attention_backward_interleaved's gradients in place; the others write three
// temporaries of q's shape and dtype, kInterleavedTemporaries, which are then
// interleaved.
constexpr bool attention_backward_strided(AttentionPath path) {
  return path == AttentionPath::FlashF32 || path == AttentionPath::Hopper || path == AttentionPath::Cudnn;
}
inline constexpr const char* kInterleavedTemporaries[] = {"dq", "dk", "dv"};
// Float32Copies' temporaries (category temporary, float32, in this order,
// freed together): the forward's ctx (empty), q, k, v (casts); the
// backward's dq, dk, dv (empty), dctx, q, k, v (casts).
inline constexpr const char* kForwardFloat32Copies[] = {"ctx_f32", "q_f32", "k_f32", "v_f32"};
// DeBERTa's relative attention in 16 bits: its position operands and their
// gradients as float32 copies, made after the others.
inline constexpr const char* kRelativeFloat32Copies[] = {"pos_q_f32", "pos_k_f32", "dpos_q_f32", "dpos_k_f32"};
inline constexpr const char* kBackwardFloat32Copies[] = {"dq_f32", "dk_f32", "dv_f32", "dctx_f32",
                                                         "q_f32",  "k_f32",  "v_f32"};

// ---- LayerNorm ----

// The plain LayerNorm backward (layernorm.cu): dgamma/dbeta partial sums (in
// double) over chunks of at least 32 rows, at most 128 chunks.
constexpr int64_t kLayerNormMaxChunks = 128;
constexpr int64_t kLayerNormMinChunkRows = 32;
constexpr int64_t layernorm_partial_chunks(int64_t rows) {
  return std::clamp<int64_t>((rows + kLayerNormMinChunkRows - 1) / kLayerNormMinChunkRows, 1, kLayerNormMaxChunks);
}
constexpr size_t layernorm_backward_scratch_bytes(int64_t rows, int64_t H) {
  if (rows <= 0 || H <= 0) return 0;
  return static_cast<size_t>(2 * layernorm_partial_chunks(rows) * H) * sizeof(double);
}

// The fused residual LayerNorm (fused_layernorm.cu): rows of H elements, H a
// multiple of 8 up to 8 groups of 256, 16-byte aligned tensors. Its backward
// and the 16-bit bias-gradient column sums keep float partial sums over
// chunks of 32 rows, or of fewer (down to 8) when that keeps more blocks busy,
// at most 512 chunks.
constexpr int64_t kFusedLayerNormMaxGroups = 8;
constexpr int64_t kFusedLayerNormMaxChunks = 512;
inline bool fused_layernorm_supported(int64_t H, std::initializer_list<const void*> pointers) {
  if (H <= 0 || H % 8 != 0 || H > 256 * kFusedLayerNormMaxGroups) return false;
  for (const void* p : pointers)
    if (!is_16_byte_aligned(p)) return false;
  return true;
}
// The fused embeddings block (embedding_norm.cu): float32 tables, rows of H
// elements, H a multiple of 4 up to 2048, 16-byte aligned tensors. Its
// backward takes layernorm_backward_scratch_bytes, as the plain path does.
inline bool embeddings_layernorm_fused_supported(int64_t H, std::initializer_list<const void*> pointers) {
  if (H <= 0 || H % 4 != 0 || H > 2048) return false;
  for (const void* p : pointers)
    if (!is_16_byte_aligned(p)) return false;
  return true;
}
constexpr int64_t fused_partial_chunks(int64_t rows) {
  const int64_t rows_per_chunk = std::clamp<int64_t>(rows / (2 * kFusedLayerNormMaxChunks), 8, 32);
  return std::clamp<int64_t>((rows + rows_per_chunk - 1) / rows_per_chunk, 1, kFusedLayerNormMaxChunks);
}
// Partials of dgamma and dbeta, and of the bias gradient when the caller asks for it.
constexpr size_t residual_layernorm_backward_scratch_bytes(int64_t rows, int64_t H, bool bias = false) {
  if (rows <= 0 || H <= 0) return 0;
  return static_cast<size_t>((bias ? 3 : 2) * fused_partial_chunks(rows) * H) * sizeof(float);
}
// db += Σ_rows dy for a 16-bit dy [rows, N]: the fast kernel takes N % 8 == 0
// and a 16-byte aligned dy; otherwise a kernel without scratch runs.
inline bool column_sums_half_supported(int64_t N, const void* dy) {
  return N > 0 && N % 8 == 0 && N <= 0x7fffffff && is_16_byte_aligned(dy);
}
// The activation backward that recomputes the forward (float32 or 16-bit) also
// sums the bias gradient in its pass when the rows are N % 8 == 0 elements and
// every pointer is 16-byte aligned (scratch: column_sums_scratch_bytes).
inline bool recompute_bias_supported(int64_t N, std::initializer_list<const void*> pointers) {
  if (N <= 0 || N % 8 != 0 || N > 0x7fffffff) return false;
  for (const void* p : pointers)
    if (!is_16_byte_aligned(p)) return false;
  return true;
}
// Float partials, one row per chunk of rows: the 16-bit column sums and the
// recomputing activation backward's bias sums (float32 or 16-bit).
constexpr size_t column_sums_scratch_bytes(int64_t rows, int64_t N) {
  if (rows <= 0 || N <= 0) return 0;
  return static_cast<size_t>(fused_partial_chunks(rows) * N) * sizeof(float);
}

// ---- the normalisation and bias ops' paths: one decision each ----

// An op's path on the CUDA backend with the kernel scratch it takes there.
template <typename Path>
struct OpChoice {
  Path path;
  size_t scratch = 0;
};

// The bias gradient db += Σ_rows dy (dy [rows, N], db float32 [N]): float32
// column sums; 16-bit through the fast kernel (scratch: float partials); or
// 16-bit through the kernel without scratch.
enum class BiasGradientPath { Float32, HalfFast, Half };
inline OpChoice<BiasGradientPath> bias_gradient_choice(const Tensor& dy, const Tensor& db) {
  const int64_t N = db.numel(), M = N > 0 ? dy.numel() / N : 0;
  if (dy.dtype() == DType::F32) return {BiasGradientPath::Float32};
  if (column_sums_half_supported(N, dy.raw())) return {BiasGradientPath::HalfFast, column_sums_scratch_bytes(M, N)};
  return {BiasGradientPath::Half};
}

// residual_layernorm_backward: fused (scratch: its partial sums), or the
// plain LayerNorm backward, a copy, the dropout and the bias gradient, each
// taking its own.
enum class ResidualLayerNormPath { Fused, Unfused };
inline OpChoice<ResidualLayerNormPath> residual_layernorm_backward_choice(const Tensor& dy, const Tensor& sum,
                                                                          const Tensor& d_residual, const Tensor& d_x,
                                                                          bool bias) {
  const int64_t H = sum.dim(-1);
  if (!fused_layernorm_supported(H, {dy.raw(), sum.raw(), d_residual.raw(), d_x.raw()}))
    return {ResidualLayerNormPath::Unfused};
  return {ResidualLayerNormPath::Fused, residual_layernorm_backward_scratch_bytes(sum.numel() / H, H, bias)};
}

// activation_backward_recompute: with a bias gradient, the pass that also
// sums it (scratch: column sums' partials) where the rows allow; otherwise the
// recomputing backward, then (with a bias) bias_gradient.
enum class RecomputePath { WithBias, Plain };
inline OpChoice<RecomputePath> activation_backward_recompute_choice(const Tensor& x, const Tensor& dy,
                                                                    const Tensor& dx, const Tensor& y, bool bias) {
  const int64_t N = x.dim(-1);
  if (bias && recompute_bias_supported(N, {x.raw(), dy.raw(), dx.raw(), y.raw()}))
    return {RecomputePath::WithBias, column_sums_scratch_bytes(x.numel() / N, N)};
  return {RecomputePath::Plain};
}

// The constant stride, in elements, between consecutive tensors of `ts` (all
// of one dtype and shape, at increasing addresses), or nullopt: when the CUDA
// backend batches the products of linear_forward_n and
// linear_backward_weights_n, and their bias sums.
inline std::optional<int64_t> constant_stride(const std::vector<Tensor>& ts) {
  if (ts.size() < 2) return std::nullopt;
  const auto size = static_cast<int64_t>(dtype_size(ts[0].dtype()));
  const auto at = [](const Tensor& t) { return reinterpret_cast<intptr_t>(t.raw()); };
  const int64_t bytes = at(ts[1]) - at(ts[0]);
  if (bytes <= 0 || bytes % size != 0) return std::nullopt;
  for (size_t i = 1; i < ts.size(); ++i)
    if (ts[i].dtype() != ts[0].dtype() || ts[i].shape() != ts[0].shape() || at(ts[i]) - at(ts[i - 1]) != bytes)
      return std::nullopt;
  return bytes / size;
}
// Whether linear_backward_weights_n runs its weight gradients as one
// strided-batched cuBLASLt product (16-bit operands, float32 gradients, dy and
// dw at constant strides). Measured on an H100, float32's batched products
// ran slower than separate ones, so float32 takes them one at a time.
inline bool batched_weight_gradients(const std::vector<Tensor>& dy, const Tensor& x, const std::vector<Tensor>& w,
                                     const std::vector<Tensor>& dw, const std::vector<Tensor>& db) {
  const DType t = x.dtype();
  if (t == DType::F32 || dy.empty() || dy.size() != dw.size() || dy.size() != db.size() || dy.size() != w.size())
    return false;
  return dy[0].dtype() == t && dw[0].dtype() == DType::F32 && dw[0].numel() == w[0].numel() &&
         dy[0].numel() == (x.numel() / std::max<int64_t>(x.dim(-1), 1)) * w[0].dim(0) &&
         constant_stride(dy).has_value() && constant_stride(dw).has_value();
}
// Whether the bias gradients db[i] += Σ_rows dy[i] of linear_backward_weights_n's
// batched products run as one launch pair (column_sums_accumulate_half_fast
// with planes): 16-bit dy, float32 db, each pair as bias_gradient takes it
// and column_sums_half_supported, dy and db at constant strides (the biases
// apart, not overlapping). Scratch: batched_bias_sums_scratch_bytes.
inline bool batched_bias_sums(const std::vector<Tensor>& dy, const std::vector<Tensor>& db) {
  if (dy.size() < 2 || dy.size() != db.size() || dy.size() > 65535 || dy[0].dtype() == DType::F32) return false;
  const int64_t N = db[0].numel();
  if (N <= 0 || dy[0].numel() % N != 0) return false;
  for (size_t i = 0; i < dy.size(); ++i)
    if (db[i].dtype() != DType::F32 || db[i].numel() != N || dy[i].numel() != dy[0].numel() ||
        !column_sums_half_supported(N, dy[i].raw()))
      return false;
  const auto db_stride = constant_stride(db);  // the sums must not overlap: one launch writes them all
  return constant_stride(dy).has_value() && db_stride.has_value() && *db_stride >= N;
}
// The scratch of that launch (where batched_bias_sums holds): every plane's
// float partials, one column_sums_scratch_bytes each.
inline size_t batched_bias_sums_scratch_bytes(const std::vector<Tensor>& dy, const std::vector<Tensor>& db) {
  const int64_t N = db[0].numel();
  return dy.size() * column_sums_scratch_bytes(dy[0].numel() / N, N);
}

// linear_backward_weights_n: the weight gradients as one batched product
// with the bias sums in one launch (scratch: every plane's partials), or the
// batched product with one bias gradient at a time, or (Separate) one
// linear_backward at a time (Backend's default). The CUDA backend falls back
// to Separate where cuBLASLt finds no batched algorithm (not seen on an H100).
enum class WeightGradientsPath { BatchedWithBiasSums, BatchedThenBiases, Separate };
inline OpChoice<WeightGradientsPath> linear_backward_weights_n_choice(const std::vector<Tensor>& dy, const Tensor& x,
                                                                      const std::vector<Tensor>& w,
                                                                      const std::vector<Tensor>& dw,
                                                                      const std::vector<Tensor>& db) {
  if (!batched_weight_gradients(dy, x, w, dw, db)) return {WeightGradientsPath::Separate};
  if (batched_bias_sums(dy, db))
    return {WeightGradientsPath::BatchedWithBiasSums, batched_bias_sums_scratch_bytes(dy, db)};
  return {WeightGradientsPath::BatchedThenBiases};
}

// ---- split-TF32 float32 products (split_tf32.cu, Fp32Products::SplitTf32) ----

// C[m,n] = op(A)[m,k] · op(B)[k,n] runs as one TF32 product of depth 3k on
// split copies of its operands: A' = [A_lo A_hi A_hi] (m x 3k) at the start
// of the scratch, then B' = [B_hi; B_lo; B_hi] (3k x n) at a 256-byte
// boundary, both float32. Empty products are not split.
constexpr size_t split_tf32_b_offset(int64_t m, int64_t k) {
  const size_t a = static_cast<size_t>(3 * m * k) * sizeof(float);
  return (a + kScratchRounding - 1) / kScratchRounding * kScratchRounding;
}
constexpr size_t split_tf32_scratch_bytes(int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  return split_tf32_b_offset(m, k) + static_cast<size_t>(3 * k * n) * sizeof(float);
}

// ---- embeddings (embedding.cu) ----

// The backward sorts the T token ids (CUB's radix sort of 64-bit keys with
// 32-bit token indices), then sums each id's rows over chunks of S positions
// (partial slots budgeted at kEmbeddingPartialDoublesPerToken doubles per token).
constexpr int64_t kEmbeddingMinChunk = 64;
constexpr int64_t kEmbeddingPartialDoublesPerToken = 16;
constexpr int64_t embedding_backward_chunk(int64_t H) { return std::max(kEmbeddingMinChunk, (H + 3) / 4); }
// CUB's temporary storage for cub::DeviceRadixSort::SortPairs of T
// (uint64_t key, int32_t value) pairs over all 64 key bits, as CCCL 3.0 (CUDA
// 13.0) computes it for sm_90 and later: 1 byte for a single tile (up to 2304
// items), else its one-sweep allocations (bins, lookback, the other key and
// value buffers, counters), each rounded to 256 bytes, plus 255. embedding.cu
// checks at run time that CUB asks for no more than this.
size_t cub_sort_pairs_bytes(int64_t T);
// Where each piece of the scratch lies, all 256-byte aligned: the sorted keys,
// token indices in and sorted, the chunks' partial sums, CUB's storage.
struct EmbeddingScratchLayout {
  size_t keys_sorted = 0, tokens_in = 0, tokens_sorted = 0, partials = 0, cub = 0, cub_bytes = 0, total = 0;
  explicit EmbeddingScratchLayout(int64_t T);
};
// 0 for T <= 0; fails for more tokens than one sort handles (INT_MAX).
size_t embedding_backward_scratch_bytes(int64_t T);

// ---- optimizer (optimizer.cu) ----

// Blocks of the first level of the deterministic reductions (sum of squares,
// the finite checks): a function of n alone, at most 1024, each of 256 threads
// × 16 items; one partial (a double, or an int flag) per block.
constexpr int64_t kReductionThreads = 256;
constexpr int64_t kReductionItemsPerThread = 16;
constexpr int64_t kReductionMaxBlocks = 1024;
constexpr int64_t reduction_blocks(int64_t n) {
  return std::clamp<int64_t>((n + kReductionThreads * kReductionItemsPerThread - 1) /
                                 (kReductionThreads * kReductionItemsPerThread),
                             1, kReductionMaxBlocks);
}
// cross_entropy_sum: a partial sum (double) per warp of its fixed grid and a
// flag for labels out of range, whatever the rows.
inline constexpr int64_t kCrossEntropySumWarps = 2048;
constexpr size_t cross_entropy_sum_scratch_bytes(int64_t rows) {
  (void)rows;
  return static_cast<size_t>(kCrossEntropySumWarps) * sizeof(double) + 16;
}
constexpr size_t sum_of_squares_scratch_bytes(int64_t n) {
  return static_cast<size_t>(reduction_blocks(n)) * sizeof(double);
}
constexpr size_t all_finite_scratch_bytes(int64_t n) { return static_cast<size_t>(reduction_blocks(n)) * sizeof(int); }

// Multi-tensor AdamW: the segments cut into chunks of at most kAdamWChunk
// elements of one parameter group each; block b of the kernel updates chunk b.
constexpr int64_t kAdamWChunk = 8192;
struct AdamWChunk {
  int64_t begin, end;
  int64_t decay;  // 1: the group's weight decay; 0: none
};
// Builds the table for the device (bytes of AdamWChunk) and returns the number of chunks.
int64_t adamw_chunk_table(const std::vector<ParamSegment>& segments, std::vector<unsigned char>& table);
// Float32 elements of the "adamw_chunk_table" tensor (category functionality)
// that holds `table_bytes` bytes of the table (one more than needed, so that
// it is never empty).
constexpr int64_t adamw_chunk_table_floats(size_t table_bytes) {
  return static_cast<int64_t>((table_bytes + 3) / 4) + 1;
}

// ---- Adafactor (adafactor.cu) ----

// A matrix's column sums of grad² + eps are taken over `slices` runs of rows
// (partial sums in the scratch, then added in slice order), so that a tall
// matrix still fills the GPU: about 16 rows a slice, and never more partials
// than kAdafactorColumnPartials doubles. The update's sum of squares is taken
// over adafactor_rms_blocks(n) fixed blocks. Functions of the shapes only, so
// the summation order, and the result, are fixed.
constexpr int64_t kAdafactorColumnPartials = int64_t{1} << 18;
constexpr int64_t kAdafactorRowsPerSlice = 16;
constexpr int64_t kAdafactorMaxRmsBlocks = 1024;
constexpr int64_t kAdafactorRmsItemsPerBlock = 256 * 16;
constexpr int64_t kAdafactorMaxSlices = 65535;  // a grid's y extent
constexpr int64_t adafactor_column_slices(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 1;
  return std::max<int64_t>(1, std::min({(rows + kAdafactorRowsPerSlice - 1) / kAdafactorRowsPerSlice,
                                        kAdafactorColumnPartials / cols, kAdafactorMaxSlices}));
}
constexpr int64_t adafactor_rms_blocks(int64_t n) {
  return std::clamp<int64_t>((n + kAdafactorRmsItemsPerBlock - 1) / kAdafactorRmsItemsPerBlock, 1,
                             kAdafactorMaxRmsBlocks);
}

// The scratch of one Adafactor step on a tensor of n elements, laid out as
// AdafactorScratch says: its reductions' partial sums (the column sums of a
// matrix, the update's sum of squares) and two scalars (the mean of the row
// state, the clipping divisor). A function of n alone (any matrix of n elements fits).
struct AdafactorScratch {
  static constexpr size_t kRmsPartials = 0;  // kAdafactorMaxRmsBlocks doubles
  static constexpr size_t kScalars = kRmsPartials + kAdafactorMaxRmsBlocks * sizeof(double);  // 2 floats
  static constexpr size_t kColumnPartials = kScalars + 256;  // slices · cols doubles
};
size_t adafactor_scratch_bytes(int64_t n);

}  // namespace anatomy::cuda
