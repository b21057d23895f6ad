// The learning-rate schedules (optim/optimizer.h scheduled_lr) against transformers' get_scheduler: every step
// of 1000-step runs with and without warmup (tests/fixtures/lr-schedules, made by
// tests/tools/make_lr_schedule_fixture.py), to 1e-7 relative; and the warmup ratio's rounding.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/optim/optimizer.h"

namespace anatomy {
namespace {

nlohmann::json fixture() {
  std::ifstream in(std::filesystem::path(ANATOMY_FIXTURES_DIR) / "lr-schedules" / "schedules.json");
  return nlohmann::json::parse(in);
}

TEST(LrSchedules, EqualTransformersAtEveryStep) {
  const nlohmann::json f = fixture();
  ASSERT_EQ(f.at("schedules").size(), 21u);
  for (const nlohmann::json& c : f.at("schedules")) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name + " warmup " + c.at("warmup_steps").dump());
    ScheduleKind kind;
    ASSERT_TRUE(parse_schedule_kind(name, &kind));
    const double lr = c.at("learning_rate").get<double>();
    const int64_t total = c.at("total_steps").get<int64_t>(), warmup = c.at("warmup_steps").get<int64_t>();
    const auto rates = c.at("rates").get<std::vector<double>>();
    ASSERT_EQ(rates.size(), static_cast<size_t>(total));
    int worst_step = -1;
    double worst = 0;
    for (int64_t step = 0; step < total; ++step) {
      const double got = scheduled_lr(kind, lr, step, warmup, total);
      const double want = rates[static_cast<size_t>(step)];
      const double err = want == 0 ? std::fabs(got) / lr : std::fabs(got - want) / std::fabs(want);
      if (err > worst) worst = err, worst_step = static_cast<int>(step);
    }
    EXPECT_LE(worst, 1e-7) << "step " << worst_step;
  }
}

TEST(LrSchedules, WarmupRatioRoundsUpAsTrainingArguments) {
  for (const nlohmann::json& r : fixture().at("warmup_ratios")) {
    const double w = r.at("warmup").get<double>();
    if (w >= 1) continue;
    EXPECT_EQ(warmup_steps_of_ratio(w, r.at("total_steps").get<int64_t>()), r.at("warmup_steps").get<int64_t>())
        << w;
  }
}

TEST(LrSchedules, NamesAndPolynomialBound) {
  ScheduleKind kind;
  EXPECT_FALSE(parse_schedule_kind("cosine_with_min_lr", &kind));
  EXPECT_THROW(check_schedule(ScheduleKind::Polynomial, 1e-7), Error);
  EXPECT_NO_THROW(check_schedule(ScheduleKind::Polynomial, 2e-7));
  EXPECT_NO_THROW(check_schedule(ScheduleKind::Cosine, 0));
}

}  // namespace
}  // namespace anatomy
