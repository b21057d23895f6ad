// test_peak_memory.cpp: what is live at the ledger's peak, the whole run's
// step-by-step memory, and the trace's memory counters. The references are
// the ledger's own counters (peak total, composition at the peak), which are
// kept apart from the buffer list, and buffers whose sizes the tests choose.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <numeric>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/analysis/memory_anatomy.h"
#include "anatomy/analysis/profile.h"
#include "anatomy/data/dataset.h"
#include "anatomy/model/bert/bert.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/trainer.h"
#include "test_util.h"

namespace anatomy {
namespace {

size_t cat(Category c) { return static_cast<size_t>(c); }

int64_t listed_plus_other(const PeakBuffers& b) {
  int64_t sum = b.other_bytes;
  for (const LedgerEntry& e : b.largest) sum += e.bytes;
  return sum;
}

TEST(PeakBuffers, AreTheBuffersAliveAtThePeakNotNow) {
  Ledger ledger(Device::cpu(), make_cpu_allocator());
  ledger.set_phase("setup");
  auto w = ledger.allocate(1000, Category::Weights, "w");
  ledger.set_step(0);
  ledger.set_phase("forward layer 0");
  auto a = ledger.allocate(300, Category::Activations, "a0");
  auto t = ledger.allocate(200, Category::Temporary, "t0");
  ledger.set_phase("forward layer 1");
  auto a1 = ledger.allocate(500, Category::Activations, "a1");  // the peak: 2000
  t.reset();
  a.reset();
  a1.reset();
  ledger.set_phase("optimizer step");
  auto o = ledger.allocate(700, Category::OptimizerStates, "o");  // 1700: below the peak
  EXPECT_EQ(ledger.snapshot().peak_total, 2000);

  const PeakBuffers all = ledger.peak_buffers(0);
  ASSERT_EQ(all.largest.size(), 4u);
  EXPECT_EQ(all.largest[0].name, "w");
  EXPECT_EQ(all.largest[0].phase, "setup");
  EXPECT_EQ(all.largest[0].step, -1);
  EXPECT_EQ(all.largest[1].name, "a1");
  EXPECT_EQ(all.largest[1].phase, "forward layer 1");
  EXPECT_EQ(all.largest[1].step, 0);
  EXPECT_EQ(all.largest[2].name, "a0");
  EXPECT_EQ(all.largest[3].name, "t0");
  EXPECT_EQ(all.other_count, 0);
  EXPECT_EQ(listed_plus_other(all), 2000);

  const PeakBuffers top2 = ledger.peak_buffers(2);
  ASSERT_EQ(top2.largest.size(), 2u);
  EXPECT_EQ(top2.other_count, 2);
  EXPECT_EQ(top2.other_bytes, 500);
  EXPECT_EQ(top2.other_by_category[cat(Category::Activations)], 300);
  EXPECT_EQ(top2.other_by_category[cat(Category::Temporary)], 200);

  // A higher peak replaces the list; the buffers freed before it are gone from it.
  auto big = ledger.allocate(2000, Category::Temporary, "big");  // 3700
  const PeakBuffers now = ledger.peak_buffers(0);
  std::set<std::string> names;
  for (const LedgerEntry& e : now.largest) names.insert(e.name);
  EXPECT_EQ(names, (std::set<std::string>{"w", "o", "big"}));
  EXPECT_EQ(listed_plus_other(now), 3700);

  // reset_peaks: the peak is what is live now.
  big.reset();
  ledger.reset_peaks();
  EXPECT_EQ(listed_plus_other(ledger.peak_buffers(0)), 1700);
}

// Random allocations and releases: at every moment the buffer list at the
// peak adds up to the ledger's peak, category by category.
TEST(PeakBuffers, AddUpToThePeakUnderRandomTraffic) {
  Ledger ledger(Device::cpu(), make_cpu_allocator());
  std::mt19937 rng(7);
  std::vector<std::shared_ptr<Storage>> live;
  for (int i = 0; i < 3000; ++i) {
    if (i % 97 == 0) ledger.set_step(i / 97);
    if (!live.empty() && rng() % 2 == 0) {
      live.erase(live.begin() + static_cast<long>(rng() % live.size()));
    } else {
      const auto c = static_cast<Category>(rng() % kCategoryCount);
      live.push_back(ledger.allocate(rng() % 5000, c, "b" + std::to_string(i)));
    }
    if (i % 250 == 0 || i == 2999) {
      const LedgerSnapshot s = ledger.snapshot();
      const PeakBuffers b = ledger.peak_buffers(5);
      ASSERT_EQ(listed_plus_other(b), s.peak_total) << "after " << i;
      CategoryBytes by_category = b.other_by_category;
      for (const LedgerEntry& e : b.largest) by_category[cat(e.category)] += e.bytes;
      EXPECT_EQ(by_category, s.at_peak) << "after " << i;
      for (size_t k = 1; k < b.largest.size(); ++k) EXPECT_GE(b.largest[k - 1].bytes, b.largest[k].bytes);
    }
  }
}

TEST(StepTimeline, StaysBoundedAndShowsAGrowingBuffer) {
  Ledger ledger(Device::cpu(), make_cpu_allocator());
  ledger.set_step_timeline_limit(64);
  auto weights = ledger.allocate(1 << 20, Category::Weights, "w");
  std::vector<std::shared_ptr<Storage>> leaked;
  constexpr int64_t kSteps = 10000, kLeak = 100;
  for (int64_t step = 0; step < kSteps; ++step) {
    ledger.set_step(step);
    ledger.set_phase("forward");
    auto act = ledger.allocate(4096, Category::Activations, "act");  // released within the step
    act.reset();
    leaked.push_back(ledger.allocate(kLeak, Category::Temporary, "leak"));  // never released
  }
  const std::vector<StepSample> steps = ledger.step_timeline();
  ASSERT_LE(steps.size(), 64u);
  ASSERT_GE(steps.size(), 32u);
  // Every step is covered once, in order.
  EXPECT_EQ(steps.front().first_step, 0);
  EXPECT_EQ(steps.back().last_step, kSteps - 1);
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_EQ(steps[i].first_step, steps[i - 1].last_step + 1);
  for (const StepSample& s : steps) {
    // At a sample's last step's end: the weights and one leak per step so far.
    EXPECT_EQ(s.end, (1 << 20) + kLeak * (s.last_step + 1)) << s.first_step << "-" << s.last_step;
    EXPECT_EQ(s.end_live[cat(Category::Temporary)], kLeak * (s.last_step + 1));
    // The highest point: the activation on top of what the step began with, in the sample's last step.
    EXPECT_EQ(s.peak, (1 << 20) + kLeak * s.last_step + 4096);
  }
  const std::string text = format_step_timeline(steps);
  // The first sample ends after `stride` steps, the last after all: the leak in between.
  const int64_t grown = kLeak * (kSteps - (steps.front().last_step + 1));
  EXPECT_EQ(steps.back().end - steps.front().end, grown);
  EXPECT_NE(text.find("grew over the run: temporary +" + format_bytes(grown)), std::string::npos) << text;
}

TEST(StepTimeline, AFlatRunSaysNoGrowth) {
  Ledger ledger(Device::cpu(), make_cpu_allocator());
  auto weights = ledger.allocate(1000, Category::Weights, "w");
  for (int64_t step = 0; step < 5; ++step) {
    ledger.set_step(step);
    auto act = ledger.allocate(50, Category::Activations, "act");
  }
  const std::vector<StepSample> steps = ledger.step_timeline();
  ASSERT_EQ(steps.size(), 5u);
  const std::string text = format_step_timeline(steps);
  EXPECT_NE(text.find("(0 B)"), std::string::npos) << text;
  EXPECT_EQ(text.find("grew"), std::string::npos) << text;
}

// report.html's whole-run chart: 10 MiB of growth on top of 1 GiB is drawn
// over most of the plot's height (the axis starts near the lowest value),
// not as a slope of two pixels.
TEST(StepTimeline, TheReportDrawsSmallGrowthVisibly) {
  MemoryAnatomy m;
  m.device = "cpu";
  constexpr int64_t MiB = 1 << 20;
  for (int64_t step = 0; step < 100; ++step) {
    StepSample s;
    s.first_step = s.last_step = step;
    s.end = 1024 * MiB + step * MiB / 10;
    s.peak = s.end + MiB;
    m.steps.push_back(s);
  }
  m.ledger.peak_total = m.steps.back().peak;
  const std::string html = memory_report_html(m);
  const size_t at = html.find("<path class=\"series-step-end\"");
  ASSERT_NE(at, std::string::npos);
  const size_t d = html.find(" d=\"", at) + 4;
  const std::string path = html.substr(d, html.find('"', d) - d);
  // "M x,y H x L x,y H x ...": the first and last y.
  std::vector<double> ys;
  for (size_t i = 0; (i = path.find(',', i)) != std::string::npos; ++i) ys.push_back(std::stod(path.substr(i + 1)));
  ASSERT_EQ(ys.size(), 100u);
  EXPECT_GT(ys.front() - ys.back(), 100.0) << "the growth spans less than 100 of the plot's 220 units: " << path.substr(0, 200);
  // The axis says where it starts: a round figure at or below the lowest value, 1 GiB.
  const size_t starts = html.find("the axis starts at ");
  ASSERT_NE(starts, std::string::npos);
  EXPECT_EQ(html.substr(starts, 29), "the axis starts at 1020.0 MiB") << "1 GiB rounded down to the 5 MiB ticks";
}

// A real training loop with a buffer planted by the step hook that grows by
// one allocation a step: the whole-run series sees it in every step.
TEST(StepTimeline, ATrainingRunShowsAPlantedLeakOverEveryStep) {
  auto backend = make_cpu_backend(1);
  Ledger& ledger = backend->ledger();
  ModelConfig config = *model_preset("bert-tiny");
  config.max_position_embeddings = 64;
  BertStyleModel model(*backend, config);
  init_weights(model, 1);
  const Dataset data = make_dummy_dataset(12, 16, 1);
  TrainingArguments args;
  args.per_device_train_batch_size = 2;
  args.max_steps = 30;
  args.progress = false;
  Trainer trainer(*backend, model, data, args);
  std::vector<std::shared_ptr<Storage>> planted;
  constexpr int64_t kLeak = 1000;
  trainer.set_hooks(StepHooks{nullptr, [&](int64_t step) {
                                planted.push_back(ledger.allocate(kLeak, Category::Temporary, "planted"));
                                (void)step;
                              }});
  ledger.set_step_timeline_limit(8);
  trainer.train();
  const std::vector<StepSample> steps = ledger.step_timeline();
  ASSERT_LE(steps.size(), 8u);
  EXPECT_EQ(steps.front().first_step, 0);
  EXPECT_EQ(steps.back().last_step, 29);
  // The run's own buffers at a step's end are the same every step (the
  // optimizer's states come in step 1), so the ends differ by the leak only.
  const StepSample& first = steps.front();
  for (const StepSample& s : steps)
    EXPECT_EQ(s.end - first.end, kLeak * (s.last_step - first.last_step)) << s.first_step << "-" << s.last_step;
  EXPECT_EQ(steps.back().end_live[cat(Category::Temporary)], 30 * kLeak);
}

// The command line: anatomy.json's list adds up to its ledger peak, and its
// whole-run series covers every step.
TEST(PeakBuffers, AnatomyJsonAndReportOfACpuRun) {
  test::TempDir dir;
  const auto r = test::run_anatomy("train --device cpu --model bert-tiny --dummy-size 24 --dummy-seq-len 16 "
                                   "--per-device-train-batch-size 2 --output-dir " + dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Largest buffers live at the peak:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("in all: the ledger's peak"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Over the whole run (12 steps"), std::string::npos) << r.output;
  std::ifstream in(dir.file("anatomy.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  const nlohmann::json& b = j["peak_buffers"];
  ASSERT_FALSE(b["buffers"].empty());
  EXPECT_EQ(b["buffers"].size(), kPeakBuffersListed);
  int64_t sum = b["other_bytes"].get<int64_t>();
  std::map<std::string, int64_t> by_category;
  for (auto& [key, bytes] : b["other_by_category"].items()) by_category[key] += bytes.get<int64_t>();
  for (const auto& e : b["buffers"]) {
    sum += e["bytes"].get<int64_t>();
    by_category[e["category"].get<std::string>()] += e["bytes"].get<int64_t>();
    EXPECT_FALSE(e["name"].get<std::string>().empty());
    EXPECT_FALSE(e["phase"].get<std::string>().empty());
  }
  EXPECT_EQ(sum, j["ledger"]["peak_total"].get<int64_t>());
  EXPECT_EQ(b["total"].get<int64_t>(), sum);
  for (auto& [key, bytes] : j["ledger"]["at_peak"].items()) EXPECT_EQ(by_category[key], bytes.get<int64_t>()) << key;
  // The largest buffer at the peak: the flat float32 weights, the whole weights row, allocated before the steps.
  EXPECT_EQ(b["buffers"][0]["bytes"].get<int64_t>(), j["ledger"]["at_peak"]["weights"].get<int64_t>());
  EXPECT_EQ(b["buffers"][0]["category"], "weights");
  EXPECT_EQ(b["buffers"][0]["step"], -1);

  const nlohmann::json& steps = j["step_timeline"];
  ASSERT_EQ(steps.size(), 12u);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i]["first_step"].get<int64_t>(), static_cast<int64_t>(i));
    EXPECT_LE(steps[i]["end"].get<int64_t>(), steps[i]["peak"].get<int64_t>());
  }
  EXPECT_EQ(steps[11]["end"], steps[1]["end"]);  // a flat run

  std::ifstream html_in(dir.file("report.html"));
  const std::string html((std::istreambuf_iterator<char>(html_in)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find("id=\"peak-buffers\""), std::string::npos);
  EXPECT_NE(html.find("id=\"steps-chart\""), std::string::npos);
  EXPECT_NE(html.find(fmt::format("data-bytes=\"{}\"", j["ledger"]["peak_total"].get<int64_t>())), std::string::npos);
}

TEST(PeakBuffers, EstimatePrintsThePlansPeakBuffers) {
  test::TempDir dir;
  const auto r = test::run_anatomy("estimate --device cpu --model bert-tiny --dummy-seq-len 16 --plan-json " +
                                   dir.file("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Largest buffers live at the peak:"), std::string::npos) << r.output;
  std::ifstream in(dir.file("plan.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  int64_t sum = j["peak_buffers"]["other_bytes"].get<int64_t>();
  for (const auto& e : j["peak_buffers"]["buffers"]) sum += e["bytes"].get<int64_t>();
  EXPECT_EQ(sum, j["ledger"]["peak_total"].get<int64_t>());
}

// `estimate --json` prints the figures of the terminal plan: each read back
// from the table's own text and compared.
TEST(EstimateJson, HoldsTheTablesFigures) {
  const std::string flags = "estimate --model bert-mini --dummy-seq-len 128 --gpu-memory 1GiB";
  const auto table = test::run_anatomy(flags);
  const auto json = test::run_anatomy(flags + " --json");
  ASSERT_EQ(table.exit_code, 0) << table.output;
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json j = nlohmann::json::parse(json.output);  // nothing but the document on stdout
  auto table_has = [&](const std::string& text) {
    EXPECT_NE(table.output.find(text), std::string::npos) << "'" << text << "' not in\n" << table.output;
  };
  for (const auto& row : j["at_peak"]) {
    const std::string name = row["category"];
    const int64_t bytes = row["bytes"];
    if (bytes == 0 && (name == "weights_half" || name == "communication" || name == "workspace")) continue;
    table_has(fmt::format("  {:<34} {:>12} {:>10.2f}", name, format_bytes(bytes), row["per_parameter"].get<double>()));
  }
  table_has(fmt::format("  {:<34} {:>12}", "ledger total (peak)", format_bytes(j["peak_total"].get<int64_t>())));
  table_has(fmt::format("  {:<34} {:>12}", "pool segments (peak)", format_bytes(j["reserved_peak"].get<int64_t>())));
  table_has(fmt::format("  {:<34} {:>12}", "predicted NVML use", format_bytes(j["predicted_nvml"].get<int64_t>())));
  table_has(fmt::format("the peak: \"{}\"", j["ledger"]["peak_phase"].get<std::string>()));
  table_has(fmt::format("Largest batch that fits: {} plain, {} with --gradient-checkpointing.",
                        j["largest_plain"].get<int64_t>(), j["largest_checkpointed"].get<int64_t>()));
  table_has(fmt::format("{}: predicted", j["device_fits"].get<bool>() ? "Fits" : "Does NOT fit"));
  EXPECT_EQ(j["model"], "bert-mini");
  EXPECT_EQ(j["batch_size"], 4);
  EXPECT_EQ(j["sequence_length"], 128);
  EXPECT_EQ(j["device"]["total"].get<int64_t>(), int64_t{1} << 30);
  EXPECT_EQ(j["bytes_per_parameter"]["textbook"]["optimizer"], 8);
  // The peak's largest buffer, as the table names it.
  table_has(j["peak_buffers"]["buffers"][0]["name"].get<std::string>());

  const auto bad = test::run_anatomy("estimate --json --gpu no-such-gpu");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--gpu no-such-gpu: unknown GPU"), std::string::npos) << bad.output;
}

// The trace carries the ledger's live bytes as counters, at each op's start.
TEST(TraceCounters, FollowTheLedgerAtEachOp) {
  StepTiming step;
  step.step_ms = 3.0;
  OpRecord a;
  a.op = "linear_forward";
  a.start_ms = 0.0;
  a.ms = 1.0;
  a.live[cat(Category::Weights)] = 1000;
  OpRecord b = a;
  b.start_ms = 1.0;
  b.live[cat(Category::Activations)] = 300;
  OpRecord c = b;  // unchanged: no new counter event
  c.start_ms = 2.0;
  step.ops = {a, b, c};
  const nlohmann::json trace = nlohmann::json::parse(trace_json({step}));
  std::vector<nlohmann::json> totals, by_category;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "C") continue;
    if (e["name"] == "ledger bytes live") totals.push_back(e);
    if (e["name"] == "ledger bytes by category") by_category.push_back(e);
  }
  ASSERT_EQ(totals.size(), 2u);
  EXPECT_EQ(totals[0]["args"]["live"], 1000);
  EXPECT_EQ(totals[1]["args"]["live"], 1300);
  EXPECT_DOUBLE_EQ(totals[1]["ts"].get<double>(), 1000.0);
  ASSERT_EQ(by_category.size(), 2u);
  EXPECT_EQ(by_category[1]["args"]["activations"], 300);
  EXPECT_EQ(by_category[1]["args"].size(), 2u);  // weights and activations: the categories that hold anything
}

TEST(TraceCounters, AProfiledCpuRunWritesThem) {
  test::TempDir dir;
  const auto r = test::run_anatomy("profile --device cpu --model bert-tiny --dummy-size 8 --dummy-seq-len 16 "
                                   "--per-device-train-batch-size 2 --profile-steps 1 --profile-warmup 1 "
                                   "--output-dir " + dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir.file("trace.json"));
  const nlohmann::json trace = nlohmann::json::parse(in);
  int64_t highest = 0, counters = 0;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "C" && e["name"] == "ledger bytes live") {
      ++counters;
      highest = std::max(highest, e["args"]["live"].get<int64_t>());
    }
  EXPECT_GT(counters, 10);
  std::ifstream anatomy_in(dir.file("anatomy.json"));
  const nlohmann::json anatomy = nlohmann::json::parse(anatomy_in);
  // Sampled at op starts, the counters never exceed the ledger's peak and reach its weights at least.
  EXPECT_LE(highest, anatomy["ledger"]["peak_total"].get<int64_t>());
  EXPECT_GE(highest, anatomy["ledger"]["at_peak"]["weights"].get<int64_t>());
}

}  // namespace
}  // namespace anatomy
