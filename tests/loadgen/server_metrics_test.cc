#include "loadgen/server_metrics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvserve::loadgen {
namespace {

TEST(PrometheusText, ParsesNamesLabelsAndSpecialValues) {
  const auto samples = ParsePrometheusText(
      "# HELP x_total A counter.\n"
      "# TYPE x_total counter\n"
      "x_total 3\n"
      "h_bucket{model_name=\"a \\\"b\\\", c\",le=\"+Inf\"} 7 1700000000000\r\n"
      "\n"
      "  broken{le=\"1\" 5\n"
      "not_a_number{} abc\n"
      "kvserve:y 1.5e-3\n");
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].name, "x_total");
  EXPECT_EQ(samples[0].value, 3);
  EXPECT_EQ(samples[1].name, "h_bucket");
  EXPECT_EQ(samples[1].labels.at("model_name"), "a \"b\", c");
  EXPECT_EQ(samples[1].labels.at("le"), "+Inf");
  EXPECT_EQ(samples[1].value, 7);
  EXPECT_EQ(samples[2].name, "kvserve:y");
  EXPECT_DOUBLE_EQ(samples[2].value, 1.5e-3);
}

TEST(PrometheusText, HistogramsSumOverLabelSetsAndSubtract) {
  const auto before = ParsePrometheusText(
      "t_bucket{m=\"a\",le=\"0.1\"} 1\n"
      "t_bucket{m=\"a\",le=\"0.5\"} 1\n"
      "t_bucket{m=\"a\",le=\"+Inf\"} 2\n"
      "t_sum{m=\"a\"} 1.0\n"
      "t_count{m=\"a\"} 2\n");
  const auto after = ParsePrometheusText(
      "t_bucket{m=\"a\",le=\"0.1\"} 2\n"
      "t_bucket{m=\"a\",le=\"0.5\"} 4\n"
      "t_bucket{m=\"a\",le=\"+Inf\"} 6\n"
      "t_bucket{m=\"b\",le=\"0.1\"} 1\n"
      "t_bucket{m=\"b\",le=\"0.5\"} 3\n"
      "t_bucket{m=\"b\",le=\"+Inf\"} 4\n"
      "t_sum{m=\"a\"} 3.0\n"
      "t_sum{m=\"b\"} 1.0\n"
      "t_count{m=\"a\"} 6\n"
      "t_count{m=\"b\"} 4\n");
  EXPECT_FALSE(FindHistogram(after, "missing").has_value());
  const auto a = FindHistogram(after, "t");
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(a->buckets.size(), 3u);
  EXPECT_EQ(a->buckets[0], (std::pair<double, double>{0.1, 3}));
  EXPECT_EQ(a->buckets[1], (std::pair<double, double>{0.5, 7}));
  EXPECT_TRUE(std::isinf(a->buckets[2].first));
  EXPECT_EQ(a->count, 10);
  const Histogram d = Subtract(*a, FindHistogram(before, "t"));
  EXPECT_EQ(d.count, 8);
  EXPECT_DOUBLE_EQ(d.sum, 3.0);
  EXPECT_EQ(d.buckets[0].second, 2);
  EXPECT_EQ(d.buckets[1].second, 6);
  EXPECT_EQ(d.buckets[2].second, 8);
  // histogram_quantile: rank 4 of 8 lies in (0.1, 0.5] holding ranks 2..6 -> 0.1 + 0.4 * 2/4.
  EXPECT_NEAR(HistogramQuantile(d, 0.5), 0.3, 1e-12);
  // Rank 1 lies in the first bucket, which starts at 0.
  EXPECT_NEAR(HistogramQuantile(d, 0.125), 0.05, 1e-12);
  // Rank 7.6 falls in +Inf: the highest finite bound.
  EXPECT_DOUBLE_EQ(HistogramQuantile(d, 0.95), 0.5);
  EXPECT_EQ(HistogramQuantile(Histogram{}, 0.5), 0);
}

TEST(PrometheusText, ServerLatencyFromKvserveOrVllmNames) {
  const auto none = ParsePrometheusText("llamacpp:prompt_tokens_total 5\n");
  EXPECT_FALSE(ServerLatencyBetween({}, none).has_value());
  const std::string vllm =
      "vllm:request_queue_time_seconds_bucket{le=\"0.01\"} 4\n"
      "vllm:request_queue_time_seconds_bucket{le=\"+Inf\"} 4\n"
      "vllm:request_queue_time_seconds_sum 0.02\n"
      "vllm:request_queue_time_seconds_count 4\n";
  const auto latency = ServerLatencyBetween({}, ParsePrometheusText(vllm));
  ASSERT_TRUE(latency.has_value());
  EXPECT_EQ(latency->prefix, "vllm");
  ASSERT_EQ(latency->phases.size(), 1u);
  EXPECT_EQ(latency->phases[0].name, "queue");
  EXPECT_EQ(latency->phases[0].count, 4);
  EXPECT_NEAR(latency->phases[0].mean_ms, 5.0, 1e-9);
  EXPECT_NEAR(latency->phases[0].p50_ms, 5.0, 1e-9);
  // Nothing new between two equal scrapes: counts 0, times 0.
  const auto same = ServerLatencyBetween(ParsePrometheusText(vllm), ParsePrometheusText(vllm));
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ(same->phases[0].count, 0);
  EXPECT_EQ(same->phases[0].mean_ms, 0);
}

}  // namespace
}  // namespace kvserve::loadgen
