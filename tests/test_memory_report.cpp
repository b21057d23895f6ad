// test_memory_report.cpp: the memory anatomy's rows add up, and its three
// renderings (terminal table, anatomy.json, report.html) carry the figures;
// the HTML is also rendered by a headless Chromium to check that its charts
// survive a real browser's parser.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "anatomy/analysis/memory_anatomy.h"

namespace anatomy {
namespace {

constexpr int64_t MiB = 1024 * 1024;

size_t index_of(Category c) { return static_cast<size_t>(c); }

// A phase's sample: what the whole run holds (`held`) plus activations and
// temporaries; `slack` is what the pool keeps free beside it.
PhaseSample sample(std::string phase, int64_t step, CategoryBytes held, int64_t activations, int64_t temporary,
                   int64_t slack) {
  PhaseSample s;
  s.phase = std::move(phase);
  s.step = step;
  s.live = held;
  s.live[index_of(Category::Activations)] += activations;
  s.live[index_of(Category::Temporary)] += temporary;
  for (int64_t b : s.live) s.total += b;
  s.reserved = s.total + slack;
  return s;
}

CategoryBytes weights_only(int64_t bytes) {
  CategoryBytes held{};
  held[index_of(Category::Weights)] = bytes;
  return held;
}

// A small GPU run: weights, optimizer states, gradients, activations that
// grow through the forward pass, a pool with free segments, NVML and a plan.
MemoryAnatomy gpu_anatomy() {
  MemoryAnatomy m;
  m.device = "cuda:0";
  m.device_name = "NVIDIA H100 80GB HBM3";
  m.device_total = 80 * 1024 * MiB;
  LedgerSnapshot& l = m.ledger;
  l.at_peak[index_of(Category::Weights)] = 400 * MiB;
  l.at_peak[index_of(Category::OptimizerStates)] = 800 * MiB;
  l.at_peak[index_of(Category::Gradients)] = 400 * MiB;
  l.at_peak[index_of(Category::Activations)] = 900 * MiB;
  l.at_peak[index_of(Category::Temporary)] = 60 * MiB;
  l.at_peak[index_of(Category::Data)] = 1 * MiB;
  l.peak = l.at_peak;
  l.peak[index_of(Category::Temporary)] = 200 * MiB;  // its own peak came elsewhere
  for (int64_t b : l.at_peak) l.peak_total += b;
  l.live = l.at_peak;
  l.live[index_of(Category::Activations)] = 0;
  for (int64_t b : l.live) l.live_total += b;
  l.peak_phase = "backward layer 23";
  l.peak_step = 1;
  l.allocations = 1234;
  l.reserved_at_peak = l.peak_total + 100 * MiB;
  l.reserved_peak = l.peak_total + 150 * MiB;
  l.reserved = l.reserved_peak;
  m.context_bytes = 500 * MiB;
  m.nvml_used = m.context_bytes + l.reserved_peak + 20 * MiB;  // 20 MiB that nobody accounts for

  CategoryBytes held = l.at_peak;  // all but activations and temporaries: they come and go
  held[index_of(Category::Activations)] = held[index_of(Category::Temporary)] = 0;
  m.timeline.push_back(sample("setup", -1, weights_only(400 * MiB), 0, 0, 0));
  for (int64_t step = 0; step < 3; ++step) {
    for (int layer = 0; layer < 4; ++layer)
      m.timeline.push_back(sample("forward layer " + std::to_string(layer), step, held, 200 * MiB * (layer + 1),
                                  30 * MiB, 100 * MiB));
    m.timeline.push_back(sample("backward layer 23", step, held, 900 * MiB, step == 1 ? 60 * MiB : 50 * MiB,
                                step == 1 ? 100 * MiB : 120 * MiB));
    m.timeline.push_back(sample("optimizer", step, held, 0, 200 * MiB, 150 * MiB));
  }
  m.timeline_dropped = 7;

  MemoryPrediction p;
  p.at_peak = l.at_peak;
  p.at_peak[index_of(Category::Activations)] = 880 * MiB;
  for (int64_t b : p.at_peak) p.peak_total += b;
  p.peak_phase = l.peak_phase;
  p.reserved_peak = p.peak_total + 128 * MiB;
  p.context_bytes = 480 * MiB;
  p.nvml_total = p.reserved_peak + p.context_bytes;
  m.predicted = p;
  return m;
}

// A CPU run: the allocator reserves exactly what is live, NVML knows nothing.
MemoryAnatomy cpu_anatomy() {
  MemoryAnatomy m;
  m.device = "cpu";
  m.ledger.at_peak[index_of(Category::Weights)] = 10 * MiB;
  m.ledger.at_peak[index_of(Category::Activations)] = 5 * MiB;
  m.ledger.peak = m.ledger.at_peak;
  m.ledger.peak_total = 15 * MiB;
  m.ledger.reserved_peak = m.ledger.reserved_at_peak = 15 * MiB;
  m.ledger.peak_phase = "forward layer 0";
  m.ledger.peak_step = 0;
  m.timeline.push_back(sample("forward layer 0", 0, weights_only(10 * MiB), 5 * MiB, 0, 0));
  return m;
}

const MemoryRow& row(const std::vector<MemoryRow>& rows, const std::string& key) {
  for (const MemoryRow& r : rows)
    if (r.key == key) return r;
  throw std::runtime_error("no row " + key);
}

size_t count_in(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

TEST(MemoryReport, LedgerRowsAddUpToThePeakAndDeviceRowsToNvml) {
  const MemoryAnatomy m = gpu_anatomy();
  const std::vector<MemoryRow> rows = memory_rows(m);
  ASSERT_EQ(rows.size(), kCategoryCount + 3);
  int64_t ledger_sum = 0;
  for (size_t c = 0; c < kCategoryCount; ++c) {
    EXPECT_EQ(rows[c].key, category_name(static_cast<Category>(c)));
    EXPECT_EQ(rows[c].at_peak, m.ledger.at_peak[c]);
    EXPECT_EQ(rows[c].peak, m.ledger.peak[c]);
    EXPECT_EQ(rows[c].predicted, m.predicted->at_peak[c]);
    ledger_sum += rows[c].at_peak;
  }
  EXPECT_EQ(ledger_sum, m.ledger.peak_total);
  EXPECT_EQ(row(rows, "temporary").peak, 200 * MiB);
  EXPECT_EQ(row(rows, "context").at_peak, 500 * MiB);
  EXPECT_EQ(row(rows, "context").predicted, 480 * MiB);
  EXPECT_EQ(row(rows, "pool_free").at_peak, 150 * MiB);
  EXPECT_EQ(row(rows, "pool_free").predicted, 128 * MiB);
  EXPECT_EQ(row(rows, "unattributed").at_peak, 20 * MiB);
  EXPECT_EQ(row(rows, "unattributed").predicted, -1);
  // context + ledger + pool free + unattributed is NVML's figure.
  int64_t all = 0;
  for (const MemoryRow& r : rows) all += r.at_peak;
  EXPECT_EQ(all, m.nvml_used);
}

TEST(MemoryReport, DeviceRowsAreUnknownWithoutNvmlAndPoolFreeIsZeroOnTheCpu) {
  const std::vector<MemoryRow> rows = memory_rows(cpu_anatomy());
  EXPECT_EQ(row(rows, "context").at_peak, -1);
  EXPECT_EQ(row(rows, "unattributed").at_peak, -1);
  EXPECT_EQ(row(rows, "pool_free").at_peak, 0);
  for (const MemoryRow& r : rows) EXPECT_EQ(r.predicted, -1) << r.key;

  MemoryAnatomy no_context = gpu_anatomy();
  no_context.context_bytes = -1;  // NVML gave the process's use but not the baseline
  EXPECT_EQ(row(memory_rows(no_context), "unattributed").at_peak, -1);
}

TEST(MemoryReport, JsonParsesBackWithEveryFigure) {
  const MemoryAnatomy m = gpu_anatomy();
  const nlohmann::json j = nlohmann::json::parse(memory_anatomy_json(m));
  EXPECT_EQ(j["device"], "cuda:0");
  EXPECT_EQ(j["device_name"], m.device_name);
  EXPECT_EQ(j["device_total"].get<int64_t>(), m.device_total);
  EXPECT_EQ(j["rows"].size(), kCategoryCount + 3);
  EXPECT_EQ(j["rows"][4]["key"], "activations");
  EXPECT_EQ(j["rows"][4]["at_peak"].get<int64_t>(), 900 * MiB);
  EXPECT_EQ(j["rows"][4]["predicted"].get<int64_t>(), 880 * MiB);
  EXPECT_EQ(j["rows"].back()["key"], "unattributed");
  EXPECT_EQ(j["rows"].back()["at_peak"].get<int64_t>(), 20 * MiB);
  const nlohmann::json& l = j["ledger"];
  EXPECT_EQ(l["peak_total"].get<int64_t>(), m.ledger.peak_total);
  EXPECT_EQ(l["at_peak"]["optimizer_states"].get<int64_t>(), 800 * MiB);
  EXPECT_EQ(l["peak"]["temporary"].get<int64_t>(), 200 * MiB);
  EXPECT_EQ(l["live"]["activations"].get<int64_t>(), 0);
  EXPECT_EQ(l["peak_phase"], "backward layer 23");
  EXPECT_EQ(l["peak_step"].get<int64_t>(), 1);
  EXPECT_EQ(l["reserved_at_peak"].get<int64_t>(), m.ledger.reserved_at_peak);
  EXPECT_EQ(l["allocations"].get<int64_t>(), 1234);
  ASSERT_EQ(j["timeline"].size(), m.timeline.size());
  EXPECT_EQ(j["timeline"][3]["phase"], "forward layer 2");
  EXPECT_EQ(j["timeline"][3]["live"]["activations"].get<int64_t>(), 600 * MiB);
  EXPECT_EQ(j["timeline"][3]["reserved"].get<int64_t>(), m.timeline[3].reserved);
  EXPECT_EQ(j["timeline_dropped"].get<int64_t>(), 7);
  EXPECT_EQ(j["context_bytes"].get<int64_t>(), 500 * MiB);
  EXPECT_EQ(j["nvml_used"].get<int64_t>(), m.nvml_used);
  EXPECT_EQ(j["predicted"]["nvml_total"].get<int64_t>(), m.predicted->nvml_total);
  EXPECT_EQ(j["predicted"]["at_peak"]["activations"].get<int64_t>(), 880 * MiB);

  EXPECT_TRUE(nlohmann::json::parse(memory_anatomy_json(cpu_anatomy()))["predicted"].is_null());
}

TEST(MemoryReport, TableNamesEveryRowThePeakAndThePredictionError) {
  const std::string table = format_memory_table(gpu_anatomy());
  for (const char* label : {"Weights (float32)", "Optimizer states", "Gradients", "Activations saved for backward",
                            "Temporary buffers", "Functionality-specific", "CUDA context and kernels",
                            "Free inside the pool", "Unattributed (NVML − all the rest)"})
    EXPECT_NE(table.find(label), std::string::npos) << label << "\n" << table;
  EXPECT_NE(table.find("\"backward layer 23\" of step 2"), std::string::npos) << table;
  EXPECT_NE(table.find("predicted"), std::string::npos);
  // Predicted 2541 MiB against 2561 MiB measured.
  EXPECT_NE(table.find("error -0.8%"), std::string::npos) << table;
  EXPECT_NE(table.find("NVML: this process uses"), std::string::npos);
  // Empty rows beyond the seed's six are left out; the seed's six never are.
  EXPECT_EQ(table.find("Communication buffers"), std::string::npos);
  EXPECT_NE(table.find("Functionality-specific"), std::string::npos);
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    size_t width = 0;
    for (char ch : line) width += (ch & 0xC0) != 0x80;
    EXPECT_LE(width, 100u) << line;
  }

  const std::string cpu = format_memory_table(cpu_anatomy());
  EXPECT_EQ(cpu.find("CUDA context"), std::string::npos) << cpu;
  EXPECT_EQ(cpu.find("predicted"), std::string::npos) << cpu;
  EXPECT_EQ(cpu.find("Pool segments"), std::string::npos) << cpu;
}

TEST(MemoryReport, HtmlIsSelfContainedWithTheThreeCharts) {
  const std::string html = memory_report_html(gpu_anatomy());
  for (const char* id : {"id=\"timeline-chart\"", "id=\"peak-composition-chart\"", "id=\"prediction-chart\""})
    EXPECT_NE(html.find(id), std::string::npos) << id;
  EXPECT_NE(html.find("class=\"series-activations\""), std::string::npos);
  EXPECT_NE(html.find("class=\"peak-marker\""), std::string::npos);
  // Nothing is fetched: no remote URL at all, no script.
  EXPECT_EQ(html.find("http"), std::string::npos);
  EXPECT_FALSE(std::regex_search(html, std::regex(R"((src|href)\s*=)", std::regex::icase)));
  EXPECT_EQ(html.find("<script"), std::string::npos);

  const std::string cpu = memory_report_html(cpu_anatomy());
  EXPECT_EQ(cpu.find("prediction-chart"), std::string::npos);
  EXPECT_NE(cpu.find("No prediction was made"), std::string::npos);
}

TEST(MemoryReport, HtmlEscapesPhaseNames) {
  MemoryAnatomy m = cpu_anatomy();
  m.ledger.peak_phase = "<script>alert(\"x\")</script> & co";
  m.timeline[0].phase = m.ledger.peak_phase;
  const std::string html = memory_report_html(m);
  EXPECT_EQ(html.find("<script>"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co"), std::string::npos);
}

TEST(MemoryReport, LongTimelinesAreDownsampledKeepingThePeak) {
  MemoryAnatomy m = cpu_anatomy();
  m.timeline.clear();
  for (int i = 0; i < 20000; ++i)
    m.timeline.push_back(
        sample("forward layer " + std::to_string(i % 24), i / 100, weights_only(10 * MiB), (i % 97) * MiB, 0, 0));
  m.timeline[12345].live[index_of(Category::Activations)] = 500 * MiB;  // one sharp peak
  m.timeline[12345].total = 510 * MiB;
  m.ledger.peak_total = 510 * MiB;
  m.ledger.peak_phase = m.timeline[12345].phase;
  m.ledger.peak_step = m.timeline[12345].step;
  const std::string html = memory_report_html(m);
  EXPECT_LT(html.size(), 600u * 1024);
  const size_t hover = count_in(html, "class=\"hover\"");
  EXPECT_LE(hover, 1500u);
  EXPECT_GE(hover, 500u);
  EXPECT_NE(html.find("peak 510.0 MiB"), std::string::npos);
  // The peak column reaches the top of the axis (500 MiB ticks up to 600 MiB):
  // some hover title names it.
  EXPECT_NE(html.find(": 510.0 MiB</title>"), std::string::npos);
}

// ---- a real browser --------------------------------------------------------

std::string find_chromium() {
  if (const char* explicit_path = std::getenv("ANATOMY_CHROMIUM")) return explicit_path;
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"})
    if (std::system(("command -v " + std::string(name) + " >/dev/null 2>&1").c_str()) == 0) return name;
  return "";
}

std::string run_and_read(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  char buffer[65536];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  pclose(pipe);
  return out;
}

// The part of the DOM inside <svg id="...">...</svg>.
std::string svg_element(const std::string& dom, const std::string& id) {
  const size_t start = dom.find("<svg id=\"" + id + "\"");
  if (start == std::string::npos) return "";
  const size_t end = dom.find("</svg>", start);
  return dom.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

TEST(HtmlReport, ChromiumParsesTheChartsIntoElements) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    const char* required = std::getenv("ANATOMY_REQUIRE_CHROMIUM");
    if (required && std::string(required) == "1") FAIL() << "chromium is not installed (ANATOMY_REQUIRE_CHROMIUM=1)";
    GTEST_SKIP() << "chromium is not installed; apt-get install chromium to run this test";
  }
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("anatomy_html_report_" + std::to_string(getpid()));
  fs::create_directories(dir);
  MemoryAnatomy m = gpu_anatomy();
  m.timeline[2].phase = "<script>document.title='x'</script>";
  {
    std::ofstream(dir / "report.html") << memory_report_html(m);
  }
  // Debian runs tests as root in CI, where Chromium's sandbox cannot start;
  // a profile per run keeps parallel tests apart.
  const std::string command = "timeout 120 " + chromium +
                              " --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir=" +
                              (dir / "profile").string() + " --dump-dom file://" + (dir / "report.html").string() +
                              " 2>" + (dir / "stderr.txt").string();
  const std::string dom = run_and_read(command);
  std::string errors;
  std::getline(std::ifstream(dir / "stderr.txt"), errors, '\0');
  fs::remove_all(dir);
  ASSERT_NE(dom.find("</html>"), std::string::npos) << "no DOM from: " << command << "\n" << errors;

  const std::string timeline = svg_element(dom, "timeline-chart");
  const std::string composition = svg_element(dom, "peak-composition-chart");
  const std::string prediction = svg_element(dom, "prediction-chart");
  ASSERT_FALSE(timeline.empty()) << dom.substr(0, 2000);
  ASSERT_FALSE(composition.empty());
  ASSERT_FALSE(prediction.empty());
  for (const char* key : {"weights", "activations", "temporary"})
    EXPECT_EQ(count_in(timeline, "<path class=\"series-" + std::string(key) + "\""), 1u) << key;
  EXPECT_EQ(count_in(timeline, "class=\"series-reserved\""), 1u);
  EXPECT_EQ(count_in(timeline, "class=\"hover\""), m.timeline.size());
  for (const char* key : {"weights", "optimizer_states", "gradients", "activations", "context", "pool_free"})
    EXPECT_EQ(count_in(composition, "<rect class=\"series-" + std::string(key) + "\""), 1u) << key;
  EXPECT_GE(count_in(prediction, "measured\""), 6u);
  // The escaped phase name stayed text: the browser made no script of it.
  EXPECT_EQ(dom.find("<script"), std::string::npos);
  EXPECT_NE(dom.find("&lt;script&gt;"), std::string::npos);
}

}  // namespace
}  // namespace anatomy
