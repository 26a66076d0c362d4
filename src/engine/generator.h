// Generator: runs requests against one Model over a paged KV cache (KvStorage + BlockPool).
//
// This is the engine's single-caller core: Generate() prefills the prompt in chunks of at most
// max_batch_tokens, then decodes one token per step, allocating KV blocks as the sequence grows
// and releasing every block when the request ends, successfully or not. The scheduler with
// continuous batching builds on the same pieces (ForwardBatch, BlockPool, block tables).
//
// Thread safety: one caller at a time.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "engine/request.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/kv_storage.h"
#include "kvserve/status.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "structured/token_masker.h"
#include "util/thread_pool.h"

namespace kvserve {

struct GeneratorConfig {
  int num_threads = 0;          // 0 = one per hardware thread
  int poll_us = -1;             // compute threads' spin before sleeping; -1 = the pool's default
  int block_size = 16;          // tokens per KV block
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
  int max_model_len = 0;        // 0 = the model's context length
  int num_blocks = 0;           // 0 = derived from kv_cache_bytes, else enough for max_model_len
  uint64_t kv_cache_bytes = 0;  // budget for KV memory; 0 = not set
};

struct GenerateRequest {
  std::vector<TokenId> prompt;
  SamplingParams sampling;
  int max_tokens = 128;
  std::vector<TokenId> stop_ids;  // generation ends after emitting one of these (e.g. EOG ids)
  std::shared_ptr<structured::TokenMasker> constraint;  // structured output; null = none
};

// FinishReason and FinishReasonName live in engine/request.h (shared with the Engine).
struct GenerateResult {
  std::vector<TokenId> ids;            // generated tokens (a stop token included)
  std::vector<SampleOutput> samples;   // per generated token, when logprobs were asked
  FinishReason finish_reason = FinishReason::kLength;
  double prefill_seconds = 0;
  double decode_seconds = 0;           // from the first generated token to the last
  int prompt_tokens = 0;
};

class Generator {
 public:
  // Called with each generated token; return false to stop (finish reason kCancelled).
  using TokenCallback = std::function<bool(TokenId, const SampleOutput&)>;

  static Result<std::unique_ptr<Generator>> Create(std::unique_ptr<Model> model,
                                                   const GeneratorConfig& config);

  Result<GenerateResult> Generate(const GenerateRequest& request, const TokenCallback& on_token);
  // Logits of every prompt position: [ids.size(), vocab], feeding `chunk` tokens per step
  // (0 = as many as a batch holds).
  Result<std::vector<float>> PromptLogits(std::span<const TokenId> ids, int chunk);

  const Model& model() const { return *model_; }
  const BlockPool& block_pool() const { return block_pool_; }
  const KvStorage& kv_storage() const { return kv_; }
  int max_model_len() const { return max_model_len_; }
  int num_threads() const { return pool_->num_threads(); }
  int64_t poll_us() const { return pool_->spin().count(); }

 private:
  Generator(std::unique_ptr<Model> model, KvStorage kv, int max_model_len, int num_threads,
            int poll_us);
  Status CheckPrompt(std::span<const TokenId> ids, int extra_tokens) const;
  // Makes the table cover num_tokens slots. ResourceExhausted when the pool runs dry.
  Status Reserve(BlockTable& table, int num_tokens);
  void ReleaseAll(BlockTable& table);
  // Runs tokens [begin, end) of `ids` (slots begin..end-1); logits of the last one if wanted.
  Status Step(BlockTable& table, std::span<const TokenId> ids, int begin, int end, float* logits,
              bool all_logits);

  std::unique_ptr<Model> model_;
  KvStorage kv_;
  BlockPool block_pool_;
  std::unique_ptr<ThreadPool> pool_;
  int max_model_len_;
  std::vector<float> logits_;  // [max_batch_tokens, vocab] when all rows are wanted
};

}  // namespace kvserve
