// time_report_html.h: the time anatomy's section of report.html: bars of each
// operation class's share of FLOPs against its share of time (the table of
// "Data Movement Is All You Need"), and a per-layer timeline of forward and
// backward milliseconds, as inline SVG.
#pragma once

#include <string>

#include "anatomy/analysis/profile.h"

namespace anatomy {

// An HTML fragment (headings, SVGs with ids class-share-chart and
// layer-time-chart, a short table) to place inside report.html's body.
std::string time_report_section_html(const ProfileSummary& summary);

}  // namespace anatomy
