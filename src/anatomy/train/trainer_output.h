// trainer_output.h: what a training run shows and leaves behind as Hugging
// Face Trainer does: the progress on stderr (a bar on a terminal, a line per
// logging step otherwise), the metrics block Trainer's log_metrics prints,
// and run_glue's {train,eval}_results.json and all_results.json; the
// log_history records (trainer_state.json) are built by the trainer.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace anatomy {

// h:mm:ss (an ETA, a duration): 0:00:07, 12:03:45.
std::string format_clock(double seconds);
// Trainer's _secs2timedelta: h:mm:ss.cc, the hundredths truncated (0:01:23.45).
std::string format_timedelta(double seconds);

// The figures of one logging record, for the progress line.
struct ProgressRecord {
  int64_t step = 0, total = 0;
  double epoch = 0, loss = 0, learning_rate = 0, grad_norm = 0, samples_per_second = 0;
  double elapsed = 0;    // seconds since the loop began
  int64_t done = 0;      // steps this process ran (a resumed run counts from its checkpoint)
};

// The progress of a run on stderr. On a terminal: a bar redrawn in place at
// every step. Otherwise (a file, a pipe, Slurm): one line per logging record.
// Disabled (--no-progress, or a rank other than 0 for the lines): nothing.
class Progress {
 public:
  Progress(int64_t total, int64_t first_step, bool enabled, bool terminal);
  // After every step: the bar (a terminal only).
  void step(int64_t step, double loss, double elapsed);
  // At every logging record: the line (not a terminal only).
  void record(const ProgressRecord& r);
  // Before another line on the terminal (an evaluation's): ends the bar's line.
  void break_line();
  bool bar() const { return bar_; }
  ~Progress();
  // The line record() prints, without its newline.
  static std::string line(const ProgressRecord& r);

 private:
  int64_t total_, first_step_;
  bool bar_, lines_;
  bool drawn_ = false;
};

// Trainer.log_metrics(split, metrics): "***** train metrics *****" and one
// aligned "  key = value" line per metric, sorted by key, runtimes as
// h:mm:ss.cc and other floats rounded to 4 digits as metrics_format does.
std::string format_metrics(const std::string& split, const std::map<std::string, double>& metrics);

// Trainer.save_metrics(split, metrics): dir/<split>_results.json, and the
// metrics merged into dir/all_results.json (indent 4, keys sorted).
void save_metrics(const std::string& dir, const std::string& split, const std::map<std::string, double>& metrics);

// Python's round(x, digits) for the figures Trainer rounds (speed_metrics).
double round_to(double x, int digits);

// A value as Python's json.dumps writes an int-valued metric: epochs and
// steps that are whole numbers stay floats in Trainer's records, so this keeps
// doubles as doubles (nlohmann writes 3.0 as 3.0).
nlohmann::json metrics_json(const std::map<std::string, double>& metrics);

}  // namespace anatomy
