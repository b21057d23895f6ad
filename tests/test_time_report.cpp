// test_time_report.cpp: the time anatomy's section of report.html: a bar per
// class for FLOPs and for time, a forward and a backward bar per layer, and
// `anatomy profile --output-dir` putting it into the report.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "anatomy/anatomy/time_report_html.h"
#include "test_util.h"

namespace anatomy {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(TimeReport, BarsPerClassAndPerLayer) {
  ProfileSummary s;
  s.steps = 2;
  s.step_ms = 10.0;
  s.ops_ms = 9.5;
  s.classes[static_cast<size_t>(OpClass::Contraction)] = ClassShare{6.0, 1e12, 1e9};
  s.classes[static_cast<size_t>(OpClass::Elementwise)] = ClassShare{3.5, 1e9, 5e9};
  s.phases = {{"forward layer 0", 1.0}, {"forward layer 1", 1.5}, {"backward layer 1", 3.0},
              {"backward layer 0", 2.0}, {"optimizer step", 1.0}};
  ProfileRow row;
  row.op = "linear<forward>";
  row.ms = 2.0;
  s.rows.push_back(row);
  const std::string html = time_report_section_html(s);
  EXPECT_NE(html.find("id=\"class-share-chart\""), std::string::npos);
  EXPECT_NE(html.find("id=\"layer-time-chart\""), std::string::npos);
  EXPECT_EQ(count(html, "class=\"class-"), 2u * kOpClassCount) << "a FLOPs bar and a time bar per class";
  EXPECT_EQ(count(html, "class=\"layer-forward\""), 2u);
  EXPECT_EQ(count(html, "class=\"layer-backward\""), 2u);
  EXPECT_NE(html.find("layer 1 backward 3.000 ms"), std::string::npos);
  EXPECT_NE(html.find("63.2% time"), std::string::npos) << "6.0 of 9.5 ms";
  EXPECT_NE(html.find("linear&lt;forward&gt;"), std::string::npos) << "operation names are escaped";
}

TEST(TimeReport, AProfiledRunPutsItIntoReportHtml) {
  test::TempDir dir;
  const auto r = test::run_anatomy("profile --device cpu --model bert-tiny --dummy-size 8 --dummy-seq-len 16 "
                                   "--profile-steps 2 --profile-warmup 1 --no-progress --output-dir " +
                                   dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir.file("report.html"));
  std::stringstream html;
  html << in.rdbuf();
  EXPECT_NE(html.str().find("id=\"timeline-chart\""), std::string::npos) << "the memory sections";
  EXPECT_NE(html.str().find("id=\"class-share-chart\""), std::string::npos) << "and the time section";
  EXPECT_EQ(count(html.str(), "class=\"layer-forward\""), 2u) << "bert-tiny has two layers";
}

}  // namespace
}  // namespace anatomy
