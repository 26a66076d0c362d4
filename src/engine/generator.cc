#include "engine/generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "structured/constraint.h"
#include "util/check.h"

namespace kvserve {
namespace {

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Generator::Generator(std::unique_ptr<Model> model, KvStorage kv, int max_model_len,
                     int num_threads, int poll_us)
    : model_(std::move(model)),
      kv_(std::move(kv)),
      block_pool_(kv_.num_blocks()),
      pool_(std::make_unique<ThreadPool>(num_threads, PoolSpin(poll_us))),
      max_model_len_(max_model_len) {}

Result<std::unique_ptr<Generator>> Generator::Create(std::unique_ptr<Model> model,
                                                     const GeneratorConfig& config) {
  if (config.block_size <= 0 || config.block_size > 1024) {
    return InvalidArgument(fmt::format("block size {} must be in [1, 1024]", config.block_size));
  }
  const int ctx = model->max_context();
  int max_len = config.max_model_len > 0 ? config.max_model_len : ctx;
  if (max_len > ctx) {
    return InvalidArgument(fmt::format("max_model_len {} exceeds the model's context of {}",
                                       max_len, ctx));
  }
  KV_RETURN_IF_ERROR(CheckKvDtype(config.k_dtype, model->config().head_dim));
  KV_RETURN_IF_ERROR(CheckKvDtype(config.v_dtype, model->config().head_dim));
  const KvLayout layout = model->MakeKvLayout(config.block_size, config.k_dtype, config.v_dtype);
  int64_t num_blocks = config.num_blocks;
  if (num_blocks <= 0 && config.kv_cache_bytes > 0) {
    num_blocks = static_cast<int64_t>(config.kv_cache_bytes / layout.bytes_per_block());
  }
  if (num_blocks <= 0) num_blocks = (max_len + config.block_size - 1) / config.block_size;
  if (num_blocks <= 0 || num_blocks > (1 << 24)) {
    return InvalidArgument(fmt::format("KV cache of {} blocks is not usable", num_blocks));
  }
  int threads = config.num_threads > 0 ? config.num_threads : ThreadPool::DefaultThreads();
  KvStorage kv(layout, static_cast<int>(num_blocks));
  return std::unique_ptr<Generator>(
      new Generator(std::move(model), std::move(kv), max_len, threads, config.poll_us));
}

Status Generator::CheckPrompt(std::span<const TokenId> ids, int extra_tokens) const {
  if (ids.empty()) return InvalidArgument("the prompt is empty");
  const int vocab = model_->config().vocab;
  for (TokenId t : ids) {
    if (t < 0 || t >= vocab) {
      return InvalidArgument(fmt::format("token id {} is outside the vocabulary [0, {})", t, vocab));
    }
  }
  const int64_t total = static_cast<int64_t>(ids.size()) + extra_tokens;
  if (total > max_model_len_) {
    return OutOfRange(fmt::format(
        "prompt of {} tokens plus {} to generate exceeds the maximum model length of {}",
        ids.size(), extra_tokens, max_model_len_));
  }
  return Status::Ok();
}

Status Generator::Reserve(BlockTable& table, int num_tokens) {
  const int need = table.BlocksNeededFor(num_tokens);
  std::vector<BlockId> got;
  if (!block_pool_.AllocateN(need, &got)) {
    return ResourceExhausted(fmt::format("KV cache full: {} more blocks needed, {} free", need,
                                         block_pool_.num_free()));
  }
  for (BlockId b : got) table.Append(b);
  return Status::Ok();
}

void Generator::ReleaseAll(BlockTable& table) {
  for (BlockId b : table.TakeAll()) block_pool_.Release(b);
}

Status Generator::Step(BlockTable& table, std::span<const TokenId> ids, int begin, int end,
                       float* logits, bool all_logits) {
  KV_RETURN_IF_ERROR(Reserve(table, end));
  ForwardBatch batch;
  batch.AddSequence(table.blocks(), begin, ids.subspan(begin, end - begin), !all_logits);
  if (all_logits) {
    for (int i = 0; i < end - begin; ++i) batch.logits_rows.push_back(i);
  }
  return model_->Forward(batch, kv_, *pool_, logits);
}

Result<std::vector<float>> Generator::PromptLogits(std::span<const TokenId> ids, int chunk) {
  KV_RETURN_IF_ERROR(CheckPrompt(ids, 0));
  const int vocab = model_->config().vocab;
  const int step = chunk > 0 ? std::min(chunk, model_->max_batch_tokens())
                             : model_->max_batch_tokens();
  std::vector<float> out(ids.size() * static_cast<size_t>(vocab));
  BlockTable table(kv_.layout().block_size);
  Status st;
  for (int b = 0; b < static_cast<int>(ids.size()) && st.ok(); b += step) {
    const int e = std::min<int>(b + step, static_cast<int>(ids.size()));
    st = Step(table, ids, b, e, out.data() + static_cast<size_t>(b) * vocab, true);
  }
  ReleaseAll(table);
  if (!st.ok()) return st;
  return out;
}

Result<GenerateResult> Generator::Generate(const GenerateRequest& req,
                                           const TokenCallback& on_token) {
  if (req.max_tokens < 0) return InvalidArgument("max_tokens must be >= 0");
  KV_RETURN_IF_ERROR(CheckPrompt(req.prompt, req.max_tokens));
  KV_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(req.sampling, model_->config().vocab));
  sampler.SetPrompt(req.prompt);
  if (req.constraint) {
    sampler.AddProcessorFirst(std::make_unique<structured::ConstraintProcessor>(req.constraint));
  }

  GenerateResult result;
  result.prompt_tokens = static_cast<int>(req.prompt.size());
  std::vector<TokenId> seq(req.prompt);
  seq.reserve(req.prompt.size() + req.max_tokens);
  std::vector<float> logits(model_->config().vocab);
  BlockTable table(kv_.layout().block_size);
  const auto t0 = std::chrono::steady_clock::now();
  auto t_first = t0;
  Status st;
  // Prefill in chunks; the last chunk yields the logits of the last prompt token.
  const int n = static_cast<int>(seq.size());
  for (int b = 0; b < n && st.ok(); b += model_->max_batch_tokens()) {
    st = Step(table, seq, b, std::min(n, b + model_->max_batch_tokens()), logits.data(), false);
  }
  SampleOutput sample;
  for (int i = 0; st.ok() && i < req.max_tokens; ++i) {
    if (i == 0) t_first = std::chrono::steady_clock::now();
    sampler.Sample(logits, &sample);
    sampler.Accept(sample.token);
    result.ids.push_back(sample.token);
    if (req.sampling.wants_logprobs()) result.samples.push_back(sample);
    if (on_token && !on_token(sample.token, sample)) {
      result.finish_reason = FinishReason::kCancelled;
      break;
    }
    if (std::find(req.stop_ids.begin(), req.stop_ids.end(), sample.token) != req.stop_ids.end()) {
      result.finish_reason = FinishReason::kStop;
      break;
    }
    if (i + 1 == req.max_tokens) break;  // the last token needs no forward pass
    seq.push_back(sample.token);
    const int len = static_cast<int>(seq.size());
    st = Step(table, seq, len - 1, len, logits.data(), false);
  }
  const auto t_end = std::chrono::steady_clock::now();
  ReleaseAll(table);
  if (!st.ok()) return st;
  result.prefill_seconds = Seconds(t0, t_first);
  result.decode_seconds = Seconds(t_first, t_end);
  return result;
}

}  // namespace kvserve
