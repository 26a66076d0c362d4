// The HTML report of a benchmark result: one self-contained page (inline CSS and SVG drawn
// here, no script, nothing fetched) with the headline numbers, latency distributions,
// throughput and concurrency over time, per-request TTFT against send time coloured by cache
// hits, and reported against ideal cached tokens.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace kvserve::loadgen {

// REQUIRES: `result` is what ResultToJson produced (fields may be missing; sections without
// data are left out).
std::string RenderHtmlReport(const nlohmann::json& result);

}  // namespace kvserve::loadgen
