// cudnn_attention.cpp: CudnnAttention through the cuDNN frontend's graph API.
// One forward and one backward graph per shape, built on first use and kept.
//
// Building a graph runs cuDNN's heuristics and compiles its kernels at run
// time: 80-160 ms for bert-large's two graphs on an H100, paid inside the
// first training step; loading them takes about 6 ms. So the built plan is also written to a file,
// $XDG_CACHE_HOME/anatomy/cudnn_plans/sdpa-<hash>.plan (~/.cache when unset):
// a first line with the whole key (cuDNN and frontend versions, GPU and SM
// count, the graph's shape and options), then the frontend's serialized plan.
// A later process with the same key loads the plan instead of building it:
// the same engine and configuration, so the same bits. A file whose first line
// is not the key, or that does not load, is ignored and rewritten. At most
// kMaxPlanFiles files are written (dynamic padding makes a graph per length).
// --cudnn-plan-cache false (ANATOMY_CUDNN_PLAN_CACHE=0) neither reads nor writes the files.
#include "anatomy/kernels/cuda/cudnn_attention.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "anatomy/core/error.h"
#include "anatomy/core/hash.h"
#include "anatomy/io/files.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda_memory.h"

namespace anatomy::cuda {

// kernels: cudnn_attention_params.cu
void cudnn_attention_params(cudaStream_t s, const int64_t* key_mask, int64_t B, int64_t L, int64_t seed,
                            int64_t offset, void* params);

namespace {

namespace fe = cudnn_frontend;

// Tensor ids in the graphs' variant packs.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kSeqQ, kSeqKV, kSeed, kOffset, kMaskDump
};

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Key {
  int64_t B, L, heads, D;
  bool bf16, masked, training, dump;
  float dropout, scale;
  bool interleaved_grads;
  auto tie() const { return std::tie(B, L, heads, D, bf16, masked, training, dump, dropout, scale, interleaved_grads); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Built {
  std::shared_ptr<fe::graph::Graph> graph;  // null: unsupported
  int64_t workspace = 0;
  std::string why;
  // --cudnn-time-plans (an experiment): every plan that built
  // and fits the chosen plan's workspace, timed on the first call; then the
  // fastest runs. -1: the heuristics' choice.
  std::vector<int64_t> candidates;
  int64_t chosen = -1;
};

constexpr int64_t kMaxPlanFiles = 512;

// The current device's device_identity, or "?" when CUDA cannot say.
std::string current_gpu() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return "?";
  try {
    return device_identity(device);
  } catch (const Error&) {
    return "?";
  }
}

class CudnnAttentionImpl final : public CudnnAttention {
 public:
  CudnnAttentionImpl(cudnnHandle_t handle, cudaStream_t stream, size_t version, bool time_plans, bool plan_cache)
      : handle_(handle), time_plans_(time_plans), plan_cache_(plan_cache && !time_plans), stream_(stream),
        version_(version) {
    if (plan_cache_)
      cache_prefix_ = fmt::format("cuDNN {} | frontend {} | {}", version_, CUDNN_FRONTEND_VERSION, current_gpu());
  }
  ~CudnnAttentionImpl() override {
    forward_.clear();
    backward_.clear();
    cudnnDestroy(handle_);
  }

  std::string describe() const override {
    return fmt::format("cuDNN {}.{}.{}", version_ / 10000, version_ % 10000 / 100, version_ % 100);
  }

  bool supports(const CudnnAttentionShape& s) override {
    if (s.D % 8 != 0 || s.D > 128 || s.L < 1) return false;
    if (!forward_graph(s, false).graph) return false;
    return !s.training || backward_graph(s).graph != nullptr;
  }
  size_t forward_scratch_bytes(const CudnnAttentionShape& s) override {
    return cudnn_attention_param_bytes(s.B) + static_cast<size_t>(forward_graph(s, false).workspace);
  }
  size_t backward_scratch_bytes(const CudnnAttentionShape& s) override {
    return cudnn_attention_param_bytes(s.B) + static_cast<size_t>(backward_graph(s).workspace);
  }

  void forward(const CudnnAttentionShape& s, const void* q, const void* k, const void* v, const int64_t* key_mask,
               const DropoutSpec& dropout, void* ctx, float* lse, void* scratch, float* dropout_mask) override {
    Built& built = forward_graph(s, dropout_mask != nullptr);
    ANATOMY_CHECK(built.graph, "cuDNN attention: no forward graph for this shape: {}", built.why);
    std::unordered_map<int64_t, void*> pack{{kQ, const_cast<void*>(q)}, {kK, const_cast<void*>(k)},
                                            {kV, const_cast<void*>(v)}, {kO, ctx}};
    if (s.training) pack[kStats] = lse;
    if (dropout_mask) pack[kMaskDump] = dropout_mask;
    run(s, built, pack, key_mask, dropout, scratch, "forward");
  }

  void backward(const CudnnAttentionShape& s, const void* dctx, const void* q, const void* k, const void* v,
                const void* ctx, const float* lse, const int64_t* key_mask, const DropoutSpec& dropout, void* dq,
                void* dk, void* dv, void* scratch) override {
    Built& built = backward_graph(s);
    ANATOMY_CHECK(built.graph, "cuDNN attention: no backward graph for this shape: {}", built.why);
    std::unordered_map<int64_t, void*> pack{
        {kQ, const_cast<void*>(q)},   {kK, const_cast<void*>(k)},   {kV, const_cast<void*>(v)},
        {kO, const_cast<void*>(ctx)}, {kDO, const_cast<void*>(dctx)}, {kStats, const_cast<float*>(lse)},
        {kDQ, dq},                    {kDK, dk},                    {kDV, dv}};
    run(s, built, pack, key_mask, dropout, scratch, "backward");
  }

 private:
  static Key key_of(const CudnnAttentionShape& s, bool dump) {
    return Key{s.B, s.L, s.heads, s.D, s.bf16, s.masked, s.training, dump, s.dropout, s.scale, s.interleaved_grads};
  }

  // [B, heads, L, D] over memory laid out [B, L, heads, D].
  static std::vector<int64_t> dims(const CudnnAttentionShape& s) { return {s.B, s.heads, s.L, s.D}; }
  static std::vector<int64_t> strides(const CudnnAttentionShape& s) {
    return {s.L * s.heads * s.D, s.D, s.heads * s.D, 1};
  }
  // The gradients': rows three times as long when interleaved.
  static std::vector<int64_t> grad_strides(const CudnnAttentionShape& s) {
    const int64_t row = (s.interleaved_grads ? 3 : 1) * s.heads * s.D;
    return {s.L * row, s.D, row, 1};
  }

  std::shared_ptr<fe::graph::Graph> new_graph(const CudnnAttentionShape& s) const {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(s.bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return g;
  }
  static std::shared_ptr<fe::graph::Tensor_attributes> qkv(fe::graph::Graph& g, const CudnnAttentionShape& s,
                                                            const char* name, int64_t uid) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims(s)).set_stride(
        strides(s)));
  }
  // A [rows, 1, 1, 1] tensor of `type`: the dropout seed and offset (one
  // row each) and the per-entry lengths of the padding mask (B rows).
  static std::shared_ptr<fe::graph::Tensor_attributes> column(fe::graph::Graph& g, const char* name, int64_t uid,
                                                               int64_t rows, fe::DataType_t type) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({rows, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_data_type(type));
  }
  // The row log-sum-exp, [B, heads, L, 1] float32.
  static fe::graph::Tensor_attributes& as_stats(fe::graph::Tensor_attributes& t, const CudnnAttentionShape& s) {
    return t.set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({s.B, s.heads, s.L, 1}).set_stride(
        {s.heads * s.L, s.L, 1, 1});
  }
  // The padding mask and the dropout, the same in the forward and the backward
  // graph (SDPA_attributes or SDPA_backward_attributes), so that backward
  // replays the forward's mask from the same inputs (run() fills them).
  template <typename Options>
  static void set_mask_and_dropout(fe::graph::Graph& g, const CudnnAttentionShape& s, Options& options) {
    if (s.masked)
      options.set_padding_mask(true)
          .set_seq_len_q(column(g, "seq_len_q", kSeqQ, s.B, fe::DataType_t::INT32))
          .set_seq_len_kv(column(g, "seq_len_kv", kSeqKV, s.B, fe::DataType_t::INT32));
    if (s.dropout > 0.0f)
      options.set_dropout(s.dropout, column(g, "seed", kSeed, 1, fe::DataType_t::INT64),
                          column(g, "offset", kOffset, 1, fe::DataType_t::INT64));
  }

  // The graph of `key` in `cache`, built by `build` on first use; a build that
  // fails (cuDNN has no engine for it) is remembered with the reason.
  template <typename Build>
  Built& cached(std::map<Key, Built>& cache, const Key& key, const CudnnAttentionShape& s, const char* what,
                Build&& build) {
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    const std::string file_key = plan_cache_ ? plan_key(key, what) : std::string();
    Built built = plan_cache_ ? load_plan(file_key) : Built{};
    if (!built.graph) {
      try {
        auto g = new_graph(s);
        build(*g);
        built = finish(std::move(g));
      } catch (const std::exception& e) {
        built = Built{nullptr, 0, e.what()};
      }
      if (plan_cache_ && built.graph) store_plan(file_key, *built.graph);
    }
    return cache.emplace(key, std::move(built)).first->second;
  }

  // The plan file's first line: everything the plan depends on.
  std::string plan_key(const Key& k, const char* what) const {
    return fmt::format("{} | sdpa {} | B={} L={} heads={} D={} {} masked={} training={} dump={} dropout={} "
                       "scale={} deterministic=1",
                       cache_prefix_, what, k.B, k.L, k.heads, k.D, k.bf16 ? "bf16" : "fp16", k.masked ? 1 : 0,
                       k.training ? 1 : 0, k.dump ? 1 : 0, k.dropout, k.scale) +
           (k.interleaved_grads ? " interleaved_grads=1" : "");
  }
  static std::string plan_path(const std::string& file_key) {
    return io::user_cache_file(fmt::format("cudnn_plans/sdpa-{:016x}.plan", fnv1a64(file_key)));
  }

  // The plan of `file_key` from its file; no graph when there is none, or it
  // is another key's (a hash collision), or it does not load.
  Built load_plan(const std::string& file_key) {
    const std::string path = plan_path(file_key);
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return {};
    try {
      const std::vector<uint8_t> bytes = io::read_file_bytes(path);
      const std::string head = file_key + "\n";
      if (bytes.size() <= head.size() || !std::equal(head.begin(), head.end(), bytes.begin())) return {};
      const std::vector<uint8_t> data(bytes.begin() + static_cast<std::ptrdiff_t>(head.size()), bytes.end());
      auto g = std::make_shared<fe::graph::Graph>();
      Built b;
      if (!g->deserialize(handle_, data, /*enforce_precompiled=*/true, /*run_warmup=*/false).is_good() ||
          !g->get_workspace_size(b.workspace).is_good())
        return {};
      b.graph = std::move(g);
      return b;
    } catch (const std::exception&) {  // unreadable, or not the frontend's format
      return {};
    }
  }

  // Writes the built plan to its file (through a temp file and a rename);
  // the cache is an optimisation, so a failure to write is ignored.
  static void store_plan(const std::string& file_key, fe::graph::Graph& g) {
    try {
      std::vector<uint8_t> data;
      if (!g.serialize(data, /*serialize_structure=*/false).is_good()) return;
      const std::string path = plan_path(file_key);
      const std::filesystem::path dir = std::filesystem::path(path).parent_path();
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      // Dynamic padding builds a graph per length: at most kMaxPlanFiles files
      // (about 100 KiB each) are kept; past that, new plans are not written.
      int64_t files = 0;
      for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
           it.increment(ec))
        ++files;
      if (ec || files >= kMaxPlanFiles) return;
      io::AtomicFile file(path);
      file.write(file_key + "\n");
      file.write(data.data(), data.size());
      file.commit();
    } catch (const std::exception&) {
    }
  }

  Built finish(std::shared_ptr<fe::graph::Graph> g) {
    Built b;
    auto check = [&](fe::error_t e, const char* what) {
      if (e.is_good()) return true;
      b.why = fmt::format("{}: {}", what, e.get_message());
      return false;
    };
    const std::vector<fe::HeurMode_t> modes =
        time_plans_ ? std::vector<fe::HeurMode_t>{fe::HeurMode_t::A, fe::HeurMode_t::B, fe::HeurMode_t::FALLBACK}
                    : std::vector<fe::HeurMode_t>{fe::HeurMode_t::A};
    if (!check(g->validate(), "validate") || !check(g->build_operation_graph(handle_), "build_operation_graph") ||
        !check(g->create_execution_plans(modes), "create_execution_plans") ||
        !check(g->check_support(handle_), "check_support") ||
        !check(g->build_plans(time_plans_ ? fe::BuildPlanPolicy_t::ALL : fe::BuildPlanPolicy_t::HEURISTICS_CHOICE),
               "build_plans") ||
        !check(g->get_workspace_size(b.workspace), "get_workspace_size"))
      return b;
    if (time_plans_) {
      for (int64_t i = 0; i < g->get_execution_plan_count(); ++i) {
        int64_t workspace = 0;
        if (g->get_workspace_size_plan_at_index(i, workspace).is_good() && workspace <= b.workspace)
          b.candidates.push_back(i);
      }
    }
    b.graph = std::move(g);
    return b;
  }

  Built& forward_graph(const CudnnAttentionShape& shape, bool dump) {
    CudnnAttentionShape s = shape;
    s.interleaved_grads = false;  // a backward-only choice: one forward graph for both
    return cached(forward_, key_of(s, dump), s, "forward", [&](fe::graph::Graph& g) {
      auto q = qkv(g, s, "q", kQ), k = qkv(g, s, "k", kK), v = qkv(g, s, "v", kV);
      auto options = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(s.training).set_attn_scale(
          s.scale);
      set_mask_and_dropout(g, s, options);
      if (s.dropout > 0.0f && dump)
        options.set_rng_dump(g.tensor(fe::graph::Tensor_attributes()
                                          .set_name("dropout_mask")
                                          .set_uid(kMaskDump)
                                          .set_dim({s.B, s.heads, s.L, s.L})
                                          .set_stride({s.heads * s.L * s.L, s.L * s.L, s.L, 1})
                                          .set_data_type(fe::DataType_t::FLOAT)));
      auto [o, stats] = g.sdpa(q, k, v, options);
      o->set_output(true).set_uid(kO).set_dim(dims(s)).set_stride(strides(s));
      if (s.training) as_stats(stats->set_output(true), s);
    });
  }

  Built& backward_graph(const CudnnAttentionShape& s) {
    return cached(backward_, key_of(s, false), s, "backward", [&](fe::graph::Graph& g) {
      auto q = qkv(g, s, "q", kQ), k = qkv(g, s, "k", kK), v = qkv(g, s, "v", kV);
      auto o = qkv(g, s, "o", kO), dO = qkv(g, s, "dO", kDO);
      fe::graph::Tensor_attributes stats_attributes;
      auto stats = g.tensor(as_stats(stats_attributes.set_name("stats"), s));
      auto options = fe::graph::SDPA_backward_attributes()
                         .set_name("sdpa_backward")
                         .set_attn_scale(s.scale)
                         .set_deterministic_algorithm(true);
      set_mask_and_dropout(g, s, options);
      auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, dO, stats, options);
      dq->set_output(true).set_uid(kDQ).set_dim(dims(s)).set_stride(grad_strides(s));
      dk->set_output(true).set_uid(kDK).set_dim(dims(s)).set_stride(grad_strides(s));
      dv->set_output(true).set_uid(kDV).set_dim(dims(s)).set_stride(grad_strides(s));
    });
  }

  // Lengths and seeds into the front of the scratch, then the graph.
  void run(const CudnnAttentionShape& s, Built& built, std::unordered_map<int64_t, void*>& pack,
           const int64_t* key_mask, const DropoutSpec& dropout, void* scratch, const char* what) {
    auto* params = static_cast<char*>(scratch);
    if (s.masked || s.dropout > 0.0f) {
      // Each (seed, stream) its own Philox seed, offset 0: the streams' masks
      // are independent draws, not overlapping runs of one sequence.
      const int64_t seed = static_cast<int64_t>(splitmix64(dropout.seed ^ splitmix64(dropout.stream)));
      cudnn_attention_params(stream_, s.masked ? key_mask : nullptr, s.B, s.L, seed, 0, params);
    }
    if (s.dropout > 0.0f) {
      pack[kSeed] = params;
      pack[kOffset] = params + 8;
    }
    if (s.masked) {
      pack[kSeqQ] = params + kCudnnAttentionLengthsOffset;
      pack[kSeqKV] = params + kCudnnAttentionLengthsOffset + static_cast<size_t>(s.B) * 4;
    }
    void* workspace = built.workspace > 0 ? params + cudnn_attention_param_bytes(s.B) : nullptr;
    if (time_plans_ && built.chosen < 0 && !built.candidates.empty()) choose_plan(s, built, pack, workspace, what);
    fe::error_t e = built.chosen >= 0 ? built.graph->execute_plan_at_index(handle_, pack, workspace, built.chosen)
                                      : built.graph->execute(handle_, pack, workspace);
    ANATOMY_CHECK(e.is_good(), "cuDNN attention failed: {}", e.get_message());
  }

  // Times each candidate plan on these operands (one warm-up run, then the
  // mean of 5) and keeps the fastest; prints every plan's time.
  void choose_plan(const CudnnAttentionShape& s, Built& built, std::unordered_map<int64_t, void*>& pack,
                   void* workspace, const char* what) {
    cudaEvent_t a = nullptr, b = nullptr;
    ANATOMY_CUDA_CHECK(cudaEventCreate(&a));
    ANATOMY_CUDA_CHECK(cudaEventCreate(&b));
    float best = 0.0f;
    for (int64_t i : built.candidates) {
      std::string name;
      (void)built.graph->get_plan_name_at_index(i, name);
      if (!built.graph->execute_plan_at_index(handle_, pack, workspace, i).is_good()) {
        fmt::print(stderr, "cuDNN attention {} B={} L={} heads={}: plan {} ({}) failed to run\n", what, s.B, s.L,
                   s.heads, i, name);
        continue;
      }
      constexpr int kRuns = 5;
      ANATOMY_CUDA_CHECK(cudaEventRecord(a, stream_));
      for (int r = 0; r < kRuns; ++r) (void)built.graph->execute_plan_at_index(handle_, pack, workspace, i);
      ANATOMY_CUDA_CHECK(cudaEventRecord(b, stream_));
      ANATOMY_CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0.0f;
      ANATOMY_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      ms /= kRuns;
      fmt::print(stderr, "cuDNN attention {}{} B={} L={} heads={}: plan {} ({}): {:.4f} ms\n", what,
                 s.training ? "" : " (inference)", s.B, s.L, s.heads, i, name, ms);
      if (built.chosen < 0 || ms < best) {
        best = ms;
        built.chosen = i;
      }
    }
    (void)cudaEventDestroy(a);
    (void)cudaEventDestroy(b);
    if (built.chosen < 0) built.candidates.clear();  // none ran: the heuristics' choice
  }

  cudnnHandle_t handle_;
  bool time_plans_;
  bool plan_cache_;           // read and write the plan files (not while timing every plan)
  std::string cache_prefix_;  // the plan files' key: versions and GPU
  cudaStream_t stream_;  // the handle's
  size_t version_;
  std::map<Key, Built> forward_, backward_;
};

}  // namespace

std::unique_ptr<CudnnAttention> CudnnAttention::create(cudaStream_t stream, const EngineOptions& options,
                                                       std::string* why) {
  const size_t version = cudnnGetVersion();
  if (version < 90000) {
    *why = fmt::format("cuDNN {} is older than 9.0", version);
    return nullptr;
  }
  const bool time_plans = options.cudnn_time_plans;
  const bool plan_cache = options.cudnn_plan_cache;
  cudnnHandle_t handle = nullptr;
  if (cudnnStatus_t st = cudnnCreate(&handle); st != CUDNN_STATUS_SUCCESS) {
    *why = fmt::format("cudnnCreate: {}", cudnnGetErrorString(st));
    return nullptr;
  }
  if (cudnnStatus_t st = cudnnSetStream(handle, stream); st != CUDNN_STATUS_SUCCESS) {
    *why = fmt::format("cudnnSetStream: {}", cudnnGetErrorString(st));
    cudnnDestroy(handle);
    return nullptr;
  }
  return std::make_unique<CudnnAttentionImpl>(handle, stream, version, time_plans, plan_cache);
}

}  // namespace anatomy::cuda
