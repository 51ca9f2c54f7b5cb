// The proxy's dashboard: one self-contained HTML page (inline CSS, plain JS, hand-drawn SVG
// charts; nothing from outside, since a run's machines may reach nothing else) that polls
// /status every few seconds and draws reward over time and per version (mean and spread),
// each worker's contribution and staleness, bytes per sync, the workers' health and the
// rejected updates. Elements carry ids and data- attributes the browser test reads back.
// The page is src/obs/dashboard.html, embedded at build time (cmake/embed_text.cmake).
#pragma once

#include <string_view>

namespace brl::obs {

std::string_view dashboard_html();

}  // namespace brl::obs
