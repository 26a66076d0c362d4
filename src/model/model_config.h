// ModelConfig: everything the forward pass needs to know about a model, read from GGUF metadata
// through a per-architecture table (no string if-chains in the forward pass).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_file.h"
#include "kvserve/status.h"
#include "ops/rope.h"

namespace kvserve {

// SwiGLU; GeGLU with tanh-approximate GELU (gemma); gpt-oss's clamped SwiGLU:
// min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1).
enum class FfnActivation { kSilu, kGeluTanh, kSwigluOai };

// What distinguishes the supported architectures. One row per GGUF `general.architecture`.
struct ArchSpec {
  std::string_view name;                             // as in general.architecture
  RopeStyle rope_style = RopeStyle::kAdjacentPairs;  // or halves (qwen2, qwen3, gemma)
  bool has_qkv_bias = false;                         // qwen2: attn_q/k/v.bias
  bool has_qk_norm = false;      // qwen3, gemma3: per-head RMSNorm of Q and K before RoPE
  bool mla = false;              // deepseek2: multi-head latent attention (MlaConfig)
  bool moe_weights_norm = true;  // the router's top-k weights are renormalised unless
                                 // the file says otherwise
  // Gemma: the embedding scaled by sqrt(hidden), RMSNorms after attention and after the
  // feed-forward (post_attention_norm, post_ffw_norm) before each joins the residual stream,
  // and the logit soft-caps read from the file.
  bool gemma = false;
  FfnActivation ffn_act = FfnActivation::kSilu;
  // Sliding-window layers: with a window, layer il is local iff il % P < P - 1 for this period
  // P (gemma2: 2, every other layer from 0; gemma3: 6, five local then one global); 0: every
  // layer (llama files with attention.sliding_window, Mistral v0.1).
  int swa_period = 0;
  int default_window = 0;     // the window when the file has no attention.sliding_window
  float local_rope_base = 0;  // local layers' rope base without rope.freq_base_swa (0: global's)
  // The 27B models' query scale is 1/sqrt(hidden / heads) rather than 1/sqrt(head_dim)
  // (query_pre_attn_scalar, which the files do not carry): their layer count (0: none).
  int hidden_scale_layers = 0;
  // Gemma: the soft-caps when the file has no attn_logit_softcapping / final_logit_softcapping
  // (gemma2: 50 and 30, as llama.cpp assumes; 0: none).
  float default_attn_softcap = 0.f;
  float default_final_softcap = 0.f;
  // phi3: a file without attention.sliding_window takes llama.cpp's defaults for the released
  // Phi-3 shapes (2047 for the 4k models, ...) and is otherwise an error.
  bool phi3_window_defaults = false;
  // Experts required (qwen3moe, deepseek2, gpt-oss). gpt-oss: attn_output.bias, learned
  // attention sinks (attn_sinks [heads]), biases on the router and every expert matrix, the
  // router's weights a softmax over the chosen experts' logits (MoeGating::kSoftmaxWeight).
  bool attn_out_bias = false;
  bool attn_sinks = false;
  bool moe_biases = false;
  bool needs_experts = false;
  bool moe_softmax_weight = false;
  std::string_view ffn_norm_tensor = "ffn_norm";  // gpt-oss: post_attention_norm
};

// The table's row for `arch`, or nullptr.
const ArchSpec* FindArch(std::string_view arch);
std::string SupportedArchNames();  // "llama, qwen2, qwen3, qwen3moe, deepseek2"

// Router weights: softmax or sigmoid over all experts' logits (the chosen ones' probabilities),
// or (gpt-oss) the top-k by logit, then a softmax over just those k logits.
enum class MoeGating { kSoftmax, kSigmoid, kSoftmaxWeight };

// Mixture of experts (`{arch}.expert_count` > 0): the feed-forward of every layer from
// `leading_dense` on is a router over `num_experts` experts of `expert_ffn` rows each, of which
// each token takes `num_used`, plus `num_shared` shared experts every token takes unweighted.
struct MoeConfig {
  int num_experts = 0;    // 0: a dense feed-forward in every layer
  int num_used = 0;       // expert_used_count (top-k)
  int expert_ffn = 0;     // expert_feed_forward_length
  int num_shared = 0;     // expert_shared_count (deepseek2); their ffn is num_shared * expert_ffn
  int leading_dense = 0;  // leading_dense_block_count (deepseek2)
  MoeGating gating = MoeGating::kSoftmax;  // expert_gating_func: probabilities from the logits
  bool norm_weights = true;   // expert_weights_norm: the top-k weights divided by their sum
  float weights_scale = 1.f;  // expert_weights_scale: then multiplied by this
  // expert_group_count / expert_group_used_count (DeepSeek-V3): experts are chosen only from the
  // num_groups_used groups whose two best selection scores sum highest.
  int num_groups = 1;
  int num_groups_used = 1;

  bool LayerIsMoe(int layer) const { return num_experts > 0 && layer >= leading_dense; }
};

// DeepSeek's multi-head latent attention. Per token and layer the cache holds one vector of
// kv_lora_rank + qk_rope values: the RMS-normalised compressed KV latent, then the key's rotary
// part shared by all heads. A head's key is [k_nope = W_kb,h latent, k_rope] and its value
// W_vb,h latent; queries are [q_nope, q_rope] per head.
struct MlaConfig {
  int q_lora_rank = 0;   // 0: a full attn_q (V2-Lite); else attn_q_a -> norm -> attn_q_b
  int kv_lora_rank = 0;
  int qk_nope = 0;       // key_length_mla - rope
  int qk_rope = 0;       // rope.dimension_count
  int v_head = 0;        // value_length_mla
  float kq_scale = 0.f;  // softmax scale: YaRN mscale^2 / sqrt(qk_nope + qk_rope)

  int q_head() const { return qk_nope + qk_rope; }
  int latent_dim() const { return kv_lora_rank + qk_rope; }  // one cached vector
};

struct ModelConfig {
  const ArchSpec* arch = nullptr;
  std::string name;            // general.name, may be empty
  int num_layers = 0;
  int hidden = 0;              // embedding_length
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;            // key_length (defaults to hidden / num_heads)
  int ffn = 0;                 // feed_forward_length (dense layers)
  int vocab = 0;
  int context_length = 0;      // trained context
  float rms_eps = 1e-5f;
  RopeConfig rope;
  // LongRoPE (phi3's rope_factors_short / rope_factors_long): which set rope.freq_factors holds,
  // chosen by the context a sequence may reach (ModelOptions::max_context) against
  // rope.scaling.original_context_length, as llama.cpp chooses by its context.
  enum class RopeFactors { kNone, kFile, kShort, kLong } rope_factors = RopeFactors::kNone;
  // Sliding-window attention (ArchSpec::swa_period): a local layer's query at slot p sees slots
  // (p - sliding_window, p]; 0: none. Local layers rotate with rope_local (gemma3: base 10000, no
  // scaling), global ones with rope.
  int sliding_window = 0;
  int swa_period = 0;
  // attention.sliding_window_pattern given per layer (an array; nonzero / true: windowed), as
  // newer converters may write it; empty: the period rule.
  std::vector<bool> swa_layers;
  RopeConfig rope_local;
  float attn_scale = 0.f;     // softmax scale (1/sqrt(head_dim) unless the model says otherwise)
  float attn_softcap = 0.f;   // gemma2: scores become c * tanh(score / c); 0: none
  float final_softcap = 0.f;  // gemma2: logits likewise
  float embed_scale = 1.f;    // gemma: sqrt(hidden)
  MoeConfig moe;
  MlaConfig mla;               // kv_lora_rank > 0 for MLA; then num_kv_heads is 1 and head_dim
                               // the latent vector's length (the cache layout)

  bool is_mla() const { return mla.kv_lora_rank > 0; }
  int q_dim() const { return is_mla() ? num_heads * mla.q_head() : num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  int group() const { return num_heads / num_kv_heads; }  // query heads per KV head
  // The slots a query of `layer` sees back from its own (0: all).
  int LayerWindow(int layer) const {
    if (sliding_window == 0) return 0;
    if (!swa_layers.empty()) return swa_layers[static_cast<size_t>(layer)] ? sliding_window : 0;
    return swa_period <= 1 || layer % swa_period < swa_period - 1 ? sliding_window : 0;
  }
  bool has_windows() const { return sliding_window > 0; }
};

// Reads and validates the config. Errors name the missing or bad key; an unsupported
// architecture is Unimplemented and names it and the supported ones.
Result<ModelConfig> ModelConfigFromGguf(const GgufFile& file);

}  // namespace kvserve
