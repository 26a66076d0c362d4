#include "loadgen/report_html.h"

#include <fmt/format.h>

#include "loadgen/svg_chart.h"

namespace kvserve::loadgen {

using nlohmann::json;

namespace {

constexpr const char* kStyle = R"(
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;background:#f5f6f8;color:#1f2933}
header{background:#1f2933;color:#fff;padding:18px 32px}
header h1{margin:0;font-size:22px} header p{margin:4px 0 0;color:#cbd2d9;font-size:14px}
main{padding:20px 32px;max-width:1140px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin-bottom:18px}
.card{background:#fff;border-radius:8px;padding:12px 16px;min-width:150px;box-shadow:0 1px 3px rgba(0,0,0,.08)}
.card .v{font-size:24px;font-weight:600} .card .k{font-size:12px;color:#616e7c;text-transform:uppercase;letter-spacing:.04em}
.card .s{font-size:12px;color:#7b8794}
section{background:#fff;border-radius:8px;padding:14px 18px;margin-bottom:18px;box-shadow:0 1px 3px rgba(0,0,0,.08)}
section h2{font-size:16px;margin:0 0 10px}
.grid2{display:flex;flex-wrap:wrap;gap:8px}
.chart{max-width:100%;height:auto}
.ctitle{font-size:14px;font-weight:600;fill:#1f2933}
.tick{font-size:11px;fill:#52606d} .alabel{font-size:12px;fill:#3e4c59}
.grid{stroke:#e4e7eb} .axis{stroke:#9aa5b1}
.bar{fill:#4c78a8} .marker{stroke:#e45756;stroke-dasharray:4 3} .mlabel{font-size:11px;fill:#e45756}
table{border-collapse:collapse;font-size:13px} td,th{padding:4px 12px;text-align:right;border-bottom:1px solid #e4e7eb}
td:first-child,th:first-child{text-align:left}
.err{color:#c62828;font-family:monospace;font-size:12px}
)";

double Num(const json& j, const char* path, double fallback = 0) {
  const json::json_pointer p(path);
  if (!j.contains(p) || !j.at(p).is_number()) return fallback;
  return j.at(p).get<double>();
}

bool Has(const json& j, const char* path) {
  const json::json_pointer p(path);
  return j.contains(p) && j.at(p).is_number();
}

std::string Card(const std::string& key, const std::string& value, const std::string& sub) {
  return fmt::format("<div class=\"card\"><div class=\"k\">{}</div><div class=\"v\">{}</div>"
                     "<div class=\"s\">{}</div></div>",
                     svg::Escape(key), svg::Escape(value), svg::Escape(sub));
}

std::vector<double> Collect(const json& requests, const char* field) {
  std::vector<double> out;
  for (const json& r : requests) {
    if (r.contains(field) && r[field].is_number()) out.push_back(r[field].get<double>());
  }
  return out;
}

std::vector<svg::Marker> Markers(const json& result, const std::string& metric) {
  std::vector<svg::Marker> m;
  for (const char* p : {"p50", "p90", "p99"}) {
    const std::string path = "/" + metric + "/" + p;
    if (Has(result, path.c_str())) m.push_back({Num(result, path.c_str()), p});
  }
  return m;
}

std::string LatencyTable(const json& r) {
  std::string s = "<table><tr><th>ms</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th>"
                  "<th>max</th></tr>";
  for (const auto& [name, key] : {std::pair{"time to first token", "ttft_ms"},
                                  std::pair{"time per output token", "tpot_ms"},
                                  std::pair{"inter-token latency", "itl_ms"},
                                  std::pair{"end to end", "e2e_ms"}}) {
    s += fmt::format("<tr><td>{}</td>", name);
    for (const char* stat : {"mean", "p50", "p90", "p99", "max"}) {
      const std::string path = fmt::format("/{}/{}", key, stat);
      s += fmt::format("<td>{:.2f}</td>", Num(r, path.c_str()));
    }
    s += "</tr>";
  }
  return s + "</table>";
}

std::string ConfigTable(const json& config) {
  std::string s = "<table>";
  auto row = [&](const std::string& k, const json& v) {
    s += fmt::format("<tr><td>{}</td><td>{}</td></tr>", svg::Escape(k),
                     svg::Escape(v.is_string() ? v.get<std::string>() : v.dump()));
  };
  if (config.is_object()) {
    for (auto it = config.begin(); it != config.end(); ++it) {
      if (it->is_object()) {
        for (auto jt = it->begin(); jt != it->end(); ++jt) row(it.key() + "." + jt.key(), *jt);
      } else {
        row(it.key(), *it);
      }
    }
  }
  return s + "</table>";
}

}  // namespace

std::string RenderHtmlReport(const json& r) {
  const json config = r.value("config", json::object());
  const json requests = r.value("requests", json::array());
  const std::string workload = config.value("workload", std::string("?"));
  const std::string url = config.value("base_url", std::string("?"));
  const std::string model = config.value("model", std::string(""));

  std::string h = "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">";
  h += fmt::format("<title>kvserve bench: {} on {}</title><style>{}</style></head><body>",
                   svg::Escape(workload), svg::Escape(url), kStyle);
  h += fmt::format("<header><h1>kvserve bench · {}</h1><p>{}{} · {} requests, {} failed · {:.2f} s"
                   "</p></header><main>",
                   svg::Escape(workload), svg::Escape(url),
                   model.empty() ? "" : " · " + svg::Escape(model), Num(r, "/num_requests"),
                   Num(r, "/failed"), Num(r, "/duration_s"));

  // Headline numbers.
  h += "<div class=\"cards\">";
  h += Card("requests/s", fmt::format("{:.2f}", Num(r, "/request_throughput")),
            fmt::format("{:.0f} completed", Num(r, "/completed")));
  h += Card("output tok/s", fmt::format("{:.1f}", Num(r, "/output_throughput")),
            fmt::format("{:.0f} total tok/s", Num(r, "/total_token_throughput")));
  h += Card("TTFT p50", fmt::format("{:.1f} ms", Num(r, "/ttft_ms/p50")),
            fmt::format("p99 {:.1f} ms", Num(r, "/ttft_ms/p99")));
  h += Card("TPOT p50", fmt::format("{:.2f} ms", Num(r, "/tpot_ms/p50")),
            fmt::format("p99 {:.2f} ms", Num(r, "/tpot_ms/p99")));
  if (Has(r, "/goodput/requests_per_s")) {
    h += Card("goodput", fmt::format("{:.2f} req/s", Num(r, "/goodput/requests_per_s")),
              fmt::format("{:.0f}% within SLO", 100 * Num(r, "/goodput/fraction")));
  }
  const double input = std::max(1.0, Num(r, "/total_input_tokens"));
  h += Card("cache hit", Has(r, "/cached_tokens/reported")
                             ? fmt::format("{:.1f}%", 100 * Num(r, "/cached_tokens/reported") / input)
                             : std::string("n/a"),
            fmt::format("ideal {:.1f}%", 100 * Num(r, "/cached_tokens/ideal") / input));
  h += "</div>";

  // Latency distributions.
  std::vector<double> itl;
  for (const json& q : requests) {
    if (q.contains("itl_ms") && q["itl_ms"].is_array()) {
      for (const json& v : q["itl_ms"]) itl.push_back(v.get<double>());
    }
  }
  h += "<section><h2>Latency distributions</h2><div class=\"grid2\">";
  h += svg::Histogram(Collect(requests, "ttft_ms"), "Time to first token", "ms", Markers(r, "ttft_ms"));
  h += svg::Histogram(Collect(requests, "tpot_ms"), "Time per output token", "ms", Markers(r, "tpot_ms"));
  h += svg::Histogram(itl, "Inter-token latency", "ms", Markers(r, "itl_ms"));
  h += svg::Histogram(Collect(requests, "e2e_ms"), "End-to-end latency", "ms", Markers(r, "e2e_ms"));
  h += "</div>" + LatencyTable(r) + "</section>";

  // Over time.
  const json timeline = r.value("timeline", json::object());
  const double bucket = timeline.value("bucket_s", 1.0);
  auto series = [&](const char* key, const char* name, const char* color) {
    svg::Series s{name, color, {}, {}};
    if (timeline.contains(key) && timeline[key].is_array()) {
      for (size_t i = 0; i < timeline[key].size(); ++i) {
        s.x.push_back((static_cast<double>(i) + 0.5) * bucket);
        s.y.push_back(timeline[key][i].get<double>());
      }
    }
    return s;
  };
  h += "<section><h2>Over time</h2><div class=\"grid2\">";
  h += svg::LineChart({series("output_tokens_per_s", "output tok/s", "#4c78a8")},
                      "Output throughput", "seconds since the first request", "tokens/s");
  h += svg::LineChart({series("running", "in flight", "#54a24b"),
                       series("completed_per_s", "completed/s", "#f58518")},
                      "Requests", "seconds since the first request", "");
  std::vector<double> sx, sy, sc;
  for (const json& q : requests) {
    if (!q.contains("ttft_ms") || !q["ttft_ms"].is_number()) continue;
    sx.push_back(q.value("sent_s", 0.0));
    sy.push_back(q["ttft_ms"].get<double>());
    const double p = q.contains("prompt_tokens") && q["prompt_tokens"].is_number()
                         ? q["prompt_tokens"].get<double>() : 0;
    const double c = q.contains("cached_tokens") && q["cached_tokens"].is_number()
                         ? q["cached_tokens"].get<double>() : 0;
    sc.push_back(p > 0 ? c / p : 0);
  }
  h += svg::Scatter(sx, sy, sc, "TTFT of each request by send time", "sent at (s)", "TTFT (ms)",
                    "cached");
  h += "</div></section>";

  // Cache.
  h += "<section><h2>Prefix cache</h2>";
  std::vector<svg::Bar> bars = {{"prompt tokens", Num(r, "/total_input_tokens"), "#9aa5b1"},
                                {"ideal cached", Num(r, "/cached_tokens/ideal"), "#54a24b"},
                                {fmt::format("ideal at {:.0f}-token blocks",
                                             Num(r, "/cached_tokens/block_size", 16)),
                                 Num(r, "/cached_tokens/ideal_block"), "#88d27a"}};
  if (Has(r, "/cached_tokens/reported")) {
    bars.push_back({"reported cached", Num(r, "/cached_tokens/reported"), "#f58518"});
  }
  h += svg::Bars(bars, "Cached prompt tokens");
  if (!Has(r, "/cached_tokens/reported")) {
    h += "<p>The server reported no cached-token counts (usage.prompt_tokens_details.cached_tokens "
         "or timings.cache_n).</p>";
  }
  h += "</section>";

  if (r.contains("errors") && r["errors"].is_array() && !r["errors"].empty()) {
    h += "<section><h2>Errors</h2>";
    for (const json& e : r["errors"]) {
      h += fmt::format("<div class=\"err\">{}</div>", svg::Escape(e.is_string() ? e.get<std::string>() : e.dump()));
    }
    h += "</section>";
  }
  h += "<section><h2>Configuration</h2>" + ConfigTable(config) + "</section>";
  h += "</main></body></html>\n";
  return h;
}

}  // namespace kvserve::loadgen
