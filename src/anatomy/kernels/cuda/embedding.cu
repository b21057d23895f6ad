// embedding.cu: the CUDA embedding lookup and its deterministic backward.
//
// Backward must add dout[t] into dtable[ids[t]] for every token, and many
// tokens share an id (the token-type table has two rows for thousands of
// tokens). Atomics would make the float sums depend on scheduling, so instead:
//   1. sort (id, token) pairs by id with CUB's stable radix sort, so each id's
//      tokens form one run in token order;
//   2. cut the sorted list into chunks of S positions; one block per chunk and
//      column tile walks its chunk. A run that lies inside the chunk is added
//      straight into dtable, in token order, in float, exactly as the CPU does
//      (bit-identical results); a piece of a run that crosses a chunk border
//      is summed in double into a partial slot of `scratch`;
//   3. for each run that crosses borders, the block of the chunk it starts in
//      adds its partials in chunk order (= token order) and adds the total to
//      dtable once.
// Every sum has a fixed order, so the result is the same bits on every run.
//
// Mixed precision: the forward sums the word, position and token-type rows
// (float32 master tables) in float and rounds the sum once to bf16/fp16; the
// backward takes a 16-bit dout through the same kernels, templated over
// dout's element type, which gives the float32 backward's bits on the
// widened dout.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>
#include <cub/device/device_radix_sort.cuh>

#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/half_types.cuh"
#include "anatomy/kernels/cuda/kernels.cuh"

namespace anatomy::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kColumnThreads = 128;  // columns per block in the backward kernels
constexpr int kRunLanes = 4;         // runs of one chunk summed side by side
// Partial slots are budgeted at kEmbeddingPartialDoublesPerToken doubles per
// token (cuda_memory.h, which lays out the scratch); choose_chunk() picks S so
// that 2 slots of H doubles per chunk always fit (proof there).
constexpr int64_t kPartialDoublesPerToken = kEmbeddingPartialDoublesPerToken;

unsigned blocks_for(int64_t work, int threads = kThreads) {
  return static_cast<unsigned>(std::clamp<int64_t>((work + threads - 1) / threads, 1, 65536));
}

// Element types: half_types.cuh.

// Positions per chunk. With S >= H/4 and more than one chunk (so T > S):
// slots = 2·ceil(T/S)·H < 2·(T/S + 1)·H = 2TH/S + 2H <= 8T + 2H < 8T + 8T,
// which is within the budget of 16 doubles per token.
int64_t choose_chunk(int64_t H) { return embedding_backward_chunk(H); }

// What CUB asks for a sort of T pairs. A size query (null storage) launches
// nothing. All 64 key bits: the launcher sorts fewer, which never needs more storage.
size_t cub_sort_bytes(int64_t T) {
  size_t bytes = 0;
  ANATOMY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint64_t*>(nullptr),
                                                     static_cast<uint64_t*>(nullptr),
                                                     static_cast<const int32_t*>(nullptr),
                                                     static_cast<int32_t*>(nullptr), static_cast<int>(T), 0, 64));
  return bytes;
}

// The scratch's layout is EmbeddingScratchLayout (cuda_memory.h), whose CUB
// part is a model of CUB's size query (so that it is known without a GPU).
using ScratchLayout = EmbeddingScratchLayout;

template <bool kVec4>
__global__ void embedding_forward_kernel(const int64_t* ids, const float* table, float* out, int64_t T, int64_t H,
                                         bool accumulate) {
  // Items are single floats, or float4 groups when H % 4 == 0 and aligned.
  const int64_t width = kVec4 ? 4 : 1;
  const int64_t per_row = H / width;
  const int64_t n = T * per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t t = i / per_row, c = (i - t * per_row) * width;
    const float* src = table + ids[t] * H + c;
    float* dst = out + t * H + c;
    if constexpr (kVec4) {
      float4 v = *reinterpret_cast<const float4*>(src);
      if (accumulate) {
        const float4 o = *reinterpret_cast<const float4*>(dst);
        v = make_float4(o.x + v.x, o.y + v.y, o.z + v.z, o.w + v.w);
      }
      *reinterpret_cast<float4*>(dst) = v;
    } else {
      *dst = accumulate ? *dst + *src : *src;
    }
  }
}

// The same from a 16-bit table (inference's weights, or a gather of rows of
// 16-bit activations), each element widened exactly.
template <typename T>
__global__ void embedding_forward_half_kernel(const int64_t* ids, const T* table, float* out, int64_t T_, int64_t H,
                                              bool accumulate) {
  const int64_t n = T_ * H;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t t = i / H, c = i - t * H;
    const float x = to_float(table[ids[t] * H + c]);
    out[i] = accumulate ? out[i] + x : x;
  }
}

// Eight floats of a table row (16-byte aligned): loaded into acc, or added to it.
__device__ __forceinline__ void load_row8(float (&acc)[8], const float* src) {
  const float4 a = reinterpret_cast<const float4*>(src)[0], b = reinterpret_cast<const float4*>(src)[1];
  acc[0] = a.x, acc[1] = a.y, acc[2] = a.z, acc[3] = a.w;
  acc[4] = b.x, acc[5] = b.y, acc[6] = b.z, acc[7] = b.w;
}
__device__ __forceinline__ void add_row8(float (&acc)[8], const float* src) {
  const float4 a = reinterpret_cast<const float4*>(src)[0], b = reinterpret_cast<const float4*>(src)[1];
  acc[0] += a.x, acc[1] += a.y, acc[2] += a.z, acc[3] += a.w;
  acc[4] += b.x, acc[5] += b.y, acc[6] += b.z, acc[7] += b.w;
}

// out[t, c] = round((word + pos) + type) at column c: the float adds happen in
// the order of the three float32 embedding_forward calls. Items are single
// columns, or groups of eight (one 16-byte store of 16-bit data, two float4
// loads per table) when H % 8 == 0 and every table and out are 16-byte aligned.
template <typename T, bool kVec8>
__global__ void embedding_sum_forward_kernel(const int64_t* ids, const int64_t* pos_ids, const int64_t* type_ids,
                                             const float* word, const float* pos, const float* type, T* out,
                                             int64_t tokens, int64_t H) {
  const int64_t width = kVec8 ? 8 : 1;
  const int64_t per_row = H / width;
  const int64_t n = tokens * per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t t = i / per_row, c = (i - t * per_row) * width;
    const float* w = word + ids[t] * H + c;
    const float* p = pos ? pos + pos_ids[t] * H + c : nullptr;
    const float* y = type ? type + type_ids[t] * H + c : nullptr;
    if constexpr (kVec8) {
      float acc[8];
      load_row8(acc, w);
      if (p) add_row8(acc, p);
      if (y) add_row8(acc, y);
      alignas(16) T e[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) e[k] = from_float<T>(acc[k]);
      *reinterpret_cast<uint4*>(out + t * H + c) = *reinterpret_cast<const uint4*>(e);
    } else {
      float acc = *w;
      if (p) acc += *p;
      if (y) acc += *y;
      out[t * H + c] = from_float<T>(acc);
    }
  }
}

__global__ void iota_kernel(int32_t* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = static_cast<int32_t>(i);
}

// Sums dout rows of sorted positions [begin, end) at column h, in order,
// starting from `acc`. Loads go eight at a time so that they overlap; the adds
// stay in sequence.
template <typename Acc, typename D>
__device__ Acc sum_rows(Acc acc, const int32_t* tokens, const D* dout, int64_t H, int64_t h, int64_t begin,
                        int64_t end) {
  int64_t j = begin;
  for (; j + 8 <= end; j += 8) {
    D v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = dout[static_cast<int64_t>(tokens[j + k]) * H + h];
#pragma unroll
    for (int k = 0; k < 8; ++k) acc += static_cast<Acc>(to_float(v[k]));
  }
  for (; j < end; ++j) acc += static_cast<Acc>(to_float(dout[static_cast<int64_t>(tokens[j]) * H + h]));
  return acc;
}

// Step 2: block (chunk k, column tile); threadIdx.x picks the column and
// threadIdx.y one of kRunLanes lanes that take every kRunLanes-th run of the
// chunk. Runs have distinct ids, so the lanes write disjoint rows; having
// several runs in flight hides memory latency when runs are short (words).
template <typename D>
__global__ void embedding_backward_chunks_kernel(const uint64_t* keys, const int32_t* tokens, const D* dout,
                                                 float* dtable, double* partials, int64_t T, int64_t H, int64_t S,
                                                 int64_t padding_idx) {
  const int64_t k = blockIdx.x;
  const int64_t h = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (h >= H) return;
  const int64_t begin = k * S, end = begin + S < T ? begin + S : T;
  int64_t run_index = 0;
  for (int64_t pos = begin; pos < end; ++run_index) {
    const uint64_t id = keys[pos];
    int64_t run_end = pos + 1;
    while (run_end < end && keys[run_end] == id) ++run_end;
    if (run_index % kRunLanes != threadIdx.y) {
      pos = run_end;
      continue;
    }
    // A "head" piece continues a run begun in an earlier chunk; a "tail"
    // piece begins a run here that goes on into the next chunk.
    const bool head = pos == begin && begin > 0 && keys[begin - 1] == id;
    const bool tail = !head && run_end == end && end < T && keys[end] == id;
    if (static_cast<int64_t>(id) != padding_idx) {
      if (head || tail) {
        partials[(2 * k + (tail ? 1 : 0)) * H + h] = sum_rows(0.0, tokens, dout, H, h, pos, run_end);
      } else {
        float* dst = dtable + static_cast<int64_t>(id) * H + h;
        *dst = sum_rows(*dst, tokens, dout, H, h, pos, run_end);
      }
    }
    pos = run_end;
  }
}

// Step 3: block (chunk k, column tile) finishes the run that starts in chunk k
// and crosses its end, if there is one.
__global__ void embedding_backward_combine_kernel(const uint64_t* keys, float* dtable, const double* partials,
                                                  int64_t T, int64_t H, int64_t S, int64_t chunks,
                                                  int64_t padding_idx) {
  const int64_t k = blockIdx.x;
  const int64_t h = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (h >= H) return;
  const int64_t begin = k * S, last = (begin + S < T ? begin + S : T) - 1;
  if (last + 1 >= T) return;
  const uint64_t id = keys[last];
  if (keys[last + 1] != id) return;                   // the chunk's last run ends in it
  if (begin > 0 && keys[begin - 1] == id) return;     // it started in an earlier chunk
  if (static_cast<int64_t>(id) == padding_idx) return;
  double acc = partials[(2 * k + 1) * H + h];
  for (int64_t j = k + 1; j < chunks && keys[j * S] == id; ++j) acc += partials[(2 * j) * H + h];
  float* dst = dtable + static_cast<int64_t>(id) * H + h;
  *dst += static_cast<float>(acc);
}

}  // namespace

void embedding_forward_half(cudaStream_t s, Half h, const int64_t* ids, const void* table, float* out, int64_t T,
                            int64_t H, bool accumulate) {
  if (T <= 0 || H <= 0) return;
  with_half_type(h, [&]<typename E>(std::type_identity<E>) {
    embedding_forward_half_kernel<E><<<blocks_for(T * H), kThreads, 0, s>>>(ids, static_cast<const E*>(table), out,
                                                                             T, H, accumulate);
  });
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void embedding_forward(cudaStream_t s, const int64_t* ids, const float* table, float* out, int64_t T, int64_t H,
                       bool accumulate) {
  if (T <= 0 || H <= 0) return;
  const bool vec4 = H % 4 == 0 && (reinterpret_cast<uintptr_t>(table) & 15u) == 0 &&
                    (reinterpret_cast<uintptr_t>(out) & 15u) == 0;
  if (vec4)
    embedding_forward_kernel<true><<<blocks_for(T * H / 4), kThreads, 0, s>>>(ids, table, out, T, H, accumulate);
  else
    embedding_forward_kernel<false><<<blocks_for(T * H), kThreads, 0, s>>>(ids, table, out, T, H, accumulate);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

size_t cub_sort_pairs_query_bytes(int64_t T) { return cub_sort_bytes(T); }

namespace {

// The backward for a dout of element type D (float, or 16-bit widened as it is read).
template <typename D>
void embedding_backward_impl(cudaStream_t s, const int64_t* ids, const D* dout, float* dtable, int64_t T, int64_t H,
                             int64_t V, int64_t padding_idx, void* scratch) {
  if (T <= 0 || H <= 0) return;
  ANATOMY_CHECK(T <= INT_MAX, "embedding_backward: {} tokens are more than one sort handles", T);
  const ScratchLayout layout(T);
  auto* base = static_cast<char*>(scratch);
  auto* keys_sorted = reinterpret_cast<uint64_t*>(base + layout.keys_sorted);
  auto* tokens_in = reinterpret_cast<int32_t*>(base + layout.tokens_in);
  auto* tokens_sorted = reinterpret_cast<int32_t*>(base + layout.tokens_sorted);
  auto* partials = reinterpret_cast<double*>(base + layout.partials);

  iota_kernel<<<blocks_for(T), kThreads, 0, s>>>(tokens_in, T);
  ANATOMY_CUDA_CHECK(cudaGetLastError());

  // Ids lie in [0, V), so only the low bits that V - 1 needs take part in the
  // sort: two passes for a 30k vocabulary instead of eight.
  int end_bit = 1;
  while (end_bit < 64 && (static_cast<uint64_t>(std::max<int64_t>(V - 1, 0)) >> end_bit) != 0) ++end_bit;
  size_t cub_bytes = layout.cub_bytes;
  // The layout's CUB part is a model of CUB's own answer (cuda_memory.cpp); a
  // CUB that needs more than it says stops here rather than overrun the scratch.
  const size_t cub_needs = cub_sort_bytes(T);
  ANATOMY_CHECK(cub_needs <= cub_bytes,
                "embedding_backward: CUB's sort of {} tokens needs {} bytes of storage, more than the {} "
                "cuda_memory.cpp's cub_sort_pairs_bytes plans for (a CUB other than the one it models?)",
                T, cub_needs, cub_bytes);
  ANATOMY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base + layout.cub, cub_bytes,
                                                     reinterpret_cast<const uint64_t*>(ids), keys_sorted, tokens_in,
                                                     tokens_sorted, static_cast<int>(T), 0, end_bit, s));

  const int64_t S = choose_chunk(H);
  const int64_t chunks = (T + S - 1) / S;
  ANATOMY_CHECK(chunks == 1 || 2 * chunks * H <= kPartialDoublesPerToken * T,
                "embedding_backward: partial sums outgrow their scratch (T={}, H={})", T, H);
  ANATOMY_CHECK(chunks <= 0x7fffffff, "embedding_backward: too many chunks");
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>((H + kColumnThreads - 1) / kColumnThreads));
  embedding_backward_chunks_kernel<<<grid, dim3(kColumnThreads, kRunLanes), 0, s>>>(keys_sorted, tokens_sorted, dout, dtable,
                                                                   partials, T, H, S, padding_idx);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
  if (chunks > 1) {
    embedding_backward_combine_kernel<<<grid, kColumnThreads, 0, s>>>(keys_sorted, dtable, partials, T, H, S,
                                                                      chunks, padding_idx);
    ANATOMY_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace

namespace {

// One warp per sequence walks it 32 tokens at a time: each lane's token,
// a ballot of the non-padding ones, and the count carried across chunks.
__global__ void positions_past_padding_kernel(const int64_t* ids, int64_t B, int64_t L, int64_t padding_idx,
                                              int64_t* positions) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (b >= B) return;  // whole warps leave together
  int64_t seen = 0;
  for (int64_t start = 0; start < L; start += 32) {
    const int64_t t = start + lane;
    const bool real = t < L && ids[b * L + t] != padding_idx;
    const unsigned ballot = __ballot_sync(0xffffffffu, real);
    const int64_t before = __popc(ballot & ((1u << lane) - 1u));
    if (t < L) positions[b * L + t] = real ? padding_idx + seen + before + 1 : padding_idx;
    seen += __popc(ballot);
  }
}

}  // namespace

void positions_past_padding(cudaStream_t s, const int64_t* ids, int64_t B, int64_t L, int64_t padding_idx,
                            int64_t* positions) {
  if (B <= 0 || L <= 0) return;
  constexpr int kWarps = 8;
  const int64_t blocks = (B + kWarps - 1) / kWarps;
  ANATOMY_CHECK(blocks <= 0x7fffffff, "positions_past_padding: {} sequences are too many", B);
  positions_past_padding_kernel<<<static_cast<unsigned>(blocks), 32 * kWarps, 0, s>>>(ids, B, L, padding_idx,
                                                                                      positions);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void embedding_backward(cudaStream_t s, const int64_t* ids, const float* dout, float* dtable, int64_t T, int64_t H,
                        int64_t V, int64_t padding_idx, void* scratch) {
  embedding_backward_impl(s, ids, dout, dtable, T, H, V, padding_idx, scratch);
}

// ---- 16-bit variants ----

void embedding_sum_forward_half(cudaStream_t s, Half h, const int64_t* ids, const int64_t* pos_ids,
                                const int64_t* type_ids, const float* word, const float* pos, const float* type,
                                void* out, int64_t T, int64_t H) {
  if (T <= 0 || H <= 0) return;
  if (!pos_ids) pos = nullptr;
  if (!type_ids) type = nullptr;
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  const bool vec8 = H % 8 == 0 && aligned(word) && aligned(pos) && aligned(type) && aligned(out);
  with_half_type(h, [&](auto tag) {
    using Elem = typename decltype(tag)::type;
    auto* o = static_cast<Elem*>(out);
    if (vec8)
      embedding_sum_forward_kernel<Elem, true>
          <<<blocks_for(T * H / 8), kThreads, 0, s>>>(ids, pos_ids, type_ids, word, pos, type, o, T, H);
    else
      embedding_sum_forward_kernel<Elem, false>
          <<<blocks_for(T * H), kThreads, 0, s>>>(ids, pos_ids, type_ids, word, pos, type, o, T, H);
  });
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void embedding_backward_half(cudaStream_t s, Half h, const int64_t* ids, const void* dout, float* dtable, int64_t T,
                             int64_t H, int64_t V, int64_t padding_idx, void* scratch) {
  with_half_type(h, [&](auto tag) {
    using Elem = typename decltype(tag)::type;
    embedding_backward_impl(s, ids, static_cast<const Elem*>(dout), dtable, T, H, V, padding_idx, scratch);
  });
}

}  // namespace anatomy::cuda
