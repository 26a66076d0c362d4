#include "sample/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/check.h"

namespace kvserve {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// NaN -> -inf; +inf -> largest finite float.
void Sanitize(std::span<float> logits) {
  for (float& x : logits) {
    if (std::isnan(x)) {
      x = kNegInf;
    } else if (x == std::numeric_limits<float>::infinity()) {
      x = std::numeric_limits<float>::max();
    }
  }
}

uint64_t OsSeed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ static_cast<uint64_t>(device());
}

}  // namespace

double LogSumExp(std::span<const float> logits) {
  KV_CHECK(!logits.empty());
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  if (max_logit == kNegInf) return -std::numeric_limits<double>::infinity();
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max_logit);
  return static_cast<double>(max_logit) + std::log(sum);
}

TokenId Argmax(std::span<const float> logits) {
  KV_CHECK(!logits.empty());
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<TokenId>(best);
}

Result<Sampler> Sampler::Create(const SamplingParams& params, int vocab_size) {
  KV_RETURN_IF_ERROR(params.Validate());
  if (vocab_size <= 0) {
    return InvalidArgument(fmt::format("sampler vocab_size must be > 0, got {}", vocab_size));
  }
  return Sampler(params, vocab_size, params.has_seed ? params.seed : OsSeed());
}

Sampler::Sampler(const SamplingParams& params, int vocab_size, uint64_t seed)
    : params_(params), history_(vocab_size), rng_(seed) {
  if (params.repetition_penalty != 1.0f && params.penalty_last_n != 0) {
    chain_.push_back(std::make_unique<RepetitionPenaltyProcessor>(params.repetition_penalty,
                                                                  params.penalty_last_n));
  }
  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    chain_.push_back(std::make_unique<FrequencyPresencePenaltyProcessor>(params.frequency_penalty,
                                                                         params.presence_penalty));
  }
  if (!params.greedy() && params.temperature != 1.0f) {
    chain_.push_back(std::make_unique<TemperatureProcessor>(params.temperature));
  }
  if (!params.greedy()) candidates_.resize(static_cast<size_t>(vocab_size));
  if (params.wants_logprobs()) raw_logits_.resize(static_cast<size_t>(vocab_size));
}

void Sampler::SetPrompt(std::span<const TokenId> prompt) { history_.SetPrompt(prompt); }

void Sampler::Accept(TokenId token) { history_.Append(token); }

void Sampler::AddProcessor(std::unique_ptr<LogitsProcessor> processor) {
  KV_CHECK(processor != nullptr);
  chain_.push_back(std::move(processor));
}

void Sampler::AddProcessorFirst(std::unique_ptr<LogitsProcessor> processor) {
  KV_CHECK(processor != nullptr);
  chain_.insert(chain_.begin(), std::move(processor));
}

SampleOutput Sampler::Sample(std::span<float> logits) {
  SampleOutput out;
  Sample(logits, &out);
  return out;
}

void Sampler::Sample(std::span<float> logits, SampleOutput* out) {
  KV_CHECK_EQ(logits.size(), static_cast<size_t>(vocab_size()));
  Sanitize(logits);
  if (params_.wants_logprobs()) std::copy(logits.begin(), logits.end(), raw_logits_.begin());
  for (const auto& processor : chain_) processor->Process(logits, history_);
  Sanitize(logits);
  out->token = params_.greedy() ? Argmax(logits) : SampleRandom(logits);
  out->logprob = 0.0f;
  out->top.clear();
  if (params_.wants_logprobs()) FillLogprobs(out->token, out);
}

TokenId Sampler::SampleRandom(std::span<const float> logits) {
  size_t n = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > kNegInf) candidates_[n++] = {static_cast<TokenId>(i), logits[i]};
  }
  if (n == 0) return Argmax(logits);  // everything masked: deterministic token 0
  return Draw(Truncate(n));
}

size_t Sampler::Truncate(size_t num_candidates) {
  std::span<Candidate> c(candidates_.data(), num_candidates);
  bool sorted = false;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < c.size()) {
    c = c.first(TopK(c, params_.top_k));
    sorted = true;
  }
  if (params_.top_p < 1.0f) {
    if (!sorted) SortDescending(c);
    c = c.first(TopP(c, params_.top_p));
  }
  if (params_.min_p > 0.0f) c = c.first(MinP(c, params_.min_p));
  return c.size();
}

TokenId Sampler::Draw(size_t num_candidates) {
  std::span<const Candidate> c(candidates_.data(), num_candidates);
  float max_logit = c[0].logit;
  for (const Candidate& x : c) max_logit = std::max(max_logit, x.logit);
  double total = 0.0;
  for (const Candidate& x : c) total += std::exp(static_cast<double>(x.logit) - max_logit);
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  const double target = u * total;
  double running = 0.0;
  for (const Candidate& x : c) {
    running += std::exp(static_cast<double>(x.logit) - max_logit);
    if (running > target) return x.id;
  }
  // Rounding kept the running sum <= target: take the last candidate with weight.
  for (size_t i = c.size(); i-- > 0;) {
    if (std::exp(static_cast<double>(c[i].logit) - max_logit) > 0.0) return c[i].id;
  }
  return c[0].id;
}

void Sampler::FillLogprobs(TokenId token, SampleOutput* out) const {
  const std::span<const float> raw(raw_logits_);
  const double log_sum = LogSumExp(raw);
  auto logprob = [&](TokenId id) {
    const float x = raw[static_cast<size_t>(id)];
    if (x == kNegInf || log_sum == -std::numeric_limits<double>::infinity()) return kNegInf;
    return static_cast<float>(static_cast<double>(x) - log_sum);
  };
  out->logprob = logprob(token);
  // Top N by insertion into a small sorted list: most tokens fail the first comparison.
  const size_t want = std::min(static_cast<size_t>(params_.top_logprobs), raw.size());
  out->top.reserve(want);  // allocates only on the first step with a fresh SampleOutput
  for (size_t i = 0; i < raw.size(); ++i) {
    const Candidate c{static_cast<TokenId>(i), raw[i]};
    if (out->top.size() == want) {
      if (want == 0) break;
      const TokenLogprob& last = out->top.back();
      if (!Before(c, Candidate{last.id, raw[static_cast<size_t>(last.id)]})) continue;
      out->top.pop_back();
    }
    auto pos = std::find_if(out->top.begin(), out->top.end(), [&](const TokenLogprob& t) {
      return Before(c, Candidate{t.id, raw[static_cast<size_t>(t.id)]});
    });
    out->top.insert(pos, TokenLogprob{c.id, 0.0f});
  }
  for (TokenLogprob& t : out->top) t.logprob = logprob(t.id);
}

}  // namespace kvserve
