// Model: a decoder-only transformer (llama, qwen2, qwen3, and with mixture-of-experts
// feed-forwards qwen3moe, Mixtral-style llama and deepseek2 with its latent attention) whose
// weights are read in place from a GGUF file, and its forward pass over a ForwardBatch and a
// paged KvStorage.
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
#include "util/page_buffer.h"
#include "util/thread_pool.h"

namespace kvserve {

// The attention kernel's view of one layer of a KV storage (arena bases, dtypes, strides).
PagedKvLayerView KvLayerView(const KvStorage& kv, int layer);

// How MLA (deepseek2) attends over its latent cache; the cache is the same either way.
//   absorbed: queries mapped into the latent space per head (W_kb), one shared 576-value key
//     and value per slot (the value is the latent itself, read from the key's bytes), outputs
//     mapped back per head (W_vb). Reads the cache once per step: the decode form.
//   decompressed: every visible slot's latent expanded into per-head keys and values (W_kb,
//     W_vb) each step, then ordinary multi-head attention; fewer attention flops per slot, but
//     the expansion costs a matmul over all cached slots.
// NOTE: one form per loaded model. The two round differently, and a token's K/V must not
// depend on which step computed it (cached blocks equal recomputed ones).
enum class MlaForm { kAbsorbed, kDecompressed };

struct ModelOptions {
  int max_batch_tokens = 512;  // most tokens one Forward() may carry
  int max_context = 0;         // most KV slots one sequence may attend to (0 = model context)
  MlaForm mla_form = MlaForm::kAbsorbed;
  // Repack the weights the matmul kernels take packed (ops PackWeights: Q8_0 on AVX-512
  // VNNI CPUs, Q4_0 and MXFP4 on AVX2 ones too) once at load; the file's pages of those matrices
  // are then given back, so they are resident once. Off: every matmul reads the file's layout.
  bool pack_weights = true;
};

// Mixture-of-experts counters since load (one per Forward): what the grouping of a batch's
// tokens by expert saves.
struct MoeStats {
  uint64_t steps = 0;
  uint64_t expert_bytes_read = 0;     // expert weights read (each chosen expert once per step)
  uint64_t expert_bytes_ungrouped = 0;  // what reading them once per token would have read
};

class Model {
 public:
  static Result<std::unique_ptr<Model>> Load(GgufFile file, const ModelOptions& options);
  ~Model();

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return file_; }
  int max_batch_tokens() const { return options_.max_batch_tokens; }
  int max_context() const { return options_.max_context; }
  const ModelOptions& options() const { return options_; }
  const MoeStats& moe_stats() const { return moe_stats_; }
  // Bytes of the routed experts' matrices (all experts of all layers; 0 for a dense model).
  uint64_t expert_weight_bytes() const { return expert_weight_bytes_; }
  // Weight elements one token multiplies by (its top-k experts only, the absorbed or the
  // decompressed MLA products, the output matrix; not the embedding row): FLOPs / 2.
  double active_params_per_token() const { return active_params_; }
  // Elements of the output (logits) matrix, which a prefill multiplies by its last token only.
  double output_params() const { return static_cast<double>(output_.rows) * output_.cols; }
  // The KV layout this model needs, for the given block size and dtypes.
  KvLayout MakeKvLayout(int block_size, KvDtype k_dtype, KvDtype v_dtype) const;
  // Bytes of the weights as stored.
  uint64_t weight_bytes() const { return weight_bytes_; }
  // Bytes of the repacked copies (ModelOptions::pack_weights; 0 when nothing was packed).
  uint64_t packed_weight_bytes() const { return packed_weight_bytes_; }
  // Gives back the file's pages of every packed matrix (the matmuls read the packed copy). Load
  // does it once; call it again after anything that reads the whole file (the weights digest),
  // which faults those pages back in.
  void ReleasePackedFilePages();
  // Weight bytes one decode step of one token reads: all of them, except that an embedding
  // table not tied to the output matrix is read one row per token, and of the routed experts
  // only the top-k of each layer (assuming experts of equal size).
  uint64_t decode_read_bytes() const {
    uint64_t b = weight_bytes_;
    if (output_.data != token_embd_.data) {
      b -= token_embd_.row_bytes * static_cast<uint64_t>(token_embd_.rows - 1);
    }
    if (expert_weight_bytes_ > 0) {
      b -= expert_weight_bytes_ - expert_weight_bytes_ / static_cast<uint64_t>(config_.moe.num_experts) *
                                      static_cast<uint64_t>(config_.moe.num_used);
    }
    return b;
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
  void PackMatrices();
  std::vector<WeightMatrix*> PackableMatrices();
  Status LoadAttention(int layer);
  Status LoadMlaAttention(int layer);
  Status LoadFeedForward(int layer);
  void AllocateScratch();
  void CountActiveParams();
  // Where a cached key's rotary part starts: 0, or after the latent for MLA.
  int KeyRopeOffset() const { return config_.is_mla() ? config_.mla.kv_lora_rank : 0; }
  Status ValidateBatch(const ForwardBatch& batch, const KvStorage& kv) const;
  Status ValidateWindowTable(const ForwardSeq& seq, const KvStorage& kv) const;
  void Embed(const ForwardBatch& batch, ThreadPool& pool);
  void AttentionBlock(int layer, const ForwardBatch& batch, KvStorage& kv, ThreadPool& pool);
  void MlaAttentionBlock(int layer, const ForwardBatch& batch, KvStorage& kv, ThreadPool& pool);
  void MlaDecompressedAttend(int layer, const ForwardBatch& batch, const KvStorage& kv,
                             ThreadPool& pool);
  // xn = RMSNorm(x) * weight for the batch's n rows of the residual stream.
  void NormRows(const std::vector<float>& weight, int n, ThreadPool& pool);
  // x += y for the batch's n rows, y first normalised by `post_norm` if it is not empty
  // (gemma's post-attention and post-feed-forward norms); y is overwritten.
  void AddToResidual(float* y, const std::vector<float>& post_norm, int n, ThreadPool& pool);
  const Rope& LayerRope(int layer) const {
    return rope_local_ && config_.LayerWindow(layer) > 0 ? *rope_local_ : *rope_;
  }
  void FeedForwardBlock(int layer, int num_tokens, ThreadPool& pool);
  void MoeFeedForward(int layer, int num_tokens, ThreadPool& pool);
  // Attention of every query row of the batch over the paged view: query heads of token t at
  // q + t * stride (num_kv_heads groups of `group` heads of view.head_dim), written likewise
  // to out.
  void Attend(int layer, const ForwardBatch& batch, const PagedKvLayerView& view, const float* q,
              float* out, int64_t stride, int group, float scale, ThreadPool& pool);
  void ComputeLogits(const ForwardBatch& batch, ThreadPool& pool, float* logits);

  GgufFile file_;
  ModelConfig config_;
  ModelOptions options_;
  std::optional<Rope> rope_;
  std::optional<Rope> rope_local_;  // sliding-window layers' rope when it differs (gemma3)
  WeightMatrix token_embd_;
  WeightMatrix output_;
  std::vector<float> output_norm_;
  std::vector<Layer> layers_;
  std::unique_ptr<Scratch> scratch_;
  uint64_t weight_bytes_ = 0;
  uint64_t expert_weight_bytes_ = 0;
  PageBuffer packed_;  // what packed WeightMatrix fields point into
  uint64_t packed_weight_bytes_ = 0;
  double active_params_ = 0;
  MoeStats moe_stats_;
};

}  // namespace kvserve
