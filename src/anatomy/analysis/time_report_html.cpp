// time_report_html.cpp: the time section of report.html, drawn as inline SVG.
#include "anatomy/analysis/time_report_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace anatomy {

namespace {

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

constexpr const char* kClassColours[kOpClassCount] = {"#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756",
                                                      "#9d755d"};

// Two bars per class: its share of the step's FLOPs and of its time.
std::string class_share_chart(const ProfileSummary& s) {
  double flops = 0.0, ms = 0.0;
  for (const ClassShare& c : s.classes) {
    flops += c.flops;
    ms += c.ms;
  }
  constexpr int kLabel = 170, kBar = 420, kRow = 44;
  const int height = kRow * kOpClassCount + 30;
  std::string svg = fmt::format(
      "<svg id=\"class-share-chart\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\">\n",
      kLabel + kBar + 120, height, kLabel + kBar + 120, height);
  for (int k = 0; k < kOpClassCount; ++k) {
    const ClassShare& c = s.classes[k];
    const double f = flops > 0 ? c.flops / flops : 0.0, t = ms > 0 ? c.ms / ms : 0.0;
    const int y = 10 + k * kRow;
    const std::string name = op_class_name(static_cast<OpClass>(k));
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"label\">{}</text>\n", kLabel - 8, y + 22,
                       escape(name));
    svg += fmt::format(
        "<rect class=\"class-{} flops\" x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"14\" fill=\"{}\" "
        "fill-opacity=\"0.45\"><title>{}: {:.1f}% of FLOPs</title></rect>\n",
        name, kLabel, y + 4, kBar * f, kClassColours[k], escape(name), 100 * f);
    svg += fmt::format(
        "<rect class=\"class-{} time\" x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"14\" fill=\"{}\">"
        "<title>{}: {:.1f}% of time</title></rect>\n",
        name, kLabel, y + 20, kBar * t, kClassColours[k], escape(name), 100 * t);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"value\">{:.1f}% FLOPs</text>\n", kLabel + kBar * f + 6,
                       y + 15, 100 * f);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"value\">{:.1f}% time ({:.2f} ms)</text>\n",
                       kLabel + kBar * t + 6, y + 31, 100 * t, c.ms);
  }
  svg += "</svg>\n";
  return svg;
}

// Forward and backward milliseconds of each encoder layer, from the phases.
std::string layer_time_chart(const ProfileSummary& s) {
  std::map<int, std::pair<double, double>> layers;  // layer -> (forward, backward) ms
  for (const auto& [phase, ms] : s.phases) {
    const int layer = layer_of(phase);
    if (layer < 0) continue;
    const StepPart part = step_part_of(phase);
    if (part == StepPart::Forward) layers[layer].first += ms;
    else if (part == StepPart::Backward) layers[layer].second += ms;
  }
  if (layers.empty()) return "<p class=\"summary\">No per-layer phases were profiled.</p>\n";
  double top = 0.0;
  for (const auto& [l, fb] : layers) top = std::max(top, fb.first + fb.second);
  constexpr int kLeft = 60, kPlot = 200, kBarWidth = 14, kGap = 6;
  const int width = std::max(420, kLeft + static_cast<int>(layers.size()) * (kBarWidth + kGap) + 40);
  std::string svg = fmt::format(
      "<svg id=\"layer-time-chart\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\">\n", width,
      kPlot + 60, width, kPlot + 60);
  svg += fmt::format("<text x=\"{}\" y=\"14\" class=\"label\">{:.2f} ms</text>\n", 4, top);
  svg += fmt::format("<line class=\"axis\" x1=\"{}\" y1=\"20\" x2=\"{}\" y2=\"{}\" stroke=\"#555\"/>\n", kLeft - 4,
                     kLeft - 4, 20 + kPlot);
  int i = 0;
  for (const auto& [layer, fb] : layers) {
    const double x = kLeft + i * (kBarWidth + kGap);
    const double hf = top > 0 ? kPlot * fb.first / top : 0, hb = top > 0 ? kPlot * fb.second / top : 0;
    const double base = 20 + kPlot;
    svg += fmt::format(
        "<rect class=\"layer-forward\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{}\" height=\"{:.1f}\" fill=\"#4c78a8\">"
        "<title>layer {} forward {:.3f} ms</title></rect>\n",
        x, base - hf, kBarWidth, hf, layer, fb.first);
    svg += fmt::format(
        "<rect class=\"layer-backward\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{}\" height=\"{:.1f}\" fill=\"#f58518\">"
        "<title>layer {} backward {:.3f} ms</title></rect>\n",
        x, base - hf - hb, kBarWidth, hb, layer, fb.second);
    if (layers.size() <= 32 || layer % 4 == 0)
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"value\" text-anchor=\"middle\">{}</text>\n",
                         x + kBarWidth / 2.0, base + 14, layer);
    ++i;
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"label\">encoder layer (blue: forward, orange: backward)</text>\n",
                     kLeft, kPlot + 52);
  svg += "</svg>\n";
  return svg;
}

}  // namespace

std::string time_report_section_html(const ProfileSummary& s) {
  std::string html = "<h2>Time anatomy of a step</h2>\n<p class=\"summary\">";
  html += fmt::format("Mean of {} profiled steps: <b>{:.2f} ms</b> a step, the operations {:.2f} ms; forward "
                      "{:.2f} ms, backward {:.2f} ms (×{:.2f}), optimizer {:.2f} ms, data {:.2f} ms.",
                      s.steps, s.step_ms, s.ops_ms, s.forward_ms, s.backward_ms,
                      s.forward_ms > 0 ? s.backward_ms / s.forward_ms : 0.0, s.optimizer_ms, s.data_ms);
  if (const auto mfu = s.mfu()) html += fmt::format(" MFU {:.1f}%.", 100 * *mfu);
  if (const double floor = s.floor_ms(); floor > 0.0)
    html += fmt::format(" At the measured ceilings the operations would take {:.2f} ms: the step is ×{:.2f} that.",
                        floor, s.step_ms / floor);
  if (const double comm = s.communication_ms(); comm > 0.0)
    html += fmt::format(" The step waited {:.2f} ms ({:.1f}%) for exchanges between ranks that it could not overlap.",
                        comm, 100.0 * comm / std::max(s.step_ms, 1e-9));
  html += "</p>\n";
  if (!s.ranks.empty()) {
    html += "<h3>Time per rank</h3>\n<table id=\"rank-time\">\n<tr><th>rank</th><th>step ms</th><th>forward</th>"
            "<th>backward</th><th>optimizer</th><th>communication waited</th></tr>\n";
    for (const RankTime& r : s.ranks)
      html += fmt::format("<tr><td>{}</td><td>{:.2f}</td><td>{:.2f}</td><td>{:.2f}</td><td>{:.2f}</td>"
                          "<td>{:.2f}</td></tr>\n",
                          r.rank, r.step_ms, r.forward_ms, r.backward_ms, r.optimizer_ms, r.communication_ms);
    html += "</table>\n";
  }
  html += "<h3>Share of FLOPs against share of time, by class of operation</h3>\n" + class_share_chart(s);
  html += "<h3>Per layer</h3>\n" + layer_time_chart(s);
  html += "<h3>Top operations</h3>\n<table>\n<tr><th>part</th><th>operation</th><th>operand</th><th>class</th>"
          "<th>ms</th><th>TFLOP/s</th><th>GB/s</th></tr>\n";
  for (size_t i = 0; i < std::min<size_t>(10, s.rows.size()); ++i) {
    const ProfileRow& r = s.rows[i];
    html += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.1f}</td>"
                        "<td>{:.0f}</td></tr>\n",
                        step_part_name(r.part), escape(r.op), escape(r.operand), op_class_name(r.op_class), r.ms,
                        r.tflops(), r.gbps());
  }
  html += "</table>\n";
  return html;
}

}  // namespace anatomy
