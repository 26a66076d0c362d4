// EngineCore: from logits rows to output events (engine_core.h). Sampling, forking n > 1
// samples over the shared prompt, streaming text with stop strings held back, and finishing a
// sample, which releases its blocks and fills its metrics. Engine thread only.
#include "engine/engine_core.h"

#include <algorithm>
#include <cstring>

#include "structured/constraint.h"
#include "util/check.h"

namespace kvserve {

Result<EngineCore::SeqCtx> EngineCore::MakeSeq(RequestId id, const EngineRequest& r,
                                               int index) const {
  SamplingParams params = r.sampling;
  if (params.has_seed) params.seed += static_cast<uint64_t>(index);  // distinct streams
  KV_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(params, model_->config().vocab));
  sampler.SetPrompt(r.prompt);
  structured::ConstraintProcessor* constraint = nullptr;
  if (r.constraint) {
    auto p = std::make_unique<structured::ConstraintProcessor>(r.constraint);
    constraint = p.get();
    sampler.AddProcessorFirst(std::move(p));
  }
  SeqCtx s{id, index, std::move(sampler), nullptr, 0};
  s.constraint = constraint;
  if (tokenizer_) s.detok = std::make_unique<StreamingDetokenizer>(*tokenizer_);
  return s;
}

bool EngineCore::TakeText(SeqCtx& s, const EngineRequest& r, std::string text, bool final,
                          std::string* emit) const {
  if (r.stop_strings.empty()) {
    *emit += text;
    return false;
  }
  std::string pending = std::move(s.held);
  s.held.clear();
  pending += text;
  // The earliest stop string in the pending text ends the sample (held text never contains a
  // whole stop string, so nothing streamed earlier can be part of one).
  size_t best = std::string::npos;
  size_t best_len = 0;
  for (size_t i = 0; i < r.stop_strings.size(); ++i) {
    const size_t at = pending.find(r.stop_strings[i]);
    if (at < best) {
      best = at;
      best_len = r.stop_strings[i].size();
      s.stop_string = static_cast<int>(i);
    }
  }
  if (best != std::string::npos) {
    s.text_done = true;
    pending.resize(best + (r.include_stop_str_in_output ? best_len : 0));
    *emit += pending;
    return true;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  if (!final) {
    for (const std::string& stop : r.stop_strings) {
      for (size_t k = std::min(stop.size() - 1, pending.size()); k > hold; --k) {
        if (pending.compare(pending.size() - k, k, stop, 0, k) == 0) {
          hold = k;
          break;
        }
      }
    }
  }
  s.held = pending.substr(pending.size() - hold);
  pending.resize(pending.size() - hold);
  *emit += pending;
  return false;
}

void EngineCore::FinishSeq(SeqId seq, FinishReason reason, Status error,
                           std::vector<RequestOutput>* out, RequestOutput* event) {
  SeqCtx& s = seqs_.at(seq);
  RequestCtx& r = requests_.at(s.request);
  RequestOutput own;
  RequestOutput& e = event ? *event : own;
  e.id = s.request;
  e.index = s.index;
  if (s.detok && !s.text_done) {
    std::string emit;
    if (TakeText(s, r.request, s.detok->Flush(), /*final=*/true, &emit) &&
        reason == FinishReason::kLength) {
      reason = FinishReason::kStop;
    }
    e.text += emit;
  }
  e.finished = true;
  e.finish_reason = reason;
  e.stop_string = s.stop_string;
  e.error = std::move(error);
  const bool scheduled = scheduler_->Contains(seq);
  e.metrics.prompt_tokens = static_cast<int>(r.request.prompt.size());
  e.metrics.cached_tokens = scheduled ? scheduler_->num_cached_tokens(seq) : 0;
  e.metrics.computed_tokens = scheduled ? scheduler_->num_computed_total(seq) : 0;
  e.metrics.generated_tokens = s.num_generated;
  e.metrics.queue_seconds = r.queue_seconds;
  e.metrics.ttft_seconds = r.ttft_seconds;
  e.metrics.e2e_seconds = Seconds(r.arrival, Clock::now());
  e.metrics.draft_tokens = s.draft_tokens;
  e.metrics.accepted_tokens = s.accepted_tokens;
  e.metrics.evicted_tokens = s.evicted_tokens;
  FillTierMetrics(r, e.metrics.cached_tokens, &e.metrics);
  if (draft_) draft_->Release(seq);
  if (scheduled) {
    scheduler_->Remove(seq);
  } else if (r.phase == Phase::kTierLoad) {  // left while its blocks load: let the holder go
    TierLoading& l = tier_loads_.at(r.load_id);
    kv_manager_->EndSequence(l.holder);
    l.request = RequestId();
  }  // kTierWait: FinishTierLoads skips requests that are gone
  seqs_.erase(seq);
  r.seqs.erase(std::find(r.seqs.begin(), r.seqs.end(), seq));
  // Before the first sampling a request has one sequence even when n > 1: it ends whole.
  e.request_finished = r.seqs.empty();
  if (e.request_finished && !r.request.holds.empty()) ApplyHolds(r.request, &e.metrics);
  if (e.request_finished) requests_.erase(e.id);
  if (!event) out->push_back(std::move(own));
}

void EngineCore::SampleFromRow(SeqId seq, float* row, std::vector<RequestOutput>* out) {
  const size_t vocab = static_cast<size_t>(model_->config().vocab);
  RequestCtx& r = requests_.at(seqs_.at(seq).request);
  if (r.request.n > 1 && !r.forked) {
    r.forked = true;
    ForkSamples(seq, row, out);
  }
  SampleOne(seq, std::span<float>(row, vocab), out);
}

void EngineCore::ForkSamples(SeqId parent, const float* row, std::vector<RequestOutput>* out) {
  const size_t vocab = static_cast<size_t>(model_->config().vocab);
  const RequestId id = seqs_.at(parent).request;
  for (int i = 1; i < requests_.at(id).request.n; ++i) {
    auto seq = MakeSeq(id, requests_.at(id).request, i);
    KV_CHECK(seq.ok(), "sampler for a validated request: {}", seq.status().ToString());
    const SeqId child = NewSeqId();
    const std::optional<BlockCopy> copy = scheduler_->Fork(parent, child);
    if (copy) kv_.CopyBlock(copy->src, copy->dst);
    seq->scores = seqs_.at(parent).scores;  // h2o / snapkv: what the shared prompt scored
    seqs_.emplace(child, std::move(seq).value());
    requests_.at(id).seqs.push_back(child);
    std::memcpy(scratch_.data(), row, vocab * sizeof(float));
    SampleOne(child, scratch_, out);
  }
}

Emitted EngineCore::SampleOne(SeqId seq, std::span<float> logits,
                               std::vector<RequestOutput>* out) {
  SampleOutput sample;
  seqs_.at(seq).sampler.Sample(logits, &sample);
  return EmitToken(seq, std::move(sample), out);
}

Emitted EngineCore::EmitToken(SeqId seq, SampleOutput sample, std::vector<RequestOutput>* out) {
  SeqCtx& s = seqs_.at(seq);
  RequestCtx& r = requests_.at(s.request);
  const TokenId token = sample.token;
  s.sampler.Accept(token);
  scheduler_->AppendToken(seq, token);
  ++s.num_generated;
  if (!r.got_first_token) {
    r.got_first_token = true;
    r.ttft_seconds = Seconds(r.arrival, Clock::now());
  }
  RequestOutput e;
  e.id = s.request;
  e.index = s.index;
  e.new_tokens.push_back(token);
  if (r.request.sampling.wants_logprobs()) e.logprobs.push_back(std::move(sample));
  bool stop_string = false;
  if (s.detok) stop_string = TakeText(s, r.request, s.detok->Push(token), false, &e.text);
  const auto& stops = r.request.stop_ids;
  const bool stop = stop_string || std::find(stops.begin(), stops.end(), token) != stops.end() ||
                    (!r.request.ignore_eos && tokenizer_ && tokenizer_->IsEog(token));
  const bool finished = stop || s.num_generated >= r.request.max_tokens;
  if (finished) {
    FinishSeq(seq, stop ? FinishReason::kStop : FinishReason::kLength, Status::Ok(), out, &e);
  } else if (s.num_generated == 1) {
    // A sample's first token also says what its prompt found cached, so a stream's first
    // event can report it (Anthropic's message_start carries the cache usage).
    e.metrics.cached_tokens = scheduler_->num_cached_tokens(seq);
    FillTierMetrics(r, e.metrics.cached_tokens, &e.metrics);
  }
  out->push_back(std::move(e));
  return Emitted{token, finished};
}

}  // namespace kvserve
