// `kvserve bench --compare a.json b.json`: the headline metrics of two results side by side and
// their ratio b / a, with a note of which side is better.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvserve/status.h"

namespace kvserve::loadgen {

struct CompareRow {
  std::string metric;            // e.g. "ttft_ms.p50"
  std::optional<double> a, b;    // absent when a result lacks the field
  std::optional<double> ratio;   // b / a; absent when either is missing or a == 0
  bool higher_is_better = false;
};

// REQUIRES: both are kvserve bench results (objects); a missing field gives an empty cell.
Result<std::vector<CompareRow>> CompareResults(const nlohmann::json& a, const nlohmann::json& b);

std::string FormatComparison(const std::vector<CompareRow>& rows, const std::string& name_a,
                             const std::string& name_b);

}  // namespace kvserve::loadgen
