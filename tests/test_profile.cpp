// test_profile.cpp: the time anatomy on the CPU backend: the profiler's
// counts against FLOPs worked out from the model's shapes by hand, the step
// accounting, the trace against the Chrome trace-event format, and
// `anatomy profile` end to end.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "anatomy/model/bert/bert.h"
#include "anatomy/analysis/ceilings.h"
#include "anatomy/analysis/profile.h"
#include "anatomy/data/dataset.h"
#include "anatomy/distributed/profiled_communicator.h"
#include "anatomy/kernels/profiling.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/trainer.h"
#include "test_process.h"
#include "test_util.h"

namespace anatomy {
namespace {

struct Profiled {
  std::vector<StepTiming> steps;
  ModelConfig config;
  int64_t batch = 0, seq = 0;
};

Profiled profile_tiny(int steps_to_profile) {
  auto cpu = make_cpu_backend(1);
  Backend& backend = *cpu;
  Profiler profiler(backend);
  Profiled out;
  out.config = *model_preset("bert-tiny");
  out.config.max_position_embeddings = 64;
  out.batch = 4;
  out.seq = 32;
  BertStyleModel model(backend, out.config);
  init_weights(model, 3);
  const Dataset data = make_dummy_dataset(16, out.seq, 3);
  TrainingArguments args;
  args.per_device_train_batch_size = out.batch;
  args.max_steps = 1 + steps_to_profile;
  args.progress = false;
  Trainer trainer(backend, model, data, args);
  trainer.set_hooks(StepHooks{[&](int64_t step) {
                                if (step >= 1) profiler.begin_step();
                              },
                              [&](int64_t) {
                                if (profiler.recording()) out.steps.push_back(profiler.end_step());
                              }});
  trainer.train();
  return out;
}

// Operands are named without buffer prefixes, the model's own prefix and layer
// indices, whatever the family calls them.
TEST(Profile, OperandNamesDropPrefixesAndLayerIndices) {
  EXPECT_EQ(operand_name("half.bert.encoder.layer.3.attention.self.query.weight"), "attention.self.query");
  EXPECT_EQ(operand_name("grad.bert.embeddings.word_embeddings.weight"), "embeddings.word_embeddings");
  EXPECT_EQ(operand_name("bert.pooler.dense.bias"), "pooler.dense");
  EXPECT_EQ(operand_name("classifier.weight"), "classifier");
  EXPECT_EQ(operand_name("exp_avg.roberta.encoder.layer.11.output.LayerNorm.weight"), "output.LayerNorm");
  EXPECT_EQ(operand_name("distilbert.transformer.layer.0.attention.q_lin.weight"), "attention.q_lin");
  EXPECT_EQ(operand_name("layer.12.qkv[q]"), "qkv[q]");
  EXPECT_EQ(operand_name("embeddings.ln_in"), "embeddings.ln_in");
  EXPECT_EQ(operand_name("d_hidden"), "d_hidden");
}

TEST(Profile, CountsMatchTheShapesAndTimesAddUp) {
  const Profiled p = profile_tiny(2);
  ASSERT_EQ(p.steps.size(), 2u);
  const ModelConfig& c = p.config;
  const double T = static_cast<double>(p.batch * p.seq), H = c.hidden_size, I = c.intermediate_size;
  const double L = static_cast<double>(p.seq), layers = c.num_hidden_layers;
  for (const StepTiming& step : p.steps) {
    double linear_fwd = 0, attention_fwd = 0, ops_ms = 0;
    std::map<std::string, int> layer_norms;
    for (const OpRecord& r : step.ops) {
      ops_ms += r.ms;
      EXPECT_GE(r.ms, 0.0) << r.op;
      EXPECT_GE(r.start_ms, 0.0) << r.op;
      EXPECT_LE(r.start_ms + r.ms, step.step_ms + 1e-6) << r.op << " ends after its step";
      if (r.phase.rfind("forward layer", 0) == 0) {
        if (r.op == "linear_forward") linear_fwd += r.flops;
        if (r.op == "attention_forward") attention_fwd += r.flops;
      }
      if (r.op == "residual_layernorm_forward") ++layer_norms[r.operand];
    }
    // Per layer: q, k, v and the attention output (H x H), intermediate (H x I),
    // output (I x H), each 2·T·in·out multiply-adds plus T·out bias additions;
    // the last layer's query and products past attention take the first
    // token's rows only, and its attention the first query's.
    const double Tb = static_cast<double>(p.batch);
    const auto rows_of = [&](double rows) { return 2 * rows * (2 * H * H + 2 * H * I) + rows * (2 * H + I + H); };
    const double key_value = 2 * T * 2 * H * H + T * 2 * H;
    const double expected_linear = layers * key_value + (layers - 1) * rows_of(T) + rows_of(Tb);
    EXPECT_DOUBLE_EQ(linear_fwd, expected_linear);
    EXPECT_DOUBLE_EQ(attention_fwd, (layers - 1) * 4 * p.batch * L * L * H + 4 * p.batch * L * H);
    EXPECT_EQ(layer_norms["attention.output.LayerNorm"], c.num_hidden_layers);
    EXPECT_EQ(layer_norms["output.LayerNorm"], c.num_hidden_layers);
    // Ops never overlap on the CPU: their sum cannot exceed the step.
    EXPECT_LE(ops_ms, step.step_ms + 1e-6);
    EXPECT_GT(ops_ms, 0.0);
  }
  const ProfileSummary s = summarize_profile(p.steps, 0.0, std::nullopt);
  EXPECT_EQ(s.steps, 2);
  EXPECT_GT(s.forward_ms, 0.0);
  EXPECT_GT(s.backward_ms, 0.0);
  EXPECT_GT(s.optimizer_ms, 0.0);
  EXPECT_NEAR(s.forward_ms + s.backward_ms + s.optimizer_ms + s.data_ms + s.other_ms, s.ops_ms, 1e-9);
  double class_ms = 0, rows_ms = 0;
  for (const ClassShare& cls : s.classes) class_ms += cls.ms;
  for (const ProfileRow& r : s.rows) rows_ms += r.ms;
  EXPECT_NEAR(class_ms, s.ops_ms, 1e-9);
  EXPECT_NEAR(rows_ms, s.ops_ms, 1e-9);
  for (size_t i = 1; i < s.rows.size(); ++i) EXPECT_GE(s.rows[i - 1].ms, s.rows[i].ms) << "rows sorted by time";
  // Forward, backward (two products per layer) and the attention recompute all
  // count as contractions (bert-tiny: 2 layers, H = 128, I = 512; the last
  // layer's query and products past attention on the first token's rows only).
  const double per_token_products = 2 * 2.0 * 128 * 128 + (2 * 128.0 * 128 + 2.0 * 128 * 512);
  EXPECT_GT(s.classes[static_cast<int>(OpClass::Contraction)].flops,
            3 * 2 * (p.batch * p.seq * per_token_products + p.batch * (2 * 128.0 * 128 + 2.0 * 128 * 512)));
  EXPECT_FALSE(s.mfu().has_value());     // no peak known for a CPU
}

// The Chrome trace-event format: a JSON object with "traceEvents"; complete
// events ("ph": "X") carry name, ts and dur in microseconds, pid and tid;
// metadata events ("ph": "M") name processes and threads.
TEST(Profile, TraceIsChromeTraceEventFormat) {
  const Profiled p = profile_tiny(2);
  const nlohmann::json trace = nlohmann::json::parse(trace_json(p.steps));
  ASSERT_TRUE(trace.is_object());
  ASSERT_TRUE(trace.contains("traceEvents") && trace["traceEvents"].is_array());
  std::map<int, double> step_end;
  int complete = 0, metadata = 0, counters = 0;
  for (const auto& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e["ph"].is_string());
    ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer());
    ASSERT_TRUE(e.contains("tid") && e["tid"].is_number_integer());
    ASSERT_TRUE(e.contains("name") && e["name"].is_string() && !e["name"].get<std::string>().empty());
    const std::string ph = e["ph"];
    if (ph == "M") {
      ++metadata;
      EXPECT_TRUE(e["name"] == "process_name" || e["name"] == "thread_name");
      EXPECT_TRUE(e["args"].contains("name"));
      continue;
    }
    if (ph == "C") {  // the ledger's memory counters: numbers at a time within the run
      ++counters;
      ASSERT_TRUE(e["ts"].is_number() && e["args"].is_object() && !e["args"].empty());
      for (const auto& [key, value] : e["args"].items()) EXPECT_TRUE(value.is_number_integer()) << key;
      continue;
    }
    ASSERT_EQ(ph, "X");
    ++complete;
    ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number());
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    const int tid = e["tid"];
    if (e["name"] == "step") step_end[tid] = e["ts"].get<double>() + e["dur"].get<double>();
    else EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), step_end.at(tid) + 1e-3) << "op outside its step";
  }
  EXPECT_EQ(metadata, 1 + static_cast<int>(p.steps.size()));
  EXPECT_EQ(complete, static_cast<int>(p.steps.size() + p.steps[0].ops.size() + p.steps[1].ops.size()));
  EXPECT_GT(counters, 0);
}

TEST(Profile, CommandWritesTheSummaryAndTraceButNoModel) {
  test::TempDir dir;
  setenv("XDG_CACHE_HOME", dir.file("cache").c_str(), 1);  // the ceilings' cache, inherited by the child
  const auto r = test::run_anatomy("profile --model bert-tiny --dummy-size 16 --dummy-seq-len 32 "
                                   "--per-device-train-batch-size 4 --profile-warmup 1 --profile-steps 2 --device cpu "
                                   "--no-progress --output-dir " + dir.file("out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Time anatomy of a step (mean of 2 profiled steps)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tensor contraction"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ceilings measured on cpu"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("cache/anatomy/ceilings.json")));
  std::ifstream summary(dir.file("out/profile.json"));
  ASSERT_TRUE(summary.good());
  const nlohmann::json j = nlohmann::json::parse(summary);
  EXPECT_EQ(j["profiled_steps"], 2);
  ASSERT_TRUE(j["ceilings"].is_object());
  EXPECT_GT(j["ceilings"]["matmul_tflops"].get<double>(), 0.0);
  EXPECT_TRUE(j["classes"]["tensor contraction"]["fraction_of_ceiling"].is_number());
  EXPECT_GT(j["operations"].size(), 10u);
  EXPECT_TRUE(std::filesystem::exists(dir.file("out/trace.json")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/model.safetensors"))) << "profile is a measurement";
  const auto bad = test::run_anatomy("profile --model bert-tiny --profile-steps 0 --device cpu");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--profile-steps"), std::string::npos) << bad.output;
}

// The ceilings: measured once (positive rates from the backend's own ops),
// cached by device and dtype, read back unchanged; a damaged cache is
// measured again and rewritten.
TEST(Profile, CeilingsAreMeasuredThenCached) {
  test::TempDir dir;
  setenv("XDG_CACHE_HOME", dir.path().c_str(), 1);
  auto cpu = make_cpu_backend(1);
  const Ceilings first = device_ceilings(*cpu, "cpu", DType::F32, Fp32Products::Float32);
  EXPECT_GT(first.matmul_tflops, 0.0);
  EXPECT_GT(first.copy_gbps, 0.0);
  EXPECT_EQ(first.matmul_dtype, "float32");
  ASSERT_TRUE(std::filesystem::exists(ceilings_cache_path()));
  const Ceilings again = device_ceilings(*cpu, "cpu", DType::F32, Fp32Products::Float32);
  EXPECT_EQ(again.matmul_tflops, first.matmul_tflops) << "read from the cache, not measured again";
  EXPECT_EQ(again.copy_gbps, first.copy_gbps);
  EXPECT_EQ(cpu->ledger().snapshot().live_total, 0) << "the benchmark's buffers are released";
  {
    std::ofstream damaged(ceilings_cache_path());
    damaged << "{ not json";
  }
  const Ceilings remeasured = device_ceilings(*cpu, "cpu", DType::F32, Fp32Products::Float32);
  EXPECT_GT(remeasured.matmul_tflops, 0.0);
  std::ifstream in(ceilings_cache_path());
  EXPECT_NO_THROW({ const auto parsed = nlohmann::json::parse(in); EXPECT_TRUE(parsed.is_object()); });
  unsetenv("XDG_CACHE_HOME");
}

// The exchanges between ranks as ops of the step: every call of a profiled
// communicator is timed as a "communication" op (the collectives under their
// operand's name, the wait, the host sums), forwarded unchanged (a simulated
// world of 3 sums host numbers to 3 times each), and nothing is recorded
// between steps.
TEST(Profile, CommunicatorCallsAreTimedAsCommunication) {
  auto cpu = make_cpu_backend(1);
  Backend& backend = *cpu;
  Profiler profiler(backend);
  auto comm = distributed::profile_communicator(distributed::make_simulated_communicator(0, 3), profiler);
  EXPECT_EQ(comm->world_size(), 3);
  const Tensor grads = Tensor::empty(backend.ledger(), {64}, DType::F32, Category::Gradients, "flat");
  comm->all_reduce_sum(grads.slice(0, {32}, "gradient_bucket"));  // not recording: not timed
  profiler.begin_step();
  comm->all_reduce_sum(grads.slice(32, {32}, "gradient_bucket"));
  comm->wait();
  const std::vector<double> sums = comm->sum_host({1.5, 2.0});
  const StepTiming step = profiler.end_step();
  EXPECT_EQ(sums, (std::vector<double>{4.5, 6.0}));
  ASSERT_EQ(step.ops.size(), 3u);
  EXPECT_EQ(step.ops[0].op, "all_reduce");
  EXPECT_EQ(step.ops[0].operand, "gradient_bucket");
  EXPECT_EQ(step.ops[1].op, "collective_wait");
  EXPECT_EQ(step.ops[2].op, "host_sum");
  for (const OpRecord& r : step.ops) {
    EXPECT_EQ(r.op_class, OpClass::Communication) << r.op;
    EXPECT_EQ(r.flops, 0.0) << r.op;
    EXPECT_GE(r.ms, 0.0) << r.op;
  }
  ProfileSummary summary = summarize_profile({step}, 0.0, std::nullopt);
  summary.ceilings = Ceilings{};
  summary.ceilings->copy_gbps = 10.0;
  EXPECT_FALSE(summary.fraction_of_ceiling(OpClass::Communication, 1.0, 0.0, 1e6).has_value())
      << "no bytes are counted for an exchange, so no share of the copy rate either";
}

// `anatomy profile` under `anatomy launch` (two CPU ranks through the store):
// rank 0 prints the whole anatomy with the communication it waited for, rank 1
// one line, and each writes its own profile.json, whose communication rows are
// the gradients' all-reduce (which blocks where it is called on the CPU).
TEST(Profile, EveryRankOfALaunchProfilesItsSteps) {
  test::TempDir dir;
  setenv("XDG_CACHE_HOME", dir.file("cache").c_str(), 1);
  const auto r = test::run_anatomy("launch --nproc-per-node 2 --master-port " + std::to_string(test::free_port()) +
                                   " -- profile --model bert-tiny --dummy-size 32 --dummy-seq-len 16 "
                                   "--per-device-train-batch-size 4 --profile-warmup 1 --profile-steps 2 --device cpu "
                                   "--no-progress --output-dir " + dir.file("out"));
  unsetenv("XDG_CACHE_HOME");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 0] Time anatomy of a step (mean of 2 profiled steps)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 0]   communication: the step waited"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 1] Time anatomy of a step (mean of 2 profiled steps)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("communication waited for"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[rank 1]   Top"), std::string::npos) << "rank 1 prints one line, not the whole table";
  EXPECT_NE(r.output.find("[rank 0] Time per rank"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("longer than the fastest's"), std::string::npos) << r.output;
  std::vector<nlohmann::json> profiles;
  for (const std::string rank_dir : {dir.file("out"), dir.file("out/rank-1")}) {
    std::ifstream in(rank_dir + "/profile.json");
    ASSERT_TRUE(in.good()) << rank_dir;
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j["profiled_steps"], 2) << rank_dir;
    EXPECT_GT(j["classes"]["communication"]["ms"].get<double>(), 0.0) << rank_dir;
    bool all_reduce = false;
    for (const auto& op : j["operations"])
      if (op["op"] == "all_reduce" && op["operand"] == "gradient_bucket") {
        all_reduce = true;
        EXPECT_EQ(op["class"], "communication");
        EXPECT_GE(op["calls"].get<double>(), 1.0);
      }
    EXPECT_TRUE(all_reduce) << rank_dir << ": no all_reduce row";
    profiles.push_back(j);
  }
  // Rank 0's summary carries every rank's step, each in its own slot: rank 1's figures are its own file's.
  ASSERT_EQ(profiles.size(), 2u);
  ASSERT_TRUE(profiles[0].contains("ranks")) << profiles[0].dump();
  const nlohmann::json& ranks = profiles[0]["ranks"];
  ASSERT_EQ(ranks.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(ranks[k]["rank"], k);
    EXPECT_EQ(ranks[k]["step_ms"].get<double>(), profiles[k]["step_ms"].get<double>()) << "rank " << k;
    EXPECT_EQ(ranks[k]["communication_ms"].get<double>(),
              profiles[k]["classes"]["communication"]["ms"].get<double>()) << "rank " << k;
  }
  EXPECT_FALSE(profiles[1].contains("ranks")) << "only rank 0 gathers the table";
}

// The floor: products at the product ceiling, the other computing classes at
// the copy ceiling, data and communication as measured (worked out by hand);
// no ceilings, no floor.
TEST(Profile, FloorRunsEveryOperationAtItsCeiling) {
  ProfileSummary s;
  s.steps = 1;
  s.step_ms = 10.0;
  auto row = [](OpClass c, double ms, double flops, double bytes) {
    ProfileRow r;
    r.op_class = c;
    r.ms = ms;
    r.flops = flops;
    r.bytes = bytes;
    return r;
  };
  s.rows = {row(OpClass::Contraction, 4.0, 2e11, 1e9), row(OpClass::Elementwise, 2.0, 1e6, 1e9),
            row(OpClass::Optimizer, 1.0, 0.0, 5e8), row(OpClass::Data, 0.5, 0.0, 1e6),
            row(OpClass::Communication, 2.0, 0.0, 0.0)};
  EXPECT_EQ(s.floor_ms(), 0.0) << "no ceilings measured";
  s.ceilings = Ceilings{};
  s.ceilings->matmul_tflops = 100.0;  // 2e11 FLOPs: 2 ms
  s.ceilings->copy_gbps = 1000.0;     // 1e9 bytes: 1 ms; 5e8: 0.5 ms
  EXPECT_NEAR(s.floor_ms(), 2.0 + 1.0 + 0.5 + 0.5 + 2.0, 1e-12);
  const nlohmann::json j = nlohmann::json::parse(profile_json(s));
  EXPECT_NEAR(j["floor_ms"].get<double>(), 6.0, 1e-12);
}

}  // namespace
}  // namespace anatomy
