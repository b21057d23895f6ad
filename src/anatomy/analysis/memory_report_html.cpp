// memory_report_html.cpp: report.html, one self-contained page (inline CSS
// and SVG drawn here; no script, no network) with the memory timeline by
// category, the composition at the peak, and predicted vs measured.
// Every drawn series carries the class series-<key> so tests can find it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "anatomy/analysis/memory_anatomy.h"

namespace anatomy {

namespace {

// A colour per row key; the device-level rows are greys, so the ledger's
// categories stand out.
const std::map<std::string, const char*>& series_colours() {
  static const std::map<std::string, const char*> colours = {
      {"weights", "#4e79a7"},      {"weights_half", "#a0cbe8"},   {"optimizer_states", "#f28e2b"},
      {"gradients", "#e15759"},    {"activations", "#59a14f"},    {"temporary", "#edc948"},
      {"functionality", "#b07aa1"}, {"data", "#ff9da7"},          {"workspace", "#9c755f"},
      {"communication", "#76b7b2"}, {"context", "#6b6b6b"},       {"pool_free", "#cfcfcf"},
      {"unattributed", "#2f2f2f"},  {"reserved", "#333333"}};
  return colours;
}

const char* colour_of(const std::string& key) {
  const auto it = series_colours().find(key);
  return it == series_colours().end() ? "#999999" : it->second;
}

std::string escape_html(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string step_name(int64_t step) { return step >= 0 ? fmt::format("step {}", step + 1) : "setup"; }

std::string percent(int64_t part, int64_t whole) {
  return whole > 0 ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / whole) : "";
}

// The y axis in one binary unit with ticks at 1, 2 or 5 times a power of ten of it.
struct ByteAxis {
  double unit = 1;
  const char* unit_name = "B";
  double step = 1;  // in units
  int64_t top = 1;  // bytes at the top of the plot

  explicit ByteAxis(int64_t max_bytes) {
    const double max = std::max<double>(1.0, static_cast<double>(max_bytes));
    const std::pair<double, const char*> units[] = {
        {1024.0 * 1024 * 1024, "GiB"}, {1024.0 * 1024, "MiB"}, {1024.0, "KiB"}, {1.0, "B"}};
    for (const auto& [size, name] : units)
      if (max >= size) {
        unit = size;
        unit_name = name;
        break;
      }
    const double raw = max / unit / 5;
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
      if (m * magnitude >= raw) {
        step = m * magnitude;
        break;
      }
    if (unit_name == std::string("B")) step = std::max(step, 1.0);
    top = static_cast<int64_t>(std::ceil(max / unit / step) * step * unit);
  }
  std::string label(double units) const { return fmt::format("{:g} {}", units, unit_name); }
};

constexpr int kChartWidth = 1100;

// ---- (a) the timeline -------------------------------------------------------

// One x position of the chart: the sample with the largest total among the
// phases it covers (so a peak is never averaged away), and the most reserved.
struct Column {
  size_t first = 0, last = 0;  // sample range [first, last)
  size_t highest = 0;          // the sample drawn
  int64_t reserved = 0;
};

std::vector<Column> downsample(const std::vector<PhaseSample>& samples, size_t max_columns) {
  const size_t n = samples.size();
  const size_t count = std::min(n, max_columns);
  std::vector<Column> columns(count);
  for (size_t i = 0; i < count; ++i) {
    Column& c = columns[i];
    c.first = i * n / count;
    c.last = (i + 1) * n / count;
    c.highest = c.first;
    for (size_t s = c.first; s < c.last; ++s) {
      if (samples[s].total > samples[c.highest].total) c.highest = s;
      c.reserved = std::max(c.reserved, samples[s].reserved);
    }
  }
  return columns;
}

// The sample in which the ledger peaked: the one the ledger names, else the highest.
size_t peak_sample(const MemoryAnatomy& m) {
  size_t best = 0;
  for (size_t i = 0; i < m.timeline.size(); ++i) {
    const PhaseSample& s = m.timeline[i];
    if (s.total == m.ledger.peak_total && s.phase == m.ledger.peak_phase && s.step == m.ledger.peak_step) return i;
    if (s.total > m.timeline[best].total) best = i;
  }
  return best;
}

std::string timeline_chart(const MemoryAnatomy& m) {
  constexpr int kLeft = 72, kTop = 28, kPlotWidth = 1000, kPlotHeight = 300, kHeight = 390;
  constexpr size_t kMaxColumns = 1000;  // about one per pixel: more would only grow the file
  std::string svg = fmt::format(
      "<svg id=\"timeline-chart\" viewBox=\"0 0 {} {}\" role=\"img\" "
      "aria-label=\"memory by category over the phases of the run\">\n",
      kChartWidth, kHeight);
  const std::vector<PhaseSample>& samples = m.timeline;
  if (samples.empty()) {
    svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"note\">No timeline was recorded.</text>\n</svg>\n", kLeft,
                       kTop + 20);
    return svg;
  }
  const std::vector<Column> columns = downsample(samples, kMaxColumns);
  const bool pooled = std::any_of(samples.begin(), samples.end(), [](const PhaseSample& s) {
    return s.reserved > s.total;
  });
  int64_t highest = 0;
  for (const PhaseSample& s : samples) highest = std::max({highest, s.total, pooled ? s.reserved : 0});
  const ByteAxis axis(highest);

  const double column_width = static_cast<double>(kPlotWidth) / columns.size();
  auto x_at = [&](size_t i) { return kLeft + column_width * i; };
  auto y_at = [&](int64_t bytes) {
    return kTop + kPlotHeight - kPlotHeight * static_cast<double>(bytes) / static_cast<double>(axis.top);
  };

  // Grid and y labels.
  for (double v = 0; v * axis.unit <= axis.top * 1.0000001; v += axis.step) {
    const double y = y_at(static_cast<int64_t>(v * axis.unit));
    svg += fmt::format("<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/>"
                       "<text class=\"tick\" x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
                       kLeft, kLeft + kPlotWidth, y, y, kLeft - 6, y + 4, axis.label(v));
  }

  // One stacked area per category, drawn as steps: a phase is a plateau.
  std::vector<int64_t> below(columns.size(), 0);
  for (size_t c = 0; c < kCategoryCount; ++c) {
    std::vector<int64_t> top(columns.size());
    bool any = false;
    for (size_t i = 0; i < columns.size(); ++i) {
      const int64_t bytes = samples[columns[i].highest].live[c];
      any = any || bytes > 0;
      top[i] = below[i] + bytes;
    }
    if (!any) continue;
    const std::string key(category_name(static_cast<Category>(c)));
    std::string d = fmt::format("M{:.1f},{:.1f}", x_at(0), y_at(top[0]));
    for (size_t i = 0; i < columns.size(); ++i) {
      if (i > 0 && top[i] != top[i - 1]) d += fmt::format("V{:.1f}", y_at(top[i]));
      d += fmt::format("H{:.1f}", x_at(i + 1));
    }
    for (size_t i = columns.size(); i-- > 0;) {
      if (i + 1 == columns.size() || below[i] != below[i + 1]) d += fmt::format("V{:.1f}", y_at(below[i]));
      d += fmt::format("H{:.1f}", x_at(i));
    }
    svg += fmt::format("<path class=\"series-{}\" fill=\"{}\" d=\"{}Z\"><title>{}</title></path>\n", key,
                       colour_of(key), d, escape_html(key));
    below = std::move(top);
  }

  if (pooled) {
    std::string d = fmt::format("M{:.1f},{:.1f}", x_at(0), y_at(columns[0].reserved));
    for (size_t i = 0; i < columns.size(); ++i) {
      if (i > 0) d += fmt::format("V{:.1f}", y_at(columns[i].reserved));
      d += fmt::format("H{:.1f}", x_at(i + 1));
    }
    svg += fmt::format("<path class=\"series-reserved\" fill=\"none\" stroke=\"{}\" stroke-dasharray=\"5 3\" "
                       "d=\"{}\"><title>pool segments (reserved)</title></path>\n",
                       colour_of("reserved"), d);
  }

  // Where each step begins; at most about twelve are marked, so the marks
  // neither overlap nor hide the areas.
  std::vector<size_t> step_starts;
  for (size_t i = 0; i < columns.size(); ++i)
    if (i == 0 || samples[columns[i].first].step != samples[columns[i - 1].last - 1].step) step_starts.push_back(i);
  const size_t label_every = std::max<size_t>(1, (step_starts.size() + 11) / 12);
  for (size_t k = 0; k < step_starts.size(); k += label_every) {
    const size_t i = step_starts[k];
    const double x = x_at(i);
    if (i > 0)
      svg += fmt::format("<line class=\"step-line\" x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{}\" y2=\"{}\"/>\n", x, x, kTop,
                         kTop + kPlotHeight);
    svg += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{}\">{}</text>\n", x + 3, kTop + kPlotHeight + 16,
                       escape_html(step_name(samples[columns[i].first].step)));
  }

  // Hovering a column names its phase (the browser's own tooltip; no script).
  for (size_t i = 0; i < columns.size(); ++i) {
    const PhaseSample& s = samples[columns[i].highest];
    svg += fmt::format("<rect class=\"hover\" x=\"{:.1f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\"><title>{}, {}: "
                       "{}</title></rect>\n",
                       x_at(i), kTop, column_width, kPlotHeight, escape_html(step_name(s.step)),
                       escape_html(s.phase), escape_html(format_bytes(s.total)));
  }

  // The peak.
  const size_t peak = peak_sample(m);
  const auto in_column = std::find_if(columns.begin(), columns.end(),
                                      [&](const Column& c) { return peak >= c.first && peak < c.last; });
  const double peak_x = x_at(static_cast<size_t>(in_column - columns.begin())) + column_width / 2;
  const double peak_y = y_at(samples[peak].total);
  const bool text_left = peak_x > kLeft + kPlotWidth / 2;
  svg += fmt::format(
      "<g class=\"peak-marker\"><line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2}\"/>"
      "<circle cx=\"{0:.1f}\" cy=\"{1:.1f}\" r=\"4\"/>"
      "<text x=\"{3:.1f}\" y=\"{4}\" text-anchor=\"{5}\">peak {6}: {7}, {8}</text></g>\n",
      peak_x, peak_y, kTop + kPlotHeight, peak_x + (text_left ? -6 : 6), kTop - 10, text_left ? "end" : "start",
      escape_html(format_bytes(samples[peak].total)), escape_html(step_name(samples[peak].step)),
      escape_html(samples[peak].phase));

  svg += fmt::format("<line class=\"axis\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"/>"
                     "<line class=\"axis\" x1=\"{0}\" x2=\"{3}\" y1=\"{2}\" y2=\"{2}\"/>\n",
                     kLeft, kTop, kTop + kPlotHeight, kLeft + kPlotWidth);
  svg += fmt::format("<text class=\"axis-title\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">the run's phases in order "
                     "({} sample{}{})</text>\n",
                     kLeft + kPlotWidth / 2, kHeight - 12, samples.size(), samples.size() == 1 ? "" : "s",
                     columns.size() < samples.size()
                         ? fmt::format(", drawn as {} columns, each the highest of its phases", columns.size())
                         : "");
  svg += "</svg>\n";
  return svg;
}

// The categories that appear in the timeline (the chart draws no others).
std::string legend(const MemoryAnatomy& m, const std::vector<MemoryRow>& rows, bool pooled) {
  std::string out = "<div class=\"legend\">";
  for (size_t c = 0; c < kCategoryCount; ++c)
    if (std::any_of(m.timeline.begin(), m.timeline.end(), [&](const PhaseSample& s) { return s.live[c] > 0; }))
      out += fmt::format("<span><i style=\"background:{}\"></i>{}</span>", colour_of(rows[c].key),
                         escape_html(rows[c].label));
  if (pooled) out += "<span><i class=\"dashed\"></i>Pool segments (reserved)</span>";
  return out + "</div>\n";
}

// ---- (b) the composition at the peak ---------------------------------------

std::string peak_composition_chart(const MemoryAnatomy& m, const std::vector<MemoryRow>& rows) {
  constexpr int kLeft = 20, kWidth = kChartWidth - 40, kBarTop = 26, kBarHeight = 44;
  constexpr int kDeviceTop = kBarTop + kBarHeight + 40, kDeviceHeight = 14;
  int64_t total = 0;
  for (const MemoryRow& r : rows) total += std::max<int64_t>(0, r.at_peak);
  // The composition fills the width, so small rows stay visible on a large
  // device; a thin bar below places the whole against the device.
  const bool device_bar = m.device_total > 0;
  const int height = device_bar ? kDeviceTop + kDeviceHeight + 28 : kBarTop + kBarHeight + 34;
  std::string svg = fmt::format(
      "<svg id=\"peak-composition-chart\" viewBox=\"0 0 {} {}\" role=\"img\" "
      "aria-label=\"memory at the peak by row\">\n",
      kChartWidth, height);
  svg += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{}\">0</text><text class=\"tick\" x=\"{}\" y=\"{}\" "
                     "text-anchor=\"end\">{}</text>\n",
                     kLeft, kBarTop - 8, kLeft + kWidth, kBarTop - 8, escape_html(format_bytes(total)));
  const int64_t scale = std::max<int64_t>(total, 1);
  double x = kLeft;
  for (const MemoryRow& r : rows) {
    if (r.at_peak <= 0) continue;
    const double w = static_cast<double>(kWidth) * r.at_peak / scale;
    svg += fmt::format("<rect class=\"series-{}\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\">"
                       "<title>{}: {} ({})</title></rect>\n",
                       r.key, x, kBarTop, w, kBarHeight, colour_of(r.key), escape_html(r.label),
                       escape_html(format_bytes(r.at_peak)), percent(r.at_peak, total));
    if (w > 46)
      svg += fmt::format("<text class=\"in-bar{}\" x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                         r.key == "unattributed" || r.key == "context" ? " light" : "", x + w / 2,
                         kBarTop + kBarHeight / 2 + 4, percent(r.at_peak, total));
    x += w;
  }
  svg += fmt::format("<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n", kLeft, kBarTop, kWidth,
                     kBarHeight);
  svg += fmt::format("<text class=\"axis-title\" x=\"{}\" y=\"{}\">{} accounted for at the ledger's peak</text>\n",
                     kLeft, kBarTop + kBarHeight + 18, escape_html(format_bytes(total)));
  if (device_bar) {
    const int64_t used = m.nvml_used >= 0 ? m.nvml_used : total;
    const double w = static_cast<double>(kWidth) * std::min(used, m.device_total) / m.device_total;
    svg += fmt::format("<rect class=\"device-used\" x=\"{}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\"/>"
                       "<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n",
                       kLeft, kDeviceTop, w, kDeviceHeight, kLeft, kDeviceTop, kWidth, kDeviceHeight);
    svg += fmt::format("<text class=\"axis-title\" x=\"{}\" y=\"{}\">the device: this process uses {} of {} ({}{})"
                       "</text>\n",
                       kLeft, kDeviceTop + kDeviceHeight + 18, escape_html(format_bytes(used)),
                       escape_html(format_bytes(m.device_total)), percent(used, m.device_total),
                       m.nvml_used >= 0 ? ", NVML" : ", the rows");
  }
  return svg + "</svg>\n";
}

std::string composition_legend(const std::vector<MemoryRow>& rows) {
  int64_t total = 0;
  for (const MemoryRow& r : rows) total += std::max<int64_t>(0, r.at_peak);
  std::string out = "<div class=\"legend\">";
  for (const MemoryRow& r : rows) {
    if (r.at_peak == 0 || r.at_peak == -1) continue;
    out += fmt::format("<span><i style=\"background:{}\"></i>{}: {}{}</span>", colour_of(r.key),
                       escape_html(r.label), escape_html(format_bytes(r.at_peak)),
                       r.at_peak > 0 ? " (" + percent(r.at_peak, total) + ")" : " (negative: not drawn)");
  }
  return out + "</div>\n";
}

// ---- (c) predicted vs measured ---------------------------------------------

struct Comparison {
  std::string key, label;
  int64_t predicted, measured;  // measured -1: unknown
};

std::vector<Comparison> comparisons(const MemoryAnatomy& m, const std::vector<MemoryRow>& rows) {
  const MemoryPrediction& p = *m.predicted;
  std::vector<Comparison> out;
  for (const MemoryRow& r : rows)
    if (r.predicted >= 0 && (r.predicted > 0 || r.at_peak > 0)) out.push_back({r.key, r.label, r.predicted, r.at_peak});
  out.push_back({"ledger_total", "Ledger peak (all categories)", p.peak_total, m.ledger.peak_total});
  if (p.reserved_peak > 0) out.push_back({"reserved_total", "Pool segments at their peak", p.reserved_peak,
                                          m.ledger.reserved_peak});
  if (p.nvml_total > 0 || m.nvml_used >= 0)
    out.push_back({"nvml_total", "NVML use of the process", p.nvml_total, m.nvml_used});
  return out;
}

std::string prediction_chart(const MemoryAnatomy& m, const std::vector<MemoryRow>& rows) {
  constexpr int kLabelWidth = 250, kBarLeft = 260, kBarWidth = 440, kRowHeight = 34, kTop = 10;
  const std::vector<Comparison> items = comparisons(m, rows);
  int64_t largest = 1;
  for (const Comparison& c : items) largest = std::max({largest, c.predicted, c.measured});
  const int height = kTop + kRowHeight * static_cast<int>(items.size()) + 30;
  std::string svg = fmt::format(
      "<svg id=\"prediction-chart\" viewBox=\"0 0 {} {}\" role=\"img\" "
      "aria-label=\"predicted and measured bytes per row\">\n",
      kChartWidth, height);
  auto width_of = [&](int64_t bytes) { return static_cast<double>(kBarWidth) * bytes / largest; };
  int y = kTop;
  for (const Comparison& c : items) {
    const std::string colour = colour_of(c.key);
    svg += fmt::format("<text class=\"row-label\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", kLabelWidth,
                       y + 18, escape_html(c.label));
    svg += fmt::format("<rect class=\"series-{} predicted\" x=\"{}\" y=\"{}\" width=\"{:.2f}\" height=\"12\" "
                       "fill=\"{}\" fill-opacity=\"0.35\" stroke=\"{}\"><title>predicted {}</title></rect>\n",
                       c.key, kBarLeft, y + 2, width_of(c.predicted), colour, colour,
                       escape_html(format_bytes(c.predicted)));
    if (c.measured >= 0)
      svg += fmt::format("<rect class=\"series-{} measured\" x=\"{}\" y=\"{}\" width=\"{:.2f}\" height=\"12\" "
                         "fill=\"{}\"><title>measured {}</title></rect>\n",
                         c.key, kBarLeft, y + 15, width_of(c.measured), colour, escape_html(format_bytes(c.measured)));
    std::string note = fmt::format("predicted {}, measured {}", format_bytes(c.predicted),
                                   c.measured >= 0 ? format_bytes(c.measured) : "unknown");
    if (c.measured > 0)
      note += fmt::format(" ({:+.1f}%)", 100.0 * static_cast<double>(c.predicted - c.measured) / c.measured);
    svg += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{}\">{}</text>\n", kBarLeft + kBarWidth + 10, y + 18,
                       escape_html(note));
    y += kRowHeight;
  }
  svg += fmt::format("<text class=\"axis-title\" x=\"{}\" y=\"{}\">light: predicted before the run; solid: "
                     "measured. Error = (predicted − measured) / measured.</text>\n",
                     kBarLeft, y + 14);
  return svg + "</svg>\n";
}

// ---- (d) the table ---------------------------------------------------------

std::string rows_table(const MemoryAnatomy& m, const std::vector<MemoryRow>& rows) {
  const bool predicted = m.predicted.has_value();
  int64_t total = 0;
  for (const MemoryRow& r : rows) total += std::max<int64_t>(0, r.at_peak);
  auto cell = [](int64_t bytes, const char* unknown) {
    return bytes == -1 ? std::string(unknown) : escape_html(format_bytes(bytes));
  };
  std::string out = "<table>\n<thead><tr><th></th><th>Row</th><th>At the peak</th><th>Own peak</th>";
  if (predicted) out += "<th>Predicted</th>";
  out += "<th>Share</th></tr></thead>\n<tbody>\n";
  for (const MemoryRow& r : rows) {
    out += fmt::format("<tr class=\"row-{}\"><td><i style=\"background:{}\"></i></td><td>{}</td><td>{}</td><td>{}</td>",
                       r.key, colour_of(r.key), escape_html(r.label), cell(r.at_peak, "unknown"),
                       cell(r.peak, "unknown"));
    if (predicted) out += fmt::format("<td>{}</td>", cell(r.predicted, "—"));
    out += fmt::format("<td>{}</td></tr>\n", r.at_peak > 0 ? percent(r.at_peak, total) : "");
  }
  out += fmt::format("<tr class=\"total\"><td></td><td>Total of the rows</td><td>{}</td><td></td>{}<td></td></tr>\n",
                     escape_html(format_bytes(total)), predicted ? "<td></td>" : "");
  return out + "</tbody>\n</table>\n";
}

// ---- (e) the peak's buffers and the whole run ------------------------------

std::string peak_buffers_table(const PeakBuffers& b) {
  std::string out =
      "<table id=\"peak-buffers\">\n<thead><tr><th></th><th>Buffer</th><th>Category</th><th>Bytes</th>"
      "<th>Allocated during</th></tr></thead>\n<tbody>\n";
  int64_t total = b.other_bytes;
  for (const LedgerEntry& e : b.largest) {
    const std::string key(category_name(e.category));
    out += fmt::format("<tr class=\"buffer\"><td><i style=\"background:{}\"></i></td><td>{}</td><td>{}</td>"
                       "<td data-bytes=\"{}\">{}</td><td>{}</td></tr>\n",
                       colour_of(key), escape_html(e.name), escape_html(key), e.bytes,
                       escape_html(format_bytes(e.bytes)),
                       escape_html(e.step >= 0 ? fmt::format("{}, step {}", e.phase, e.step + 1) : e.phase));
    total += e.bytes;
  }
  if (b.other_count > 0)
    out += fmt::format("<tr class=\"other\"><td></td><td>{} other buffer{}</td><td></td><td data-bytes=\"{}\">{}</td>"
                       "<td></td></tr>\n",
                       b.other_count, b.other_count == 1 ? "" : "s", b.other_bytes,
                       escape_html(format_bytes(b.other_bytes)));
  out += fmt::format("<tr class=\"total\"><td></td><td>In all: the ledger's peak</td><td></td><td data-bytes=\"{}\">"
                     "{}</td><td></td></tr>\n",
                     total, escape_html(format_bytes(total)));
  return out + "</tbody>\n</table>\n";
}

// Each step's highest point and what it left live, over every step of the run.
std::string steps_chart(const std::vector<StepSample>& steps) {
  constexpr int kLeft = 72, kTop = 20, kPlotWidth = 1000, kPlotHeight = 220, kHeight = 290;
  std::string svg = fmt::format(
      "<svg id=\"steps-chart\" viewBox=\"0 0 {} {}\" role=\"img\" "
      "aria-label=\"memory at each step's highest point and end, over the whole run\">\n",
      kChartWidth, kHeight);
  int64_t highest = 1, lowest = std::numeric_limits<int64_t>::max();
  for (const StepSample& s : steps) {
    highest = std::max({highest, s.peak, s.end});
    lowest = std::min({lowest, s.peak, s.end});
  }
  // When everything lies in the upper half, the axis starts near the lowest
  // value (a round figure below it), so that growth small against the whole,
  // a leak, still shows as a slope.
  int64_t base = 0;
  if (lowest > highest / 2 && lowest < highest) {
    const ByteAxis span_axis(highest - lowest);
    const auto tick = static_cast<int64_t>(span_axis.step * span_axis.unit);
    base = lowest / tick * tick;
  }
  const ByteAxis axis(highest - base);
  const int64_t first = steps.front().first_step, last = steps.back().last_step;
  const double span = static_cast<double>(std::max<int64_t>(1, last - first + 1));
  auto x_at = [&](int64_t step) { return kLeft + kPlotWidth * static_cast<double>(step - first) / span; };
  auto y_at = [&](int64_t bytes) {
    return kTop + kPlotHeight - kPlotHeight * static_cast<double>(bytes - base) / static_cast<double>(axis.top);
  };
  for (double v = 0; v * axis.unit <= axis.top * 1.0000001; v += axis.step) {
    const auto bytes = base + static_cast<int64_t>(v * axis.unit);
    const double y = y_at(bytes);
    svg += fmt::format("<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/>"
                       "<text class=\"tick\" x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
                       kLeft, kLeft + kPlotWidth, y, y, kLeft - 6, y + 4,
                       base == 0 ? axis.label(v) : escape_html(format_bytes(bytes)));
  }
  // A sample covers steps [first_step, last_step]: drawn as a plateau over them.
  auto series = [&](const char* key, const char* colour, const char* title, auto bytes_of) {
    std::string d;
    for (const StepSample& s : steps) {
      d += fmt::format("{}{:.1f},{:.1f}H{:.1f}", d.empty() ? "M" : "L", x_at(s.first_step), y_at(bytes_of(s)),
                       x_at(s.last_step + 1));
    }
    svg += fmt::format("<path class=\"series-{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" d=\"{}\">"
                       "<title>{}</title></path>\n",
                       key, colour, d, title);
  };
  series("step-peak", "#e15759", "each step's highest point", [](const StepSample& s) { return s.peak; });
  series("step-end", "#4e79a7", "live at each step's end", [](const StepSample& s) { return s.end; });
  for (const StepSample& s : steps) {
    const std::string which = s.first_step == s.last_step
                                  ? fmt::format("step {}", s.last_step + 1)
                                  : fmt::format("steps {}-{}", s.first_step + 1, s.last_step + 1);
    svg += fmt::format("<rect class=\"hover\" x=\"{:.1f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\"><title>{}: "
                       "highest {}, at the end {}</title></rect>\n",
                       x_at(s.first_step), kTop, x_at(s.last_step + 1) - x_at(s.first_step), kPlotHeight,
                       escape_html(which), escape_html(format_bytes(s.peak)), escape_html(format_bytes(s.end)));
  }
  svg += fmt::format("<line class=\"axis\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"/>"
                     "<line class=\"axis\" x1=\"{0}\" x2=\"{3}\" y1=\"{2}\" y2=\"{2}\"/>\n",
                     kLeft, kTop, kTop + kPlotHeight, kLeft + kPlotWidth);
  svg += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{}\">step {}</text><text class=\"tick\" x=\"{}\" "
                     "y=\"{}\" text-anchor=\"end\">step {}</text>\n",
                     kLeft, kTop + kPlotHeight + 16, first + 1, kLeft + kPlotWidth, kTop + kPlotHeight + 16, last + 1);
  svg += fmt::format("<text class=\"axis-title\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">every step of the run "
                     "({} sample{}; red: each step's highest point, blue: live at its end{})</text>\n",
                     kLeft + kPlotWidth / 2, kHeight - 12, steps.size(), steps.size() == 1 ? "" : "s",
                     base > 0 ? "; the axis starts at " + escape_html(format_bytes(base)) : "");
  return svg + "</svg>\n";
}

constexpr const char* kStyle = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px auto; max-width: 1140px;
       color: #1d1d1d; padding: 0 16px; }
h1 { font-size: 1.5em; margin-bottom: 4px; } h2 { font-size: 1.15em; margin-top: 32px; }
.summary { color: #333; line-height: 1.6; } .summary b { font-weight: 600; }
svg { width: 100%; height: auto; display: block; }
svg text { font-size: 12px; fill: #333; } svg .note { font-size: 14px; }
.grid { stroke: #e6e6e6; } .axis { stroke: #555; } .step-line { stroke: #bbb; stroke-dasharray: 2 3; }
.axis-title { font-size: 12px; fill: #555; }
.hover { fill: transparent; } .hover:hover { fill: rgba(0, 0, 0, 0.08); }
.peak-marker line { stroke: #c00; stroke-width: 1.5; stroke-dasharray: 4 2; } .peak-marker circle { fill: #c00; }
.peak-marker text { fill: #c00; font-weight: 600; }
.frame { fill: none; stroke: #555; } .device-used { fill: #8a8a8a; } .in-bar { font-size: 11px; fill: #111; } .in-bar.light { fill: #fff; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 18px; font-size: 13px; margin: 6px 0 0 0; }
.legend i, td i { display: inline-block; width: 12px; height: 12px; margin-right: 6px; vertical-align: -1px;
                  border: 1px solid #888; }
.legend i.dashed { border: none; border-top: 2px dashed #333; height: 0; vertical-align: 3px; }
table { border-collapse: collapse; font-size: 14px; margin-top: 8px; }
th, td { padding: 4px 12px; border-bottom: 1px solid #e3e3e3; text-align: right; }
th:nth-child(2), td:nth-child(2) { text-align: left; } tr.total td { font-weight: 600; border-top: 2px solid #999; }
)";

}  // namespace

std::string memory_report_html(const MemoryAnatomy& m, const std::string& extra_sections) {
  const std::vector<MemoryRow> rows = memory_rows(m);
  const LedgerSnapshot& l = m.ledger;
  const bool pooled = std::any_of(m.timeline.begin(), m.timeline.end(), [](const PhaseSample& s) {
    return s.reserved > s.total;
  });
  std::string device = m.device;
  if (!m.device_name.empty()) device += " (" + m.device_name + ")";

  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += fmt::format("<title>Memory anatomy: {}</title>\n<style>{}</style>\n</head>\n<body>\n", escape_html(device),
                      kStyle);
  html += "<h1>Memory anatomy</h1>\n<p class=\"summary\">";
  html += fmt::format("Device <b>{}</b>{}.<br>\n", escape_html(device),
                      m.device_total > 0 ? ", " + escape_html(format_bytes(m.device_total)) + " in all" : "");
  html += fmt::format("Ledger peak <b>{}</b> during <b>{}</b> of {}.", escape_html(format_bytes(l.peak_total)),
                      escape_html(l.peak_phase), escape_html(step_name(l.peak_step)));
  if (l.reserved_peak != l.peak_total)
    html += fmt::format(" Pool segments at their peak <b>{}</b>.", escape_html(format_bytes(l.reserved_peak)));
  html += "<br>\n";
  if (m.nvml_used >= 0)
    html += fmt::format("NVML: this process uses <b>{}</b>{}.<br>\n", escape_html(format_bytes(m.nvml_used)),
                        m.context_bytes >= 0
                            ? ", of which " + escape_html(format_bytes(m.context_bytes)) + " CUDA context and kernels"
                            : "");
  if (m.predicted) {
    const MemoryPrediction& p = *m.predicted;
    html += fmt::format("Predicted ledger peak <b>{}</b>, measured <b>{}</b>", escape_html(format_bytes(p.peak_total)),
                        escape_html(format_bytes(l.peak_total)));
    if (l.peak_total > 0)
      html += fmt::format(" (error {:+.1f}%)", 100.0 * static_cast<double>(p.peak_total - l.peak_total) / l.peak_total);
    html += ".<br>\n";
  }
  if (m.timeline_dropped > 0)
    html += fmt::format("The timeline kept {} phase samples and dropped {}.<br>\n", m.timeline.size(),
                        m.timeline_dropped);
  html += "</p>\n";

  html += "<h2>Memory phase by phase (the first steps), by category</h2>\n" + timeline_chart(m) + legend(m, rows, pooled);
  html += "<h2>Composition at the ledger's peak</h2>\n" + peak_composition_chart(m, rows) + composition_legend(rows);
  html += "<h2>Predicted and measured</h2>\n";
  html += m.predicted ? prediction_chart(m, rows)
                      : "<p class=\"summary\">No prediction was made for this run.</p>\n";
  html += "<h2>The rows</h2>\n" + rows_table(m, rows);
  if (!m.peak_buffers.largest.empty())
    html += "<h2>Largest buffers live at the peak</h2>\n" + peak_buffers_table(m.peak_buffers);
  if (!m.steps.empty()) html += "<h2>The whole run, step by step</h2>\n" + steps_chart(m.steps);
  html += extra_sections;
  html += "</body>\n</html>\n";
  return html;
}

}  // namespace anatomy
