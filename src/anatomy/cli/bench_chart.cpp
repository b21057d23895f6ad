// bench_chart.cpp: bench.svg, samples/s against memory with one labelled point
// per row of `anatomy bench` (and per Hugging Face row with --with-hf), written
// by hand: a self-contained SVG file, no script, no fonts to fetch.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "anatomy/cli/bench.h"

namespace anatomy::cli {

namespace {

constexpr double kWidth = 860, kHeight = 540;
constexpr double kLeft = 80, kRight = 190, kTop = 64, kBottom = 70;
constexpr const char* kOurs = "#1f77b4";
constexpr const char* kTheirs = "#e4572e";

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 allows no control characters but tab, newline and carriage return.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') out += ' ';
        else out += c;
    }
  }
  return out;
}

// A step of 1, 2 or 5 times a power of ten that cuts [0, top] into about `ticks` parts.
double nice_step(double top, int ticks) {
  if (top <= 0.0) return 1.0;
  const double raw = top / ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * power) return m * power;
  return 10.0 * power;
}

std::string tick_label(double value, double step) {
  const int decimals = step >= 1.0 ? 0 : static_cast<int>(std::ceil(-std::log10(step)));
  return fmt::format("{:.{}f}", value, decimals);
}

struct Point {
  double memory = 0.0, speed = 0.0;
  std::string label;
  bool theirs = false;
  double x = 0.0, y = 0.0, label_y = 0.0;
};

}  // namespace

std::string bench_chart_svg(const std::vector<RowResult>& rows, const BenchSetup& setup) {
  const bool cpu = setup.device == "cpu";
  // With Hugging Face's points beside ours, both sides use the same instrument:
  // NVML's peak on a GPU, the peak RSS on the CPU.
  const bool peaks = setup.with_hf;
  std::vector<Point> points;
  std::vector<std::pair<size_t, size_t>> pairs;  // ours and theirs of one row
  std::vector<std::string> missing;
  for (const RowResult& r : rows) {
    const double memory = peaks ? static_cast<double>(r.comparison_mb()) : r.memory_mb();
    size_t ours = SIZE_MAX;
    if (r.status == RowStatus::Ok && memory >= 0.0) {
      ours = points.size();
      points.push_back({memory, r.samples_per_second, r.row.name});
    } else {
      missing.push_back(fmt::format("{} ({})", r.row.name, r.status == RowStatus::Ok ? "no memory figure"
                                                                                      : status_name(r.status)));
    }
    if (r.hf_run && r.hf.status == RowStatus::Ok && r.hf.peak_mb >= 0) {
      points.push_back({static_cast<double>(r.hf.peak_mb), r.hf.samples_per_second, r.row.name + " (HF)", true});
      if (ours != SIZE_MAX) pairs.emplace_back(ours, points.size() - 1);
    }
  }

  double max_memory = 0.0, max_speed = 0.0;
  for (const Point& p : points) {
    max_memory = std::max(max_memory, p.memory);
    max_speed = std::max(max_speed, p.speed);
  }
  const double x_step = nice_step(max_memory * 1.05, 6), y_step = nice_step(max_speed * 1.05, 5);
  const double x_top = std::max(x_step, std::ceil(max_memory * 1.05 / x_step) * x_step);
  const double y_top = std::max(y_step, std::ceil(max_speed * 1.05 / y_step) * y_step);
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto to_x = [&](double v) { return kLeft + plot_w * v / x_top; };
  auto to_y = [&](double v) { return kTop + plot_h * (1.0 - v / y_top); };

  std::string out = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
      kWidth, kHeight);
  out += fmt::format("<text x=\"{}\" y=\"24\" font-size=\"16\" font-weight=\"bold\">anatomy bench: speed against "
                     "memory</text>\n",
                     kLeft);
  std::string subtitle = fmt::format("{}, {} sequences of {} tokens, {}", setup.model, setup.dummy_size,
                                     setup.dummy_seq_len, cpu ? "CPU" : setup.gpu_name.empty() ? "GPU" : setup.gpu_name);
  out += fmt::format("<text x=\"{}\" y=\"44\" fill=\"#555\">{}</text>\n", kLeft, escape(subtitle));

  // Grid, ticks and axes.
  for (double v = 0.0; v <= x_top + x_step / 2; v += x_step)
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e6e6e6\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\" fill=\"#333\">{4}</text>\n",
        to_x(v), kTop, kTop + plot_h, kTop + plot_h + 18, tick_label(v, x_step));
  for (double v = 0.0; v <= y_top + y_step / 2; v += y_step)
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#e6e6e6\"/>\n"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\" fill=\"#333\">{5}</text>\n",
        kLeft, to_y(v), kLeft + plot_w, kLeft - 8, to_y(v) + 4, tick_label(v, y_step));
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", kLeft, kTop,
                     plot_w, plot_h);
  const std::string x_title = peaks ? (cpu ? "peak RSS (MB)" : "peak GPU memory used (NVML, MB)")
                              : cpu ? "ledger peak (MB; a CPU run has no GPU memory)"
                                    : "GPU memory occupied (MB)";
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", kLeft + plot_w / 2,
                     kHeight - 28, escape(x_title));
  out += fmt::format("<text transform=\"translate(22 {:.1f}) rotate(-90)\" text-anchor=\"middle\">samples/s</text>\n",
                     kTop + plot_h / 2);

  // Labels to the right of their points, pushed down where they would overlap.
  for (Point& p : points) {
    p.x = to_x(p.memory);
    p.y = to_y(p.speed);
    p.label_y = p.y + 4;
  }
  std::vector<Point*> order;
  for (Point& p : points) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](const Point* a, const Point* b) { return a->label_y < b->label_y; });
  for (size_t i = 0; i < order.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      if (std::abs(order[k]->x - order[i]->x) < 150 && order[i]->label_y - order[k]->label_y < 13)
        order[i]->label_y = order[k]->label_y + 13;

  for (const auto& [a, b] : pairs)
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#bbb\" "
                       "stroke-dasharray=\"4 3\"/>\n",
                       points[a].x, points[a].y, points[b].x, points[b].y);
  for (const Point& p : points) {
    if (p.theirs)
      out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"9\" height=\"9\" fill=\"{}\"><title>{}</title></rect>\n",
                         p.x - 4.5, p.y - 4.5, kTheirs,
                         escape(fmt::format("{}: {:.2f} samples/s, {:.0f} MB", p.label, p.speed, p.memory)));
    else
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"5\" fill=\"{}\"><title>{}</title></circle>\n", p.x,
                         p.y, kOurs, escape(fmt::format("{}: {:.2f} samples/s, {:.1f} MB", p.label, p.speed, p.memory)));
    const double side = p.x > kLeft + 0.75 * plot_w ? -1.0 : 1.0;
    if (std::abs(p.label_y - (p.y + 4)) > 0.5)  // a leader from a label pushed away from its point
      out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#bbb\"/>\n",
                         p.x + 5 * side, p.y, p.x + 9 * side, p.label_y - 4);
    // Right of the point, or left of it in the plot's right quarter, where a long name would leave the plot.
    const bool left = p.x > kLeft + 0.75 * plot_w;
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"{}\"{}>{}</text>\n", left ? p.x - 10 : p.x + 10,
                       p.label_y, p.theirs ? kTheirs : "#222", left ? " text-anchor=\"end\"" : "", escape(p.label));
  }

  // Legend.
  const double legend_x = kLeft + plot_w + 16;
  out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"5\" fill=\"{}\"/>\n", legend_x + 5, kTop + 6, kOurs);
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">anatomy</text>\n", legend_x + 16, kTop + 10);
  if (setup.with_hf) {
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"9\" height=\"9\" fill=\"{}\"/>\n", legend_x + 0.5,
                       kTop + 21.5, kTheirs);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">Hugging Face Trainer</text>\n", legend_x + 16, kTop + 30);
  }
  if (points.empty())
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#555\">no row has figures "
                       "yet</text>\n",
                       kLeft + plot_w / 2, kTop + plot_h / 2);
  // The rows without a point, one a line under the legend.
  double y = kTop + (setup.with_hf ? 60 : 40);
  if (!missing.empty()) out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#555\">not plotted:</text>\n", legend_x, y);
  for (const std::string& m : missing) {
    y += 14;
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#555\" font-size=\"10\">{}</text>\n", legend_x, y,
                       escape(m));
  }
  out += "</svg>\n";
  return out;
}

}  // namespace anatomy::cli
