// ModelConfig: everything the forward pass needs to know about a model, read from GGUF metadata
// through a per-architecture table (no string if-chains in the forward pass).
#pragma once

#include <string>
#include <string_view>

#include "gguf/gguf_file.h"
#include "kvserve/status.h"
#include "ops/rope.h"

namespace kvserve {

// What distinguishes the supported architectures. One row per GGUF `general.architecture`.
struct ArchSpec {
  std::string_view name;   // as in general.architecture
  RopeStyle rope_style;    // adjacent pairs (llama) or halves (qwen2, qwen3)
  bool has_qkv_bias;       // qwen2: attn_q/k/v.bias
  bool has_qk_norm;        // qwen3: per-head RMSNorm of Q and K before RoPE
};

// The table's row for `arch`, or nullptr.
const ArchSpec* FindArch(std::string_view arch);
std::string SupportedArchNames();  // "llama, qwen2, qwen3"

struct ModelConfig {
  const ArchSpec* arch = nullptr;
  std::string name;            // general.name, may be empty
  int num_layers = 0;
  int hidden = 0;              // embedding_length
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;            // key_length (defaults to hidden / num_heads)
  int ffn = 0;                 // feed_forward_length
  int vocab = 0;
  int context_length = 0;      // trained context
  float rms_eps = 1e-5f;
  RopeConfig rope;

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  int group() const { return num_heads / num_kv_heads; }  // query heads per KV head
};

// Reads and validates the config. Errors name the missing or bad key; an unsupported
// architecture is Unimplemented and names it and the supported ones.
Result<ModelConfig> ModelConfigFromGguf(const GgufFile& file);

}  // namespace kvserve
