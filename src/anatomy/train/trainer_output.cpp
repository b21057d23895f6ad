// trainer_output.cpp: progress, Trainer's metrics block and results files.
#include "anatomy/train/trainer_output.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/io/files.h"
#include "anatomy/io/json.h"

namespace anatomy {

std::string format_clock(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
}

std::string format_timedelta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  const int64_t s = static_cast<int64_t>(seconds);
  // datetime.timedelta's str: h:mm:ss, "N day(s), " ahead past a day.
  const int64_t days = s / 86400, rest = s % 86400;
  std::string text = fmt::format("{}:{:02}:{:02}", rest / 3600, rest / 60 % 60, rest % 60);
  if (days > 0) text = fmt::format("{} day{}, {}", days, days == 1 ? "" : "s", text);
  return fmt::format("{}.{:02}", text, static_cast<int>((seconds - static_cast<double>(s)) * 100));
}

Progress::Progress(int64_t total, int64_t first_step, bool enabled, bool terminal)
    : total_(total), first_step_(first_step), bar_(enabled && terminal), lines_(enabled && !terminal) {}

void Progress::step(int64_t step, double loss, double elapsed) {
  if (!bar_) return;
  const int width = 30;
  const int64_t done = step - first_step_;
  const int filled = static_cast<int>(width * step / std::max<int64_t>(total_, 1));
  const double rate = elapsed > 0 ? done / elapsed : 0.0;
  const double eta = rate > 0 ? (total_ - step) / rate : 0.0;
  fmt::print(stderr, "\r[{}{}] {}/{} loss {:.4f} {:.2f} it/s [{}<{}]  ", std::string(filled, '#'),
             std::string(width - filled, '.'), step, total_, loss, rate, format_clock(elapsed), format_clock(eta));
  std::fflush(stderr);
  drawn_ = true;
}

std::string Progress::line(const ProgressRecord& r) {
  const double rate = r.elapsed > 0 && r.done > 0 ? r.done / r.elapsed : 0.0;
  const double eta = rate > 0 ? static_cast<double>(r.total - r.step) / rate : 0.0;
  const int percent = static_cast<int>(100 * r.step / std::max<int64_t>(r.total, 1));
  return fmt::format(
      "step {}/{} ({}%) | epoch {:.2f} | loss {:.4f} | learning_rate {:.4g} | grad_norm {:.4g} | {:.2f} samples/s | "
      "elapsed {} | ETA {}",
      r.step, r.total, percent, r.epoch, r.loss, r.learning_rate, r.grad_norm, r.samples_per_second,
      format_clock(r.elapsed), format_clock(eta));
}

void Progress::record(const ProgressRecord& r) {
  if (!lines_) return;
  fmt::print(stderr, "{}\n", line(r));
  std::fflush(stderr);
}

void Progress::break_line() {
  if (bar_ && drawn_) fmt::print(stderr, "\n");
  drawn_ = false;
}

Progress::~Progress() { break_line(); }

double round_to(double x, int digits) {
  if (!std::isfinite(x)) return x;
  const double scale = std::pow(10.0, digits);
  return std::nearbyint(x * scale) / scale;
}

namespace {

// A metric's value as Python prints it: ints as ints, floats in their shortest
// repr with ".0" on whole numbers.
bool integer_metric(const std::string& key) {
  return key.size() >= 8 && key.compare(key.size() - 8, 8, "_samples") == 0;
}

std::string python_float(double v) {
  std::string text = fmt::format("{}", v);
  if (std::isfinite(v) && text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

}  // namespace

std::string format_metrics(const std::string& split, const std::map<std::string, double>& metrics) {
  std::vector<std::pair<std::string, std::string>> rows;
  for (const auto& [key, value] : metrics) {
    std::string text;
    if (key.find("_runtime") != std::string::npos) text = format_timedelta(value);
    else if (integer_metric(key)) text = fmt::format("{}", static_cast<int64_t>(std::llround(value)));
    else text = python_float(round_to(value, 4));
    rows.emplace_back(key, text);
  }
  size_t kw = 0, vw = 0;
  for (const auto& [k, v] : rows) kw = std::max(kw, k.size()), vw = std::max(vw, v.size());
  std::string out = fmt::format("***** {} metrics *****\n", split);
  for (const auto& [k, v] : rows) out += fmt::format("  {:<{}} = {:>{}}\n", k, kw, v, vw);
  return out;
}

nlohmann::json metrics_json(const std::map<std::string, double>& metrics) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, value] : metrics) {
    if (integer_metric(key)) j[key] = static_cast<int64_t>(std::llround(value));
    else j[key] = value;
  }
  return j;
}

void save_metrics(const std::string& dir, const std::string& split, const std::map<std::string, double>& metrics) {
  namespace fs = std::filesystem;
  const nlohmann::json j = metrics_json(metrics);
  io::write_text_file_atomic((fs::path(dir) / (split + "_results.json")).string(), j.dump(4) + "\n");
  const std::string all_path = (fs::path(dir) / "all_results.json").string();
  nlohmann::json all = nlohmann::json::object();
  if (io::path_exists(all_path)) {
    const auto old = nlohmann::json::parse(io::read_text_file(all_path), nullptr, /*allow_exceptions=*/false);
    if (old.is_object()) all = old;  // a file that is not Trainer's is replaced
  }
  all.update(j);
  io::write_text_file_atomic(all_path, all.dump(4) + "\n");
}

}  // namespace anatomy
