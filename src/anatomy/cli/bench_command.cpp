// bench_command.cpp: `anatomy bench`, the seeds' table of efficient-training
// techniques, measured. Each row is `anatomy train` in a child process of this
// same binary, one after another, so that each row's memory is measured in a
// clean process; this process never makes a CUDA context (it reads NVML only).
// With --with-hf, Hugging Face Trainer runs the same row in a Python process
// (bench/hf_trainer.py). Writes bench.md, bench.json and bench.svg.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/cli/bench.h"
#include "anatomy/cli/child_process.h"
#include "anatomy/cli/commands.h"
#include "anatomy/core/error.h"
#include "anatomy/gpu/nvml.h"
#include "anatomy/io/files.h"
#include "anatomy/model/checkpoint.h"

namespace anatomy::cli {

namespace fs = std::filesystem;

namespace {

// What the seed experiment becomes on a CPU, as `anatomy train` scales it.
constexpr const char* kCpuModel = "bert-mini";
constexpr int64_t kCpuDummySize = 128;
constexpr int64_t kCpuDummySeqLen = 128;
// How often the bench reads NVML while a row runs.
constexpr double kPollSeconds = 0.1;

struct BenchFlags {
  std::string output_dir;
  std::string model = "bert-large-uncased";
  int64_t dummy_size = 512;
  int64_t dummy_seq_len = 512;
  int64_t max_steps = -1;
  std::string device = "auto";
  std::string rows;  // comma-separated names (one string: a vector option would swallow the `--` after it)
  bool list_rows = false;
  bool with_hf = false;
  std::string hf_python = "python3";
  std::string hf_script;
  int64_t warm_up_steps = -1;  // -1: 2 on the GPU, 0 on the CPU
  std::vector<std::string> passthrough;
};

// Flags the bench sets on every child itself: after `--` they would be given twice.
const std::vector<std::string> kOwnFlags = {"--output-dir",    "--model",  "--model_name_or_path", "--dummy-size",
                                            "--dummy-seq-len", "--device", "--max-steps",          "--no-progress"};

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

const CLI::Validator& row_names_check() {
  static const CLI::Validator check(
      [](std::string& list) -> std::string {
        for (const std::string& name : split_commas(list)) {
          bool known = false;
          for (const BenchRow& r : default_bench_rows()) known = known || r.name == name;
          if (!known) return fmt::format("unknown row '{}'; the rows are: {}", name, bench_row_names());
        }
        return {};
      },
      "ROW,...");
  return check;
}

// The rows --rows names, in the order given; all of them without it.
std::vector<BenchRow> selected_rows(const std::string& list) {
  if (list.empty()) return default_bench_rows();
  std::vector<BenchRow> out;
  std::set<std::string> seen;
  for (const std::string& name : split_commas(list)) {
    if (!seen.insert(name).second) fail("--rows: '{}' is listed twice", name);
    for (const BenchRow& r : default_bench_rows())
      if (r.name == name) out.push_back(r);
  }
  return out;
}

// The flags after `--` must be flags `anatomy train` takes, and none the bench sets itself.
void check_passthrough(const std::vector<std::string>& flags) {
  for (const std::string& f : flags) {
    const std::string name = f.substr(0, f.find('='));
    if (std::find(kOwnFlags.begin(), kOwnFlags.end(), name) != kOwnFlags.end())
      fail("after --: {} is set by the bench for every row; give it to anatomy bench itself (before --)", name);
  }
  CLI::App train;
  // Registers train's flags. The command is never run, but it owns the flags'
  // storage that parsing writes into, so it must live until the parse is done.
  const Command command = add_train_command(train);
  std::vector<std::string> args(flags.rbegin(), flags.rend());  // CLI11 takes them last first
  try {
    train.parse(args);
  } catch (const CLI::ParseError& e) {
    fail("after -- (flags for every anatomy train row): {}", e.what());
  }
}

std::string exe_path() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "/proc/self/exe" : p.string();
}

// bench/hf_trainer.py in the source tree beside the build directory, or in the current directory.
std::string find_hf_script(const std::string& flag) {
  if (!flag.empty()) {
    if (!fs::is_regular_file(flag)) fail("--hf-script {}: no such file", flag);
    return flag;
  }
  const fs::path exe_dir = fs::path(exe_path()).parent_path();
  for (const fs::path& p : {exe_dir / ".." / "bench" / "hf_trainer.py", exe_dir / "bench" / "hf_trainer.py",
                            fs::current_path() / "bench" / "hf_trainer.py"})
    if (std::error_code ec; fs::is_regular_file(p, ec)) return fs::weakly_canonical(p, ec).string();
  fail("--with-hf: bench/hf_trainer.py is neither in the source tree above {} nor in the current directory; "
       "give --hf-script",
       exe_dir.string());
}

std::string read_or_empty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// The child's "error: ..." line, else its last non-empty line.
std::string error_summary(const std::string& stderr_text) {
  std::string last;
  for (const std::string& line : lines_of(stderr_text)) {
    if (line.rfind("error: ", 0) == 0) return line.substr(7);
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last.size() > 300 ? last.substr(0, 300) + "..." : last;
}

// The last line of `text` that parses as a JSON object.
std::optional<nlohmann::ordered_json> last_json_line(const std::string& text) {
  const std::vector<std::string> lines = lines_of(text);
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    if (it->empty() || (*it)[0] != '{') continue;
    auto j = nlohmann::ordered_json::parse(*it, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.is_object()) return j;
  }
  return std::nullopt;
}

// The figures of a row whose train exited 0: its summary lines, log.jsonl and
// anatomy.json. Throws Error naming what is missing.
void read_row_figures(RowResult& r, const std::string& stdout_text) {
  static const std::regex time_re(R"(^Time: ([0-9.eE+-]+)\s*$)"), speed_re(R"(^Samples/second: ([0-9.eE+-]+)\s*$)"),
      gpu_re(R"(^GPU memory occupied: ([0-9]+) MB\.\s*$)"), rss_re(R"(^CPU memory occupied \(peak RSS\): ([0-9]+) MB\.)");
  bool have_time = false, have_speed = false;
  for (const std::string& line : lines_of(stdout_text)) {
    std::smatch m;
    if (std::regex_match(line, m, time_re)) {
      r.seconds = std::stod(m[1]);
      have_time = true;
    } else if (std::regex_match(line, m, speed_re)) {
      r.samples_per_second = std::stod(m[1]);
      have_speed = true;
    } else if (std::regex_match(line, m, gpu_re)) {
      r.gpu_memory_occupied_mb = std::stoll(m[1]);  // the last reading is the one after training
    } else if (std::regex_search(line, m, rss_re)) {
      r.cpu_peak_rss_mb = std::stoll(m[1]);
    }
  }
  if (!have_time || !have_speed) fail("its output has no \"Time:\" and \"Samples/second:\" lines");

  const std::string log_path = (fs::path(r.output_dir) / "log.jsonl").string();
  bool have_log = false;
  for (const std::string& line : lines_of(read_or_empty(log_path))) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("samples_per_second")) continue;  // evaluation records have none
    r.steps = j.value("step", int64_t{0});
    r.final_loss = j.value("loss", 0.0);
    r.log_samples_per_second = j.value("samples_per_second", 0.0);
    have_log = true;
  }
  if (!have_log) fail("{}: no training record", log_path);

  const std::string anatomy_path = (fs::path(r.output_dir) / "anatomy.json").string();
  const auto a = nlohmann::json::parse(read_or_empty(anatomy_path), nullptr, false);
  if (a.is_discarded() || !a.contains("rows") || !a.contains("ledger")) fail("{}: missing or not JSON", anatomy_path);
  for (const auto& row : a["rows"]) r.at_peak.push_back({row.value("key", ""), row.value("at_peak", int64_t{-1})});
  r.ledger_peak_bytes = a["ledger"].value("peak_total", int64_t{-1});
  r.peak_phase = a["ledger"].value("peak_phase", "");
  r.nvml_process_bytes = a.value("nvml_used", int64_t{-1});
  r.device = a.value("device", r.device);
  r.device_name = a.value("device_name", "");  // on a GPU without NVML there is no "GPU memory occupied": "-"
}

// An empty directory at `path`, whatever was there.
void fresh_directory(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (!ec) fs::create_directories(path, ec);
  if (ec) fail("{}: cannot make it afresh ({})", path, ec.message());
}

// Progress on stderr: a line when a run starts and ends; on a terminal, the elapsed time meanwhile.
class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO) != 0) {}
  void line(const std::string& text) {
    clear();
    fmt::print(stderr, "{}\n", text);
    std::fflush(stderr);
  }
  void ticking(const std::string& prefix, double seconds) {
    if (!tty_ || seconds - shown_ < 1.0) return;
    shown_ = seconds;
    fmt::print(stderr, "\r{} {:.0f} s\033[K", prefix, seconds);
    std::fflush(stderr);
    dirty_ = true;
  }
  void reset() { shown_ = 0.0; }

 private:
  void clear() {
    if (dirty_) fmt::print(stderr, "\r\033[K");
    dirty_ = false;
  }
  bool tty_;
  bool dirty_ = false;
  double shown_ = 0.0;
};

// NVML's device memory used (MiB) at its highest while a child runs.
struct NvmlPeak {
  bool enabled = false;
  int64_t peak_mb = -1;
  void poll() {
    if (!enabled) return;
    static const int index = nvml_index_of(0);  // the children's GPU (CUDA device 0) as NVML numbers it
    if (const auto m = gpu::Nvml::instance().memory(index))
      peak_mb = std::max<int64_t>(peak_mb, static_cast<int64_t>(m->used / (1024 * 1024)));
  }
};

struct Sweep {
  explicit Sweep(const BenchFlags& f) : flags(f) {}
  const BenchFlags& flags;
  BenchSetup setup;
  nlohmann::json model_config;  // for Hugging Face: the same architecture
  std::string hf_script;
  fs::path out;
  std::vector<RowResult> results;
  Progress progress;
  size_t failures = 0;

  std::string tag(size_t k) const { return fmt::format("[{}/{}] {}", k + 1, results.size(), results[k].row.name); }

  void write_reports() {
    io::write_text_file_atomic((out / "bench.md").string(), bench_markdown(results, setup));
    io::write_text_file_atomic((out / "bench.json").string(), bench_json(results, setup));
    io::write_text_file_atomic((out / "bench.svg").string(), bench_chart_svg(results, setup));
  }

  // Row k's `anatomy train`, writing to output_dir, for max_steps steps (<= 0: the sweep's length).
  std::vector<std::string> train_command(size_t k, const std::string& output_dir, int64_t max_steps) const {
    std::vector<std::string> command = {
        exe_path(),      "train",       "--model",      setup.model, "--dummy-size", std::to_string(setup.dummy_size),
        "--dummy-seq-len", std::to_string(setup.dummy_seq_len), "--device", setup.device, "--output-dir", output_dir,
        "--no-progress"};
    if (max_steps > 0) command.insert(command.end(), {"--max-steps", std::to_string(max_steps)});
    for (const std::string& f : results[k].row.train_flags()) command.push_back(f);
    for (const std::string& f : setup.passthrough) command.push_back(f);
    return command;
  }

  // The unmeasured run before a measured one (--warm-up-steps): its files go
  // to `dir`, removed afterwards; only how it ended is shown. A warm-up that
  // fails does not stop the row: its measured run reports what went wrong.
  void warm_up(size_t k, const std::vector<std::string>& command, const fs::path& dir, const std::string& who,
               const std::string& program = "") {
    fresh_directory(dir.string());
    progress.line(fmt::format("{}: warm-up{}, {} step{} ...", tag(k), who, setup.warm_up_steps,
                              setup.warm_up_steps == 1 ? "" : "s"));
    progress.reset();
    const ChildOutcome child = run_child(
        command, (dir / "stdout.txt").string(), (dir / "stderr.txt").string(),
        [&](double s) { progress.ticking(tag(k) + ": warm-up" + who, s); }, kPollSeconds, program);
    if (child.exit_code != 0)
      progress.line(fmt::format("{}: warm-up{} exited {}; the measured run follows", tag(k), who, child.exit_code));
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  void run_ours(size_t k) {
    RowResult& r = results[k];
    r.device = setup.device == "cpu" ? "cpu" : "cuda:0";
    if (r.row.needs_gpu() && setup.device == "cpu") {
      r.status = RowStatus::NotApplicable;
      r.reason = "GPU only";
      progress.line(fmt::format("{}: n/a ({} runs on the GPU only)", tag(k), r.row.precision));
      return;
    }
    // The first run of a product shape on a machine times cuBLASLt's candidates: kept out of the figures.
    if (setup.warm_up_steps > 0) {
      const fs::path dir = out / "rows" / (r.row.name + ".warm-up");
      warm_up(k, train_command(k, dir.string(), setup.warm_up_steps), dir, "", "/proc/self/exe");
    }
    r.output_dir = (out / "rows" / r.row.name).string();
    fresh_directory(r.output_dir);  // a previous sweep's files must not pass for this one's
    r.command = train_command(k, r.output_dir, setup.max_steps);

    const std::string stdout_path = (fs::path(r.output_dir) / "stdout.txt").string();
    const std::string stderr_path = (fs::path(r.output_dir) / "stderr.txt").string();
    progress.line(fmt::format("{}: {} ...", tag(k), r.row.description()));
    NvmlPeak nvml{setup.device != "cpu"};
    progress.reset();
    // /proc/self/exe: this very binary, even if the file was rebuilt meanwhile.
    const ChildOutcome child = run_child(
        r.command, stdout_path, stderr_path,
        [&](double s) {
          nvml.poll();
          progress.ticking(tag(k) + ":", s);
        },
        kPollSeconds, "/proc/self/exe");
    r.exit_code = child.exit_code;
    r.wall_seconds = child.seconds;
    r.nvml_peak_mb = nvml.peak_mb;
    const std::string err = read_or_empty(stderr_path);
    if (child.exit_code == 3) {
      r.status = RowStatus::OutOfMemory;
      r.reason = error_summary(err);
      progress.line(fmt::format("{}: out of memory (exit 3): {}", tag(k), r.reason));
    } else if (child.exit_code != 0) {
      r.status = RowStatus::Failed;
      r.reason = child.signal ? fmt::format("killed by signal {}", child.signal) : error_summary(err);
      ++failures;
      progress.line(fmt::format("{}: failed with exit code {}: {} (see {})", tag(k), child.exit_code, r.reason,
                                stderr_path));
    } else {
      try {
        read_row_figures(r, read_or_empty(stdout_path));
        r.status = RowStatus::Ok;
        progress.line(fmt::format("{}: {:.2f} s, {:.2f} samples/s, {} (wall {:.1f} s)", tag(k), r.seconds,
                                  r.samples_per_second,
                                  setup.device == "cpu" ? fmt::format("ledger peak {:.1f} MB", r.memory_mb())
                                                        : fmt::format("{} MB", r.gpu_memory_occupied_mb),
                                  r.wall_seconds));
      } catch (const Error& e) {
        r.status = RowStatus::Failed;
        r.reason = e.what();
        ++failures;
        progress.line(fmt::format("{}: exited 0 but {} (see {})", tag(k), r.reason, r.output_dir));
      }
    }
    // The weights of a random model trained on dummy data: gigabytes per row, of no use afterwards.
    std::error_code ec;
    fs::remove(fs::path(r.output_dir) / "model.safetensors", ec);
  }

  void run_hf(size_t k) {
    RowResult& r = results[k];
    r.hf_run = true;
    HfResult& h = r.hf;
    if (r.row.needs_gpu() && setup.device == "cpu") {
      h.status = RowStatus::NotApplicable;
      h.reason = "GPU only";
      return;
    }
    const fs::path dir = fs::path(out) / "rows" / r.row.name;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) fail("{}: cannot create ({})", dir.string(), ec.message());
    nlohmann::json args = r.row.hf_arguments();
    if (setup.max_steps > 0) args["max_steps"] = setup.max_steps;
    nlohmann::json settings = {{"samples", setup.dummy_size}, {"seq_len", setup.dummy_seq_len},
                               {"batch", r.row.batch},        {"config", model_config},
                               {"args", args},                {"output_dir", (dir / "hf").string()},
                               {"device", setup.device}};
    // Trainer's first process on a machine runs slower than the next ones
    // (kernels compiled and cached at run time, docs/BENCHMARKS.md).
    if (setup.warm_up_steps > 0) {
      nlohmann::json warm = settings;
      const fs::path warm_dir = out / "rows" / (r.row.name + ".hf-warm-up");
      warm["args"]["max_steps"] = setup.warm_up_steps;
      warm["output_dir"] = (warm_dir / "hf").string();
      warm_up(k, {flags.hf_python, hf_script, warm.dump()}, warm_dir, ", Hugging Face");
    }
    const std::string stdout_path = (dir / "hf-stdout.txt").string(), stderr_path = (dir / "hf-stderr.txt").string();
    progress.line(fmt::format("{}: Hugging Face Trainer ...", tag(k)));
    NvmlPeak nvml{setup.device != "cpu"};
    progress.reset();
    const ChildOutcome child = run_child(
        {flags.hf_python, hf_script, settings.dump()}, stdout_path, stderr_path,
        [&](double s) {
          nvml.poll();
          progress.ticking(tag(k) + ", Hugging Face:", s);
        },
        kPollSeconds);
    h.exit_code = child.exit_code;
    h.peak_mb = nvml.peak_mb;
    const auto result = last_json_line(read_or_empty(stdout_path));
    const std::string status = result ? result->value("status", "") : "";
    if (result) h.raw = *result;
    if (status == "ok") {
      h.status = RowStatus::Ok;
      h.seconds = result->value("train_runtime", 0.0);
      h.samples_per_second = result->value("train_samples_per_second", 0.0);
      if (setup.device == "cpu") h.peak_mb = result->value("peak_rss_mb", int64_t{-1});
      progress.line(fmt::format("{}, Hugging Face: {:.2f} s, {:.2f} samples/s, peak {} {} MB (wall {:.1f} s)", tag(k),
                                h.seconds, h.samples_per_second, setup.device == "cpu" ? "RSS" : "NVML", h.peak_mb,
                                child.seconds));
    } else if (status == "n/a") {
      h.status = RowStatus::NotApplicable;
      h.reason = result->value("reason", "");
      progress.line(fmt::format("{}, Hugging Face: n/a ({})", tag(k), h.reason));
    } else if (status == "oom" || child.exit_code == 3) {
      h.status = RowStatus::OutOfMemory;
      h.reason = result ? result->value("error", "") : error_summary(read_or_empty(stderr_path));
      progress.line(fmt::format("{}, Hugging Face: out of memory", tag(k)));
    } else {
      h.status = RowStatus::Failed;
      h.reason = result ? result->value("error", "") : error_summary(read_or_empty(stderr_path));
      if (child.exit_code == 0) h.exit_code = 1;  // it said nothing we could read
      ++failures;
      progress.line(fmt::format("{}, Hugging Face: failed with exit code {}: {} (see {})", tag(k), child.exit_code,
                                h.reason, stderr_path));
    }
  }
};

// "cpu" or "cuda", decided from NVML and this build, without a CUDA context.
std::string resolve_device(const std::string& flag) {
  const gpu::Nvml& nvml = gpu::Nvml::instance();
  const bool gpu_present = nvml.available() && nvml.device_count() > 0;
#ifdef ANATOMY_HAVE_CUDA
  const bool built = true;
#else
  const bool built = false;
#endif
  if (flag == "cuda") {
    if (!built) fail("--device cuda: this build has no CUDA backend (nvcc was not found when it was built)");
    if (!gpu_present) fail("--device cuda: no NVIDIA GPU is visible to this process");
  }
  if (flag == "cpu") return "cpu";
  return built && gpu_present ? "cuda" : "cpu";
}

// `python bench/hf_trainer.py --check`: the versions, or an error before anything is written.
std::string check_hf(const BenchFlags& flags, const std::string& script, bool gpu) {
  char name[] = "/tmp/anatomy-bench-check-XXXXXX";
  const int fd = mkstemp(name);
  if (fd < 0) fail("--with-hf: cannot make a temporary file in /tmp");
  close(fd);
  ChildOutcome child;
  try {
    child = run_child({flags.hf_python, script, "--check"}, name, name);
  } catch (const Error& e) {
    std::error_code ec;
    fs::remove(name, ec);
    fail("--with-hf: {}", e.what());
  }
  const std::string text = read_or_empty(name);
  std::error_code ec;
  fs::remove(name, ec);
  const auto j = last_json_line(text);
  if (child.exit_code != 0 || !j || j->value("status", "") != "ok")
    fail("--with-hf: {} {} --check failed (exit {}): {}", flags.hf_python, script, child.exit_code,
         j ? j->value("error", "") : error_summary(text));
  if (gpu && !j->value("cuda", false)) fail("--with-hf: PyTorch under {} sees no GPU", flags.hf_python);
  const auto version = [&](const char* key) {
    return j->contains(key) && (*j)[key].is_string() ? (*j)[key].get<std::string>() : std::string("absent");
  };
  return fmt::format("torch {}, transformers {}, bitsandbytes {}", version("torch"), version("transformers"),
                     version("bitsandbytes"));
}

void list_rows() {
  fmt::print("| row | settings | anatomy train flags | Hugging Face TrainingArguments |\n");
  fmt::print("| --- | --- | --- | --- |\n");
  for (const BenchRow& r : default_bench_rows())
    fmt::print("| {} | {} | `{}` | `{}` |\n", r.name, r.description(), fmt::join(r.train_flags(), " "),
               r.hf_arguments().dump());
}

int run_bench(const BenchFlags& flags, const CLI::App& app) {
  if (flags.list_rows) {
    list_rows();
    return 0;
  }
  if (flags.output_dir.empty())
    fail("--output-dir is required: the sweep writes bench.md, bench.json, bench.svg and rows/ there");
  if (fs::exists(flags.output_dir) && !fs::is_directory(flags.output_dir))
    fail("--output-dir {}: exists and is not a directory", flags.output_dir);
  const std::vector<BenchRow> rows = selected_rows(flags.rows);
  check_passthrough(flags.passthrough);

  Sweep sweep(flags);
  BenchSetup& setup = sweep.setup;
  setup.device = resolve_device(flags.device);
  setup.model = flags.model;
  setup.dummy_size = flags.dummy_size;
  setup.dummy_seq_len = flags.dummy_seq_len;
  setup.max_steps = flags.max_steps;
  setup.passthrough = flags.passthrough;
  setup.with_hf = flags.with_hf;
  std::string scaled;
  if (setup.device == "cpu" && flags.device == "auto") {
    // As `anatomy train` does: the seed experiment scaled, only where no flag says otherwise.
    std::vector<std::string> parts;
    if (!app.count("--model")) parts.push_back(fmt::format("model {}", setup.model = kCpuModel));
    if (!app.count("--dummy-size")) parts.push_back(fmt::format("{} sequences", setup.dummy_size = kCpuDummySize));
    if (!app.count("--dummy-seq-len"))
      parts.push_back(fmt::format("{} tokens each", setup.dummy_seq_len = kCpuDummySeqLen));
    if (!parts.empty())
      scaled = fmt::format("No GPU found: the sweep runs on the CPU, scaled: {} (set --model, --dummy-size, "
                           "--dummy-seq-len to change).",
                           fmt::join(parts, ", "));
  }
  const ModelSource source = resolve_model(setup.model);
  sweep.model_config = model_config_to_json(source.config);
  if (setup.device != "cpu") setup.gpu_name = gpu::Nvml::instance().device_name(nvml_index_of(0)).value_or("");
  setup.warm_up_steps = flags.warm_up_steps >= 0 ? flags.warm_up_steps : (setup.device == "cpu" ? 0 : 2);
  if (flags.with_hf) {
    sweep.hf_script = find_hf_script(flags.hf_script);
    setup.hf_versions = check_hf(flags, sweep.hf_script, setup.device != "cpu");
  }
  // The relative columns divide by vanilla, or by the first row when vanilla is not in the sweep.
  setup.reference = rows.front().name;
  for (const BenchRow& r : rows)
    if (r.name == "vanilla") setup.reference = r.name;

  sweep.out = fs::path(flags.output_dir);
  std::error_code ec;
  fs::create_directories(sweep.out / "rows", ec);
  if (ec) fail("--output-dir {}: cannot create ({})", flags.output_dir, ec.message());
  for (const BenchRow& r : rows) {
    RowResult result;
    result.row = r;
    sweep.results.push_back(result);
  }

  if (!scaled.empty()) sweep.progress.line(scaled);
  sweep.progress.line(fmt::format("anatomy bench: {} row{} of {}, {} sequences of {} tokens, on {}; results in {}",
                                  rows.size(), rows.size() == 1 ? "" : "s", setup.model, setup.dummy_size,
                                  setup.dummy_seq_len,
                                  setup.device == "cpu" ? "the CPU"
                                                        : (setup.gpu_name.empty() ? "the GPU" : setup.gpu_name),
                                  flags.output_dir));
  if (!setup.hf_versions.empty()) sweep.progress.line("Hugging Face: " + setup.hf_versions);
  const auto start = std::chrono::steady_clock::now();
  for (size_t k = 0; k < rows.size(); ++k) {
    sweep.run_ours(k);
    if (flags.with_hf) sweep.run_hf(k);
    sweep.write_reports();  // after every row: an interrupted sweep keeps what it measured
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  fmt::print("{}", bench_markdown(sweep.results, setup));
  std::fflush(stdout);
  sweep.progress.line(fmt::format("Wrote {}, {} and {} ({:.0f} s in all)", (sweep.out / "bench.md").string(),
                                  (sweep.out / "bench.json").string(), (sweep.out / "bench.svg").string(), total));
  if (sweep.failures > 0) {
    std::vector<std::string> failed;
    for (const RowResult& r : sweep.results) {
      if (r.status == RowStatus::Failed) failed.push_back(fmt::format("{} (exit {})", r.row.name, r.exit_code));
      if (r.hf_run && r.hf.status == RowStatus::Failed)
        failed.push_back(fmt::format("{} with Hugging Face (exit {})", r.row.name, r.hf.exit_code));
    }
    sweep.progress.line(fmt::format("anatomy bench: {} run{} failed: {}", failed.size(), failed.size() == 1 ? "" : "s",
                                    fmt::join(failed, ", ")));
    return 1;
  }
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  app.add_option("--output-dir", flags->output_dir,
                 "Where bench.md, bench.json, bench.svg and rows/<row>/ (each row's train output) go (required)");
  app.add_option("--model,--model_name_or_path", flags->model,
                 "A preset, a Hugging Face model directory or a cached id, as anatomy train takes")
      ->capture_default_str();
  app.add_option("--dummy-size", flags->dummy_size, "Dummy sequences per row")
      ->capture_default_str()->check(positive_number());
  app.add_option("--dummy-seq-len", flags->dummy_seq_len, "Tokens per dummy sequence")
      ->capture_default_str()->check(positive_number());
  app.add_option("--max-steps", flags->max_steps, "Optimizer steps per row (default: one epoch)")
      ->check(positive_number());
  app.add_option("--device", flags->device, "cpu, cuda or auto")->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_option("--rows", flags->rows, "Run only these rows, comma-separated (see --list-rows)")
      ->check(row_names_check());
  app.add_flag("--list-rows", flags->list_rows, "Print the rows of the sweep and their flags, and exit");
  app.add_flag("--with-hf", flags->with_hf,
               "Run Hugging Face Trainer on the same rows (bench/hf_trainer.py) and show it beside anatomy");
  app.add_option("--hf-python", flags->hf_python, "The Python that has torch and transformers")->capture_default_str();
  app.add_option("--hf-script", flags->hf_script, "bench/hf_trainer.py (found beside the build directory by default)");
  app.add_option("--warm-up-steps", flags->warm_up_steps,
                 "Before each row's measured run (and Trainer's, with --with-hf), an unmeasured run of this many "
                 "steps with the same flags: a product shape's first run on a machine times cuBLASLt's "
                 "candidates, and Trainer's first process runs slower than the next (default: 2 on the GPU, 0 on "
                 "the CPU)")
      ->check(non_negative_number());
  app.add_option("train-flags", flags->passthrough, "After --: flags given to every row's anatomy train");
  return [flags, &app]() -> int { return run_bench(*flags, app); };
}

}  // namespace anatomy::cli
