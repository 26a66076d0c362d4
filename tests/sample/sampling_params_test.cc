#include "sample/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace kvserve {
namespace {

void ExpectRejected(const SamplingParams& p, const std::string& field) {
  Status s = p.Validate();
  ASSERT_FALSE(s.ok()) << field;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
}

TEST(SamplingParams, DefaultsAreValid) { EXPECT_TRUE(SamplingParams{}.Validate().ok()); }

TEST(SamplingParams, AcceptsBoundaryValues) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.frequency_penalty = -2.0f;
  p.presence_penalty = 2.0f;
  p.penalty_last_n = -1;
  p.top_logprobs = 20;
  EXPECT_TRUE(p.Validate().ok());
}

TEST(SamplingParams, RejectsOutOfRangeValuesNamingTheField) {
  SamplingParams p;
  p.temperature = -0.1f;
  ExpectRejected(p, "temperature");
  p = {};
  p.temperature = NAN;
  ExpectRejected(p, "temperature");
  p = {};
  p.top_k = -1;
  ExpectRejected(p, "top_k");
  p = {};
  p.top_p = 0.0f;
  ExpectRejected(p, "top_p");
  p.top_p = 1.5f;
  ExpectRejected(p, "top_p");
  p = {};
  p.min_p = -0.01f;
  ExpectRejected(p, "min_p");
  p.min_p = 1.01f;
  ExpectRejected(p, "min_p");
  p = {};
  p.repetition_penalty = 0.0f;
  ExpectRejected(p, "repetition_penalty");
  p = {};
  p.frequency_penalty = 2.5f;
  ExpectRejected(p, "frequency_penalty");
  p = {};
  p.presence_penalty = -2.5f;
  ExpectRejected(p, "presence_penalty");
  p = {};
  p.penalty_last_n = -2;
  ExpectRejected(p, "penalty_last_n");
  p = {};
  p.top_logprobs = 21;
  ExpectRejected(p, "top_logprobs");
  p.top_logprobs = -1;
  ExpectRejected(p, "top_logprobs");
}

}  // namespace
}  // namespace kvserve
