// Model: a decoder-only transformer of the llama family (llama, qwen2, qwen3) whose weights are
// read in place from a GGUF file, and its forward pass over a ForwardBatch and a paged KvStorage.
//
// Contract: Load() validates every tensor's presence, type and shape against the config and
// returns a clear error naming the first problem. The Model owns the GgufFile (weights point
// into its mapping). Forward() is called by one thread at a time (the engine thread); it uses
// the given ThreadPool for the heavy work and scratch buffers sized once at Load() for
// `max_batch_tokens`.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "gguf/gguf_file.h"
#include "kv/kv_storage.h"
#include "kvserve/status.h"
#include "model/forward_batch.h"
#include "model/model_config.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "ops/rope.h"
#include "util/aligned_buffer.h"
#include "util/thread_pool.h"

namespace kvserve {

// The attention kernel's view of one layer of a KV storage (arena bases, dtypes, strides).
PagedKvLayerView KvLayerView(const KvStorage& kv, int layer);

struct ModelOptions {
  int max_batch_tokens = 512;  // most tokens one Forward() may carry
  int max_context = 0;         // most KV slots one sequence may attend to (0 = model context)
};

class Model {
 public:
  static Result<std::unique_ptr<Model>> Load(GgufFile file, const ModelOptions& options);
  ~Model();

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return file_; }
  int max_batch_tokens() const { return options_.max_batch_tokens; }
  int max_context() const { return options_.max_context; }
  // The KV layout this model needs, for the given block size and dtypes.
  KvLayout MakeKvLayout(int block_size, KvDtype k_dtype, KvDtype v_dtype) const;
  // Bytes of the weights as stored.
  uint64_t weight_bytes() const { return weight_bytes_; }
  // Weight bytes one decode step reads: all of them, except that an embedding table not tied
  // to the output matrix is read one row per token.
  uint64_t decode_read_bytes() const {
    if (output_.data == token_embd_.data) return weight_bytes_;
    return weight_bytes_ - token_embd_.row_bytes * static_cast<uint64_t>(token_embd_.rows - 1);
  }

  // Runs the batch: writes the K/V of every new token into `kv` and fills
  // logits: [batch.logits_rows.size(), vocab].
  // Errors: InvalidArgument if the batch exceeds max_batch_tokens, a token id is out of range,
  // or a block table does not cover its slots.
  Status Forward(const ForwardBatch& batch, KvStorage& kv, ThreadPool& pool, float* logits);
  // Re-rotates the keys of every slot of `blocks` (all layers and KV heads) by `delta`
  // positions, as if they had been computed at their position + delta: each key is read back
  // as floats, rotated (Rope::Rotate: a pure rotation, no scaling factor applied again) and
  // stored in the cache's K type again (so quantized keys are quantized once more). Eviction
  // inside a sequence uses it on the slots that move down. REQUIRES: every slot of the blocks
  // holds a key.
  void ShiftKeys(KvStorage& kv, std::span<const BlockId> blocks, int32_t delta,
                 ThreadPool& pool) const;
  // Token-level eviction (h2o, snapkv): per layer and KV head, kept[layer * num_kv_heads + head]
  // lists the slots of `table` that stay, ascending; slot j then holds what was at kept[j], its
  // key re-rotated by j - kept[j] positions (as ShiftKeys does) and its value copied as stored.
  // Slots past the kept ones are left as they were (free for the next tokens).
  void CompactKv(KvStorage& kv, std::span<const BlockId> table,
                 std::span<const std::vector<int32_t>> kept, ThreadPool& pool) const;

 private:
  struct Layer;
  struct Scratch;
  Model(GgufFile file, ModelConfig config, ModelOptions options);
  Status LoadWeights();
  Status ValidateBatch(const ForwardBatch& batch, const KvStorage& kv) const;
  void Embed(const ForwardBatch& batch, ThreadPool& pool);
  void AttentionBlock(int layer, const ForwardBatch& batch, KvStorage& kv, ThreadPool& pool);
  void FeedForwardBlock(int layer, int num_tokens, ThreadPool& pool);
  void Attend(int layer, const ForwardBatch& batch, const KvStorage& kv, ThreadPool& pool);
  void ComputeLogits(const ForwardBatch& batch, ThreadPool& pool, float* logits);

  GgufFile file_;
  ModelConfig config_;
  ModelOptions options_;
  std::optional<Rope> rope_;
  WeightMatrix token_embd_;
  WeightMatrix output_;
  std::vector<float> output_norm_;
  std::vector<Layer> layers_;
  std::unique_ptr<Scratch> scratch_;
  uint64_t weight_bytes_ = 0;
};

}  // namespace kvserve
