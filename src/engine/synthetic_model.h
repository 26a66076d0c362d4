// Synthetic models: GGUF files with seeded random weights in the exact layout of real llama /
// qwen2 / qwen3 / qwen3moe / deepseek2 / gemma2 / gemma3 / phi3 files (Mixtral-style llama with
// experts, Mistral-style llama with a sliding window; phi3's fused attn_qkv and ffn_up; gpt-oss
// with biases, attention sinks and a biased router), for tests and benchmarks.
//
// Weights are drawn uniformly with standard deviation 1/sqrt(fan_in) from a splitmix64 stream of
// the seed (so the same seed gives the same bytes on every platform and compiler); norms are
// 1 ± 0.1 and biases ±0.1, which keeps activations finite through any depth. Output rows of
// unused, control and byte tokens are zero, so generated text is made of real pieces.
#pragma once

#include <cstdint>
#include <string>

#include "gguf/gguf_writer.h"
#include "kvserve/status.h"
#include "quant/types.h"
#include "tokenizer/tokenizer_spec.h"

namespace kvserve {

// Mixture of experts (qwen3moe and deepseek2 need num_experts > 0; llama with experts is
// Mixtral-style). Expert tensors are the merged 3-D `ffn_*_exps` of current converters.
struct SyntheticMoeSpec {
  int num_experts = 0;
  int num_used = 2;
  int expert_ffn = 0;      // 0: the spec's ffn
  int num_shared = 0;      // deepseek2
  int leading_dense = 0;   // deepseek2
  int gating = 1;          // expert_gating_func: 1 softmax, 2 sigmoid (deepseek2 writes it)
  bool weights_norm = false;     // deepseek2's expert_weights_norm
  float weights_scale = 1.f;     // deepseek2's expert_weights_scale
  bool selection_bias = false;   // deepseek2: exp_probs_b
  int num_groups = 0;            // deepseek2: expert_group_count (0: not written)
  int num_groups_used = 0;       // expert_group_used_count
};

// deepseek2's latent attention. split_kv_b: attn_k_b / attn_v_b with head_count_kv 1 and the
// `_mla` length keys (current converters); otherwise the combined attn_kv_b of older files.
struct SyntheticMlaSpec {
  int q_lora_rank = 0;  // 0: full attn_q (V2-Lite)
  int kv_lora_rank = 512;
  int qk_nope = 128;
  int qk_rope = 64;
  int v_head = 128;
  bool split_kv_b = true;
  float yarn_factor = 0.f;  // > 0: YaRN with DeepSeek's log multiplier 0.0707
  int yarn_original_context = 4096;
};

struct SyntheticModelSpec {
  std::string arch = "llama";  // llama, qwen2, qwen3, qwen3moe, deepseek2, gemma2, gemma3
  int num_layers = 2;
  int hidden = 256;
  int num_heads = 8;
  int num_kv_heads = 8;
  int ffn = 512;
  int head_dim = 0;              // 0 = hidden / num_heads
  int context_length = 2048;
  float rope_base = 10000.f;
  GgmlType type = GgmlType::kF32;  // type of the 2-D weight matrices
  bool tie_embeddings = false;
  uint64_t seed = 1;
  std::string name = "kvserve-synthetic";
  TokenizerSpec tokenizer;       // vocabulary size = tokenizer.tokens.size()
  SyntheticMoeSpec moe;
  SyntheticMlaSpec mla;          // deepseek2 only
  // Sliding-window attention (attention.sliding_window; 0: not written): every layer of a
  // llama (Mistral v0.1), gemma2's and gemma3's local layers. Gemma's logit soft-caps
  // (attn_logit_softcapping, final_logit_softcapping; 0: not written).
  int sliding_window = 0;
  float attn_softcap = 0.f;
  float final_softcap = 0.f;
  // phi3's LongRoPE (> 0): rope.scaling.original_context_length, random rope_factors_short and
  // rope_factors_long in [1, 4] and the converter's attn_factor sqrt(1 + ln s / ln orig) with
  // s = context_length / orig. phi3 files always carry attention.sliding_window (0: none).
  int rope_original_context = 0;
  // YaRN for archs other than deepseek2 (gpt-oss; > 0): rope.scaling.type yarn, this factor,
  // rope.scaling.original_context_length.
  float yarn_factor = 0.f;
  int yarn_original_context = 4096;
};

// Builds the GGUF in memory. A matrix whose row length does not fit `type`'s block size falls
// back to Q8_0, then F16 (as llama.cpp's quantizer does).
Result<GgufWriter> BuildSyntheticModel(const SyntheticModelSpec& spec);

// A small llama with the synthetic vocabulary (4 layers, hidden 256): the tests' stock model.
SyntheticModelSpec SmallSyntheticModelSpec();

// Opens the GGUF at `path` with its pages mapped up front, or the embedded default model
// (engine/embedded_model.h: kvserve's own trained model) when `path` is empty. What every
// command that loads a model calls.
Result<GgufFile> OpenModelOrDefault(const std::string& path);

}  // namespace kvserve
