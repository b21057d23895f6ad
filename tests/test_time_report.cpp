// test_time_report.cpp: the time anatomy's section of report.html: a bar per
// class for FLOPs and for time, a forward and a backward bar per layer, and
// `anatomy profile --output-dir` putting it into the report.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "anatomy/analysis/time_report_html.h"
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

// The floor, the communication waited for and the ranks' table appear when the
// summary has them, and not otherwise.
TEST(TimeReport, FloorCommunicationAndRanksWhenThere) {
  ProfileSummary s;
  s.steps = 1;
  s.step_ms = 10.0;
  s.ops_ms = 10.0;
  const std::string bare = time_report_section_html(s);
  EXPECT_EQ(bare.find("ceilings"), std::string::npos);
  EXPECT_EQ(bare.find("exchanges between ranks"), std::string::npos);
  EXPECT_EQ(bare.find("rank-time"), std::string::npos);
  ProfileRow product;
  product.op_class = OpClass::Contraction;
  product.flops = 5e11;  // 5 ms at 100 TFLOP/s
  product.ms = 8.0;
  s.rows.push_back(product);
  s.ceilings = Ceilings{};
  s.ceilings->matmul_tflops = 100.0;
  s.ceilings->copy_gbps = 1000.0;
  s.classes[static_cast<size_t>(OpClass::Communication)] = ClassShare{2.0, 0.0, 0.0};
  s.ranks = {RankTime{0, 10.0, 3.0, 6.0, 1.0, 2.0}, RankTime{1, 10.5, 3.0, 6.5, 1.0, 2.5}};
  const std::string html = time_report_section_html(s);
  EXPECT_NE(html.find("would take 5.00 ms: the step is ×2.00 that"), std::string::npos) << html;
  EXPECT_NE(html.find("waited 2.00 ms (20.0%)"), std::string::npos) << html;
  EXPECT_EQ(count(html, "<tr><td>"), 2u + 1u) << "two ranks and the one top operation";
  EXPECT_NE(html.find("<tr><td>1</td><td>10.50</td>"), std::string::npos) << html;
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
