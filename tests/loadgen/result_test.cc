#include "loadgen/result.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "loadgen/compare.h"
#include "loadgen/report_html.h"
#include "loadgen/svg_chart.h"

namespace kvserve::loadgen {
namespace {

using nlohmann::json;

// Sent at `sent`, chunks at the given times, `tokens` output tokens.
RequestRecord Rec(int id, double sent, std::vector<double> chunks, int prompt, int cached, int ideal) {
  RequestRecord r;
  r.id = id;
  r.seq = id;
  r.sent = true;
  r.ok = true;
  r.sent_s = sent;
  r.first_token_s = chunks.front();
  r.done_s = chunks.back();
  r.chunk_s = std::move(chunks);
  r.completion_tokens = static_cast<int>(r.chunk_s.size());
  r.prompt_tokens = prompt;
  r.cached_tokens = cached;
  r.ideal_cached_tokens = ideal;
  return r;
}

std::vector<RequestRecord> TwoRequestsAndAFailure() {
  RequestRecord failed;
  failed.id = 2;
  failed.seq = 2;
  failed.sent = true;
  failed.sent_s = 0.5;
  failed.done_s = 0.6;
  failed.error = "HTTP 503: busy";
  // TTFT 100 ms and 300 ms; TPOT (0.4-0.1)/3 = 100 ms and (0.6-0.3)/1 = 300 ms.
  return {Rec(0, 0.0, {0.1, 0.2, 0.3, 0.4}, 100, 0, 0), Rec(1, 0.0, {0.3, 0.6}, 100, 96, 99),
          failed};
}

TEST(SummarizeRunTest, LatenciesThroughputAndCachedTokens) {
  const BenchSummary s = SummarizeRun(TwoRequestsAndAFailure(), 0.6, Slo{}, 16);
  EXPECT_EQ(s.num_requests, 3);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.total_input_tokens, 200);
  EXPECT_EQ(s.total_output_tokens, 6);
  EXPECT_NEAR(s.request_throughput, 2 / 0.6, 1e-9);
  EXPECT_NEAR(s.output_throughput, 6 / 0.6, 1e-9);
  EXPECT_NEAR(s.total_token_throughput, 206 / 0.6, 1e-9);
  EXPECT_NEAR(s.ttft_ms.mean, 200, 1e-9);
  EXPECT_NEAR(s.ttft_ms.p50, 200, 1e-9);
  EXPECT_NEAR(s.tpot_ms.mean, 200, 1e-9);
  EXPECT_EQ(s.itl_ms.count, 4);  // 3 gaps of 100 ms, 1 of 300 ms
  EXPECT_NEAR(s.itl_ms.mean, 150, 1e-9);
  EXPECT_NEAR(s.e2e_ms.max, 600, 1e-9);
  EXPECT_EQ(s.reported_cached_tokens, 96);
  EXPECT_EQ(s.requests_reporting_cached, 2);
  EXPECT_EQ(s.ideal_cached_tokens, 99);
  EXPECT_EQ(s.ideal_cached_tokens_block, 96);
  EXPECT_EQ(s.errors, std::vector<std::string>{"HTTP 503: busy"});
  EXPECT_FALSE(s.has_slo);
}

TEST(SummarizeRunTest, GoodputCountsRequestsWithinEveryObjective) {
  auto slo = ParseSlo("ttft:150,tpot:150");
  ASSERT_TRUE(slo.ok());
  const BenchSummary s = SummarizeRun(TwoRequestsAndAFailure(), 0.5, *slo, 16);
  EXPECT_TRUE(s.has_slo);
  EXPECT_EQ(s.good_requests, 1);
  EXPECT_NEAR(s.goodput, 2.0, 1e-9);
  EXPECT_EQ(SummarizeRun(TwoRequestsAndAFailure(), 0.5, *ParseSlo("e2e:1000"), 16).good_requests, 2);
}

TEST(ParseSloTest, RefusesWhatItCannotRead) {
  EXPECT_EQ(ParseSlo("tpot:20")->tpot_ms, 20);
  EXPECT_FALSE(ParseSlo("ttft").ok());
  EXPECT_FALSE(ParseSlo("ttft:-1").ok());
  EXPECT_FALSE(ParseSlo("ttft:abc").ok());
  EXPECT_NE(ParseSlo("latency:5").status().message().find("latency"), std::string::npos);
}

TEST(ResultJsonTest, HasThePromisedFields) {
  const auto records = TwoRequestsAndAFailure();
  const json j = ResultToJson({{"workload", "shared-prefix"}},
                              SummarizeRun(records, 0.6, *ParseSlo("ttft:150"), 16), records);
  for (const char* key : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    for (const char* stat : {"mean", "p50", "p90", "p99"}) {
      EXPECT_TRUE(j[key].contains(stat)) << key << "." << stat;
    }
  }
  for (const char* key : {"request_throughput", "output_throughput", "total_token_throughput",
                          "completed", "failed", "duration_s", "timeline", "requests"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["cached_tokens"]["reported"], 96);
  EXPECT_EQ(j["cached_tokens"]["ideal"], 99);
  EXPECT_EQ(j["goodput"]["good_requests"], 1);
  EXPECT_EQ(j["requests"].size(), 3u);
  EXPECT_EQ(j["requests"][0]["itl_ms"].size(), 3u);
  EXPECT_EQ(j["requests"][2]["ok"], false);
  EXPECT_EQ(j["config"]["workload"], "shared-prefix");
}

TEST(CompareTest, RatiosAreBOverAAndMissingFieldsAreEmpty) {
  const json a = {{"request_throughput", 2.0}, {"ttft_ms", {{"p50", 100.0}}}, {"goodput", nullptr}};
  const json b = {{"request_throughput", 3.0}, {"ttft_ms", {{"p50", 50.0}}},
                  {"goodput", {{"requests_per_s", 1.0}}}};
  auto rows = CompareResults(a, b);
  ASSERT_TRUE(rows.ok());
  std::map<std::string, CompareRow> by_name;
  for (const CompareRow& r : *rows) by_name[r.metric] = r;
  EXPECT_DOUBLE_EQ(*by_name["request_throughput"].ratio, 1.5);
  EXPECT_DOUBLE_EQ(*by_name["ttft_ms.p50"].ratio, 0.5);
  EXPECT_FALSE(by_name["goodput.requests_per_s"].a);
  EXPECT_FALSE(by_name["goodput.requests_per_s"].ratio);
  EXPECT_FALSE(by_name.count("tpot_ms.p50"));
  const std::string table = FormatComparison(*rows, "a.json", "b.json");
  EXPECT_NE(table.find("1.500"), std::string::npos);
  EXPECT_NE(table.find("B better"), std::string::npos);
  EXPECT_FALSE(CompareResults(json::object(), b).ok());
}

TEST(HtmlReportTest, IsSelfContainedWithPlots) {
  const auto records = TwoRequestsAndAFailure();
  const std::string html = RenderHtmlReport(ResultToJson(
      {{"workload", "shared-prefix"}, {"base_url", "http://x/<y>"}},
      SummarizeRun(records, 0.6, Slo{}, 16), records));
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_GE(std::count(html.begin(), html.end(), '\n'), 1);
  size_t svgs = 0;
  for (size_t p = html.find("<svg"); p != std::string::npos; p = html.find("<svg", p + 1)) ++svgs;
  EXPECT_GE(svgs, 7u);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_NE(html.find("http://x/&lt;y&gt;"), std::string::npos);
  EXPECT_NE(html.find("HTTP 503: busy"), std::string::npos);
}

TEST(SvgTest, NiceTicksAreRoundAndCoverTheRange) {
  EXPECT_EQ(svg::NiceTicks(0, 10), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  const auto t = svg::NiceTicks(3, 97);
  EXPECT_LE(t.front(), 3);
  EXPECT_GE(t.back(), 97);
  EXPECT_FALSE(svg::NiceTicks(5, 5).empty());
}

}  // namespace
}  // namespace kvserve::loadgen
