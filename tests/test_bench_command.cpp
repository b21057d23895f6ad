// test_bench_command.cpp: `anatomy bench` through the real binary, on the CPU:
// a small sweep's bench.json, bench.md and bench.svg hold the figures each
// row's own train wrote (stdout, log.jsonl, anatomy.json), the relative
// columns divide by the vanilla row, a bad --rows is one clear error with
// nothing written, and a row that fails or runs out of memory is reported
// while the sweep goes on.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_error_util.h"
#include "test_util.h"

namespace anatomy {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::failed_cleanly;
using test::nothing_at;

// The smallest sweep that still says something: bert-tiny, 8 sequences of 16 tokens, on the CPU.
const std::string kSmall = "--model bert-tiny --dummy-size 8 --dummy-seq-len 16 --device cpu";

struct SplitResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs `prefix anatomy <args>` through the shell with stdout and stderr apart.
SplitResult run_split(const test::TempDir& tmp, const std::string& args, const std::string& prefix = "") {
  const std::string out_path = tmp.file("bench.stdout"), err_path = tmp.file("bench.stderr");
  const std::string command =
      prefix + test::anatomy_binary() + " " + args + " > '" + out_path + "' 2> '" + err_path + "'";
  const int status = std::system(command.c_str());
  SplitResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = test::read_all_bytes(out_path);
  r.err = test::read_all_bytes(err_path);
  return r;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

// The number after `label` on a line of `text` that starts with it (the train summary's "Time: 1.23").
double summary_figure(const std::string& text, const std::string& label) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(label, 0) == 0) return std::stod(line.substr(label.size()));
  ADD_FAILURE() << "no line starting with '" << label << "' in:\n" << text;
  return -1.0;
}

json last_log_record(const std::string& dir) {
  std::ifstream in(dir + "/log.jsonl");
  json last;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) last = json::parse(line);
  return last;
}

// The cells of the Markdown table line for `row` ("| row | ... |"), trimmed.
std::vector<std::string> table_cells(const std::string& markdown, const std::string& row) {
  std::istringstream in(markdown);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| " + row + " |", 0) != 0) continue;
    std::vector<std::string> cells;
    size_t start = 1;
    for (size_t bar = line.find('|', start); bar != std::string::npos; bar = line.find('|', start)) {
      std::string c = line.substr(start, bar - start);
      c.erase(0, c.find_first_not_of(' '));
      c.erase(c.find_last_not_of(' ') + 1);
      cells.push_back(c);
      start = bar + 1;
    }
    return cells;
  }
  ADD_FAILURE() << "no table line for " << row << " in:\n" << markdown;
  return {};
}

// Well-formed XML, checked by hand (the tests need no Python): one root, tags
// nested and closed, attribute values quoted, '&' only in the five entities or
// numeric references, no '<' in text or attribute values.
::testing::AssertionResult well_formed_xml(const std::string& xml) {
  auto fail = [](const std::string& why, size_t at) { return ::testing::AssertionFailure() << why << " at " << at; };
  auto check_text = [&](const std::string& text, size_t at) -> std::string {
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '<') return "'<' in text";
      if (text[i] == '&') {
        const size_t semi = text.find(';', i);
        if (semi == std::string::npos) return "unterminated entity";
        const std::string name = text.substr(i + 1, semi - i - 1);
        static const std::regex entity(R"(amp|lt|gt|quot|apos|#[0-9]+|#x[0-9a-fA-F]+)");
        if (!std::regex_match(name, entity)) return "unknown entity &" + name + ";";
      }
    }
    (void)at;
    return {};
  };
  static const std::regex name_re(R"([A-Za-z_][A-Za-z0-9_.:-]*)");
  std::vector<std::string> open;
  int roots = 0;
  size_t i = 0;
  if (xml.rfind("<?xml", 0) == 0) i = xml.find("?>") + 2;
  while (i < xml.size()) {
    const size_t lt = xml.find('<', i);
    const std::string text = xml.substr(i, lt == std::string::npos ? std::string::npos : lt - i);
    if (const std::string why = check_text(text, i); !why.empty()) return fail(why, i);
    if (open.empty() && text.find_first_not_of(" \t\r\n") != std::string::npos) return fail("text outside the root", i);
    if (lt == std::string::npos) break;
    if (xml.compare(lt, 4, "<!--") == 0) {
      i = xml.find("-->", lt);
      if (i == std::string::npos) return fail("unterminated comment", lt);
      i += 3;
      continue;
    }
    // Find the tag's end, skipping quoted attribute values.
    size_t gt = lt + 1;
    char quote = 0;
    for (; gt < xml.size(); ++gt) {
      if (quote) {
        if (xml[gt] == quote) quote = 0;
        else if (xml[gt] == '<') return fail("'<' in an attribute value", gt);
      } else if (xml[gt] == '"' || xml[gt] == '\'') {
        quote = xml[gt];
      } else if (xml[gt] == '>') {
        break;
      }
    }
    if (gt >= xml.size()) return fail("unterminated tag", lt);
    std::string tag = xml.substr(lt + 1, gt - lt - 1);
    if (!tag.empty() && tag[0] == '/') {
      const std::string name = tag.substr(1, tag.find_last_not_of(" \t\r\n"));
      if (open.empty() || open.back() != name)
        return fail("closing </" + name + "> does not match <" + (open.empty() ? "" : open.back()) + ">", lt);
      open.pop_back();
    } else {
      const bool self_closing = !tag.empty() && tag.back() == '/';
      if (self_closing) tag.pop_back();
      const size_t space = tag.find_first_of(" \t\r\n");
      const std::string name = tag.substr(0, space);
      if (!std::regex_match(name, name_re)) return fail("bad tag name '" + name + "'", lt);
      // Attributes: name="value" pairs, each value checked as text.
      static const std::regex attr_re(R"x(\s*([A-Za-z_][A-Za-z0-9_.:-]*)\s*=\s*("[^"]*"|'[^']*')\s*)x");
      std::string rest = space == std::string::npos ? "" : tag.substr(space);
      std::smatch m;
      while (!rest.empty() && rest.find_first_not_of(" \t\r\n") != std::string::npos) {
        if (!std::regex_search(rest, m, attr_re) || m.position(0) != 0)
          return fail("bad attributes in <" + name + ">: " + rest, lt);
        const std::string value = m[2].str().substr(1, m[2].length() - 2);
        if (const std::string why = check_text(value, lt); !why.empty()) return fail(why + " in an attribute", lt);
        rest = m.suffix();
      }
      if (open.empty()) ++roots;
      if (!self_closing) open.push_back(name);
    }
    i = gt + 1;
  }
  if (!open.empty()) return ::testing::AssertionFailure() << "<" << open.back() << "> is never closed";
  if (roots != 1) return ::testing::AssertionFailure() << roots << " root elements";
  return ::testing::AssertionSuccess();
}

TEST(BenchXmlCheck, CatchesWhatIsNotWellFormed) {
  EXPECT_TRUE(well_formed_xml("<?xml version=\"1.0\"?>\n<svg a=\"1\"><text>a &amp; b</text><g/></svg>\n"));
  EXPECT_FALSE(well_formed_xml("<svg><text>a & b</text></svg>"));
  EXPECT_FALSE(well_formed_xml("<svg><text>a</svg></text>"));
  EXPECT_FALSE(well_formed_xml("<svg><g></svg>"));
  EXPECT_FALSE(well_formed_xml("<svg a=1></svg>"));
  EXPECT_FALSE(well_formed_xml("<svg/><svg/>"));
}

// A sweep of three rows that run and one that cannot on the CPU: every figure
// in bench.json is the row's own, and bench.md shows them.
TEST(BenchCommand, FiguresAreTheRowsOwn) {
  test::TempDir tmp;
  const std::string out = tmp.file("sweep");
  const SplitResult r =
      run_split(tmp, "bench --output-dir " + out + " " + kSmall + " --rows vanilla,accum,fp16,adafactor -- --seed 7");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* file : {"bench.md", "bench.json", "bench.svg"}) {
    EXPECT_TRUE(fs::is_regular_file(out + "/" + file)) << file;
    EXPECT_TRUE(nothing_at(out + "/" + std::string(file) + ".tmp")) << file;
  }
  EXPECT_NE(r.err.find("[1/4] vanilla"), std::string::npos) << r.err;  // progress on stderr
  EXPECT_NE(r.err.find("[4/4] adafactor"), std::string::npos) << r.err;

  const json bench = read_json(out + "/bench.json");
  EXPECT_EQ(bench["reference"], "vanilla");
  EXPECT_EQ(bench["memory_measure"], "ledger_peak_mb");
  EXPECT_EQ(bench["setup"]["model"], "bert-tiny");
  EXPECT_EQ(bench["setup"]["warm_up_steps"], 0) << "no warm-up runs on the CPU unless asked";
  EXPECT_EQ(r.err.find("warm-up"), std::string::npos) << r.err;
  const json& rows = bench["rows"];
  ASSERT_EQ(rows.size(), 4u);
  const std::vector<std::string> names = {"vanilla", "accum", "fp16", "adafactor"};
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(rows[i]["name"], names[i]);

  EXPECT_EQ(rows[2]["status"], "n/a");  // fp16 is a GPU mode
  EXPECT_FALSE(fs::exists(out + "/rows/fp16"));
  EXPECT_TRUE(rows[2]["samples_per_second"].is_null());

  for (size_t i : {size_t{0}, size_t{1}, size_t{3}}) {
    const json& row = rows[i];
    const std::string name = row["name"];
    SCOPED_TRACE(name);
    ASSERT_EQ(row["status"], "ok") << row.dump(1);
    const std::string dir = out + "/rows/" + name;
    EXPECT_EQ(row["output_dir"], dir);
    // The command: this binary's train, with the row's flags and the pass-through ones last.
    const std::vector<std::string> command = row["command"];
    ASSERT_GE(command.size(), 4u);
    EXPECT_EQ(command[1], "train");
    EXPECT_EQ(command[command.size() - 2], "--seed");
    EXPECT_EQ(command.back(), "7");
    // Time and samples/s: the seed's lines the row printed.
    const std::string stdout_text = test::read_all_bytes(dir + "/stdout.txt");
    EXPECT_DOUBLE_EQ(row["time_s"].get<double>(), summary_figure(stdout_text, "Time: "));
    EXPECT_DOUBLE_EQ(row["samples_per_second"].get<double>(), summary_figure(stdout_text, "Samples/second: "));
    // log.jsonl's last record: the steps, the loss and its own speed figure (which times the same
    // steps but stops its clock a moment earlier: on a run of milliseconds, not the same number).
    const json log = last_log_record(dir);
    EXPECT_EQ(row["steps"], log["step"]);
    EXPECT_EQ(row["final_loss"], log["loss"]);
    EXPECT_EQ(row["log_samples_per_second"], log["samples_per_second"]);
    EXPECT_EQ(row["steps"].get<int64_t>(), 2);  // 8 sequences: 2 batches of 4, or 8 of 1 in 2 updates of 4
    // anatomy.json: the peak and every category at it, to the byte.
    const json anatomy = read_json(dir + "/anatomy.json");
    EXPECT_EQ(row["ledger_peak_bytes"], anatomy["ledger"]["peak_total"]);
    EXPECT_EQ(row["peak_phase"], anatomy["ledger"]["peak_phase"]);
    ASSERT_EQ(row["at_peak_bytes"].size(), anatomy["rows"].size());
    for (const json& a : anatomy["rows"]) EXPECT_EQ(row["at_peak_bytes"][a["key"].get<std::string>()], a["at_peak"]);
    EXPECT_DOUBLE_EQ(row["memory_mb"].get<double>(), anatomy["ledger"]["peak_total"].get<double>() / (1024.0 * 1024.0));
    EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));  // the rows' weights are not kept
  }
  // accumulation of 4 batches of 1 holds less activation memory than one batch of 4.
  EXPECT_LT(rows[1]["at_peak_bytes"]["activations"].get<int64_t>(),
            rows[0]["at_peak_bytes"]["activations"].get<int64_t>());
  // Adafactor's factored states are smaller than AdamW's two moments.
  EXPECT_LT(rows[3]["at_peak_bytes"]["optimizer_states"].get<int64_t>(),
            rows[0]["at_peak_bytes"]["optimizer_states"].get<int64_t>());

  // The relative columns divide by vanilla.
  const json& vanilla = rows[0];
  for (size_t i : {size_t{0}, size_t{1}, size_t{3}}) {
    const json& row = rows[i];
    EXPECT_NEAR(row["relative_speed"].get<double>(),
                row["samples_per_second"].get<double>() / vanilla["samples_per_second"].get<double>(), 1e-12);
    EXPECT_NEAR(row["relative_memory"].get<double>(),
                row["memory_mb"].get<double>() / vanilla["memory_mb"].get<double>(), 1e-12);
  }
  EXPECT_DOUBLE_EQ(vanilla["relative_speed"].get<double>(), 1.0);
  EXPECT_TRUE(rows[2]["relative_speed"].is_null());

  // bench.md: the same figures, and it is what stdout printed.
  const std::string md = test::read_all_bytes(out + "/bench.md");
  EXPECT_NE(r.out.find(md), std::string::npos) << "stdout:\n" << r.out;
  EXPECT_NE(md.find("ledger peak (MB)"), std::string::npos) << md;  // the CPU says which memory it shows
  for (size_t i : {size_t{0}, size_t{1}, size_t{3}}) {
    const json& row = rows[i];
    const std::vector<std::string> cells = table_cells(md, row["name"]);
    ASSERT_EQ(cells.size(), 14u) << md;
    EXPECT_EQ(cells[2], fmt::format("{:.2f}", row["time_s"].get<double>()));
    EXPECT_EQ(cells[3], fmt::format("{:.2f}", row["samples_per_second"].get<double>()));
    EXPECT_EQ(cells[4], fmt::format("{:.1f}", row["memory_mb"].get<double>()));
    EXPECT_EQ(cells[6], fmt::format("{:.1f}", row["at_peak_bytes"]["optimizer_states"].get<double>() / 1048576.0));
    EXPECT_EQ(cells[8], fmt::format("{:.1f}", row["at_peak_bytes"]["activations"].get<double>() / 1048576.0));
    EXPECT_EQ(cells[12], fmt::format("{:.2f}", row["relative_speed"].get<double>()));
    EXPECT_EQ(cells[13], fmt::format("{:.2f}", row["relative_memory"].get<double>()));
  }
  EXPECT_EQ(table_cells(md, "fp16").at(2), "n/a (GPU only)");

  // bench.svg: well-formed, a labelled point per row that ran, the row that did not named.
  const std::string svg = test::read_all_bytes(out + "/bench.svg");
  EXPECT_TRUE(well_formed_xml(svg)) << svg;
  EXPECT_EQ(test::count_of(svg, "<circle cx="), 3u + 1u) << svg;  // three rows and the legend's
  for (const char* name : {">vanilla<", ">accum<", ">adafactor<", "fp16 (n/a)"})
    EXPECT_NE(svg.find(name), std::string::npos) << name << "\n" << svg;
}

TEST(BenchCommand, ListRowsNamesEveryRow) {
  const auto r = test::run_anatomy("bench --list-rows");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* name : {"| vanilla |", "| accum |", "| accum-ckpt |", "| fp16 |", "| bf16 |", "| tf32 |",
                           "| adafactor |", "| adamw-8bit |", "| accum-ckpt-fp16 |", "| accum-ckpt-fp16-adafactor |",
                           "| accum-ckpt-fp16-adamw-8bit |", "adamw_bnb_8bit", "--gradient-checkpointing"})
    EXPECT_NE(r.output.find(name), std::string::npos) << name << "\n" << r.output;
}

// Bad flags: one clear error line, and nothing written.
TEST(BenchCommand, BadFlagsAreOneClearErrorAndWriteNothing) {
  test::TempDir tmp;
  const std::string out = tmp.file("sweep");
  auto bench = [&](const std::string& flags) {
    return test::run_anatomy("bench --output-dir " + out + " " + kSmall + " " + flags);
  };
  EXPECT_TRUE(failed_cleanly(bench("--rows vanilla,nope"), {"--rows", "nope", "vanilla", "accum-ckpt-fp16-adamw-8bit"}));
  EXPECT_TRUE(nothing_at(out));
  EXPECT_TRUE(failed_cleanly(bench("--rows vanilla,vanilla"), {"--rows", "vanilla", "twice"}));
  EXPECT_TRUE(nothing_at(out));
  EXPECT_TRUE(failed_cleanly(bench("--rows vanilla -- --bogus"), {"--bogus"}));
  EXPECT_TRUE(nothing_at(out));
  EXPECT_TRUE(failed_cleanly(bench("--rows vanilla -- --model bert-mini"), {"--model", "before --"}));
  EXPECT_TRUE(nothing_at(out));
  EXPECT_TRUE(failed_cleanly(bench("--rows vanilla --dummy-size 0"), {"--dummy-size"}));
  EXPECT_TRUE(nothing_at(out));
  EXPECT_TRUE(failed_cleanly(test::run_anatomy("bench --rows vanilla --device cpu"), {"--output-dir"}));
  EXPECT_TRUE(failed_cleanly(
      test::run_anatomy("bench --output-dir " + out + " --model no-such-model --device cpu --rows vanilla"),
      {"--model", "no-such-model"}));
  EXPECT_TRUE(nothing_at(out));
}

// A row whose train refuses its flags (the pass-through --optim clashes with
// the adafactor row's own) is reported with its name and exit code; the
// other row is measured, the files are written, and the sweep exits non-zero.
TEST(BenchCommand, FailingRowIsReportedAndTheSweepGoesOn) {
  test::TempDir tmp;
  const std::string out = tmp.file("sweep");
  const SplitResult r = run_split(tmp, "bench --output-dir " + out + " " + kSmall + " --rows adafactor,vanilla -- --optim sgd");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("adafactor: failed with exit code 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--optim"), std::string::npos) << r.err;  // the child's own error, forwarded
  EXPECT_NE(r.err.find("1 run failed: adafactor (exit 2)"), std::string::npos) << r.err;
  const json bench = read_json(out + "/bench.json");
  ASSERT_EQ(bench["rows"].size(), 2u);
  EXPECT_EQ(bench["rows"][0]["status"], "failed");
  EXPECT_EQ(bench["rows"][0]["exit_code"], 2);
  EXPECT_NE(bench["rows"][0]["reason"].get<std::string>().find("--optim"), std::string::npos);
  EXPECT_EQ(bench["rows"][1]["status"], "ok");
  EXPECT_GT(bench["rows"][1]["samples_per_second"].get<double>(), 0.0);
  const std::string md = test::read_all_bytes(out + "/bench.md");
  EXPECT_EQ(table_cells(md, "adafactor").at(2), "failed (exit 2)") << md;
  EXPECT_EQ(table_cells(md, "vanilla").at(12), "1.00") << md;
  EXPECT_TRUE(well_formed_xml(test::read_all_bytes(out + "/bench.svg")));
}

// Rows that run out of memory (bert-large's 1.3 GB of weights do not fit in
// the address space `ulimit -v` leaves; small thread stacks, one BLAS thread
// and one malloc arena keep the rest of the process far below it on any
// machine) are "OOM" in the table, and the sweep ends well: running out of
// memory is a result, not a failure.
TEST(BenchCommand, OutOfMemoryRowsAreRecordedAsOom) {
  test::TempDir tmp;
  const std::string out = tmp.file("sweep");
  const SplitResult r = run_split(
      tmp,
      "bench --output-dir " + out + " --model bert-large-uncased --dummy-size 2 --dummy-seq-len 8 --device cpu "
      "--rows vanilla,accum",
      "ulimit -v 1200000 && ulimit -s 2048 && OPENBLAS_NUM_THREADS=1 MALLOC_ARENA_MAX=1 ");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("vanilla: out of memory (exit 3)"), std::string::npos) << r.err;
  const json bench = read_json(out + "/bench.json");
  ASSERT_EQ(bench["rows"].size(), 2u);
  for (const json& row : bench["rows"]) {
    EXPECT_EQ(row["status"], "oom") << row.dump(1);
    EXPECT_EQ(row["exit_code"], 3);
    EXPECT_NE(row["reason"].get<std::string>().find("out of memory"), std::string::npos);
    EXPECT_TRUE(row["relative_speed"].is_null());
  }
  const std::string md = test::read_all_bytes(out + "/bench.md");
  EXPECT_EQ(table_cells(md, "vanilla").at(2), "OOM") << md;
  EXPECT_EQ(table_cells(md, "accum").at(2), "OOM") << md;
  EXPECT_NE(r.out.find("| vanilla |"), std::string::npos) << r.out;
  EXPECT_TRUE(well_formed_xml(test::read_all_bytes(out + "/bench.svg")));
}

// --warm-up-steps, with a stand-in for bench/hf_trainer.py that records every
// run's settings: each row's measured run, ours and Trainer's, comes after an
// unmeasured run of that many steps with the same settings, and neither the
// warm-ups' figures nor their files are left in the sweep.
TEST(BenchCommand, WarmUpRunsComeFirstAndAreNotMeasured) {
  test::TempDir tmp;
  const std::string calls = tmp.file("calls.jsonl"), script = tmp.file("fake_hf_trainer.py");
  std::ofstream(script) << "import json, sys\n"
                           "if sys.argv[1] == '--check':\n"
                           "    print(json.dumps({'status': 'ok', 'torch': 'stand-in', 'transformers': 'stand-in'}))\n"
                           "    sys.exit(0)\n"
                           "s = json.loads(sys.argv[1])\n"
                           "open('" << calls << "', 'a').write(json.dumps(s) + '\\n')\n"
                           "print(json.dumps({'status': 'ok', 'train_runtime': 2.0, 'train_samples_per_second': 4.0,\n"
                           "                  'global_step': s['args']['max_steps'], 'peak_rss_mb': 100}))\n";
  const std::string out = tmp.file("sweep");
  const SplitResult r = run_split(tmp, "bench --output-dir " + out + " " + kSmall +
                                           " --rows vanilla,accum --max-steps 2 --warm-up-steps 1 --with-hf "
                                           "--hf-script " + script);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;

  // Trainer: a 1-step run, then the measured 2-step run with otherwise the same settings, for each row.
  std::vector<json> seen;
  std::istringstream lines(test::read_all_bytes(calls));
  for (std::string line; std::getline(lines, line);) seen.push_back(json::parse(line));
  ASSERT_EQ(seen.size(), 4u) << test::read_all_bytes(calls);
  for (size_t k : {0u, 2u}) {
    EXPECT_EQ(seen[k]["args"]["max_steps"], 1) << seen[k].dump();
    EXPECT_EQ(seen[k + 1]["args"]["max_steps"], 2) << seen[k + 1].dump();
    json warm = seen[k], measured = seen[k + 1];
    for (json* j : {&warm, &measured}) {
      (*j)["args"].erase("max_steps");
      j->erase("output_dir");
    }
    EXPECT_EQ(warm, measured);
  }
  EXPECT_EQ(seen[2]["args"]["gradient_accumulation_steps"], 4) << "the accum row's own settings";

  // Ours: the warm-up before the row's measured run, whose figures are the table's.
  const size_t warm = r.err.find("[1/2] vanilla: warm-up, 1 step ...");
  ASSERT_NE(warm, std::string::npos) << r.err;
  EXPECT_LT(warm, r.err.find("samples/s")) << r.err;
  EXPECT_NE(r.err.find("[2/2] accum: warm-up, Hugging Face, 1 step ..."), std::string::npos) << r.err;
  const json bench = read_json(out + "/bench.json");
  EXPECT_EQ(bench["setup"]["warm_up_steps"], 1);
  for (const json& row : bench["rows"]) {
    EXPECT_EQ(row["status"], "ok") << row.dump(1);
    EXPECT_EQ(row["steps"], 2) << "the measured run's log, not the warm-up's";
    EXPECT_EQ(row["hf"]["samples_per_second"], 4.0);
  }
  EXPECT_NE(test::read_all_bytes(out + "/bench.md").find("after an unmeasured run of 1 step"), std::string::npos);
  for (const auto& entry : fs::directory_iterator(out + "/rows"))
    EXPECT_EQ(entry.path().filename().string().find("warm-up"), std::string::npos) << entry.path();
}

// --with-hf on the CPU, where Python has torch, transformers and accelerate
// (skipped elsewhere): Hugging Face's figures are bench/hf_trainer.py's own,
// the ratios divide ours by them, and 8-bit AdamW without bitsandbytes is n/a.
TEST(BenchCommand, WithHuggingFaceShowsBothSides) {
  const std::string find =
      "python3 -c \"import importlib.util as u, sys; "
      "sys.exit(0 if all(u.find_spec(m) for m in ('torch', 'transformers', 'accelerate')) else 1)\" 2>/dev/null";
  if (std::system(find.c_str()) != 0) GTEST_SKIP() << "python3 lacks torch, transformers or accelerate";
  test::TempDir tmp;
  const std::string out = tmp.file("sweep");
  const SplitResult r = run_split(tmp, "bench --output-dir " + out + " " + kSmall + " --rows vanilla,adamw-8bit --with-hf");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json bench = read_json(out + "/bench.json");
  EXPECT_TRUE(bench["setup"]["with_hf"].get<bool>());
  const json& vanilla = bench["rows"][0];
  ASSERT_EQ(vanilla["hf"]["status"], "ok") << vanilla.dump(1);
  // The figures are the last JSON line hf_trainer.py printed.
  std::istringstream hf_out(test::read_all_bytes(out + "/rows/vanilla/hf-stdout.txt"));
  json line;
  for (std::string l; std::getline(hf_out, l);)  // Trainer prints a Python dict too: not JSON
    if (json j = json::parse(l, nullptr, false); !j.is_discarded() && j.is_object()) line = j;
  EXPECT_EQ(vanilla["hf"]["samples_per_second"], line["train_samples_per_second"]);
  EXPECT_EQ(vanilla["hf"]["peak_rss_mb"], line["peak_rss_mb"]);
  EXPECT_NEAR(vanilla["hf"]["speed_ratio"].get<double>(),
              vanilla["samples_per_second"].get<double>() / line["train_samples_per_second"].get<double>(), 1e-12);
  EXPECT_NEAR(vanilla["hf"]["memory_ratio"].get<double>(),
              vanilla["cpu_peak_rss_mb"].get<double>() / line["peak_rss_mb"].get<double>(), 1e-12);
  const std::string eight_bit = bench["rows"][1]["hf"]["status"];
  EXPECT_TRUE(eight_bit == "ok" || eight_bit == "n/a") << eight_bit;
  const std::string md = test::read_all_bytes(out + "/bench.md");
  EXPECT_NE(md.find("## anatomy beside Hugging Face Trainer"), std::string::npos) << md;
  const std::vector<std::string> cells = table_cells(md.substr(md.find("## anatomy beside")), "vanilla");
  ASSERT_EQ(cells.size(), 7u) << md;
  EXPECT_EQ(cells[2], fmt::format("{:.2f}", line["train_samples_per_second"].get<double>()));
  EXPECT_EQ(cells[3], fmt::format("{:.2f}", vanilla["hf"]["speed_ratio"].get<double>()));
  const std::string svg = test::read_all_bytes(out + "/bench.svg");
  EXPECT_TRUE(well_formed_xml(svg));
  EXPECT_NE(svg.find(">vanilla (HF)<"), std::string::npos) << svg;
}

}  // namespace
}  // namespace anatomy
