// Prometheus exposition as a specification: family headers once, labels, cumulative buckets.
#include "server/metrics.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(Metrics, HistogramBucketsAreCumulativeWithSumAndCount) {
  Histogram h({0.1, 1.0});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(0.5);
  h.Observe(7);
  PrometheusWriter w("model_name=\"m\"");
  w.Histo("x_seconds", "help", h);
  const std::string t = w.Take();
  EXPECT_TRUE(Has(t, "# TYPE x_seconds histogram"));
  EXPECT_TRUE(Has(t, "x_seconds_bucket{model_name=\"m\",le=\"0.1\"} 1"));
  EXPECT_TRUE(Has(t, "x_seconds_bucket{model_name=\"m\",le=\"1\"} 3"));
  EXPECT_TRUE(Has(t, "x_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 4"));
  EXPECT_TRUE(Has(t, "x_seconds_sum{model_name=\"m\"} 8.05"));
  EXPECT_TRUE(Has(t, "x_seconds_count{model_name=\"m\"} 4"));
}

TEST(Metrics, RendersVllmNamesFromEngineStats) {
  ServerMetrics m;
  m.RecordFinished(FinishReason::kStop, 12, 0.5);
  m.RecordFinished(FinishReason::kCancelled, 3, 0.1);
  m.generation_tokens += 9;
  EngineStats s;
  s.kv.num_blocks = 10;
  s.kv.num_in_use = 4;
  s.kv.num_free = 5;
  s.kv.num_cached = 1;
  s.kv.query_tokens = 100;
  s.kv.hit_tokens = 64;
  s.num_running = 2;
  s.num_waiting = 3;
  s.num_preemptions = 1;
  const std::string t = m.Render(s, "my \"model\"");
  const std::string l = "{model_name=\"my \\\"model\\\"\"";
  EXPECT_TRUE(Has(t, "kvserve:kv_cache_usage_perc" + l + "} 0.4"));
  EXPECT_TRUE(Has(t, "kvserve:kv_cache_blocks" + l + ",state=\"free\"} 5"));
  EXPECT_TRUE(Has(t, "kvserve:kv_cache_blocks" + l + ",state=\"in_use\"} 4"));
  EXPECT_TRUE(Has(t, "kvserve:prefix_cache_queries_total" + l + "} 100"));
  EXPECT_TRUE(Has(t, "kvserve:prefix_cache_hits_total" + l + "} 64"));
  EXPECT_TRUE(Has(t, "kvserve:num_requests_running" + l + "} 2"));
  EXPECT_TRUE(Has(t, "kvserve:num_requests_waiting" + l + "} 3"));
  EXPECT_TRUE(Has(t, "kvserve:num_preemptions_total" + l + "} 1"));
  EXPECT_TRUE(Has(t, "kvserve:prompt_tokens_total" + l + "} 15"));
  EXPECT_TRUE(Has(t, "kvserve:generation_tokens_total" + l + "} 9"));
  EXPECT_TRUE(Has(t, "kvserve:request_success_total" + l + ",finished_reason=\"stop\"} 1"));
  EXPECT_TRUE(Has(t, "kvserve:request_success_total" + l + ",finished_reason=\"abort\"} 1"));
  EXPECT_TRUE(Has(t, "kvserve:e2e_request_latency_seconds_count" + l + "} 2"));
  // One HELP/TYPE per family even with several series.
  size_t types = 0;
  for (size_t at = 0; (at = t.find("# TYPE kvserve:kv_cache_blocks gauge", at)) != std::string::npos; ++at) {
    ++types;
  }
  EXPECT_EQ(types, 1u);
}

}  // namespace
}  // namespace kvserve
