// Rotary position embeddings.
//
// Two pairings exist in the GGUF files people download: llama-family files rotate ADJACENT pairs
// (x[2i], x[2i+1]) (their converters permute the Q/K rows for this), qwen2/qwen3 rotate HALVES
// (x[i], x[i + d/2]), "neox" style. Frequencies: theta_i = pos * base^(-2i/d) / scale_i, with
// linear scaling (pos / factor), per-dimension frequency factors (Llama 3.1 rope_freqs), and
// YaRN (NTK-by-parts interpolation with its attention-magnitude correction).
#pragma once

#include <cstdint>
#include <vector>

namespace kvserve {

enum class RopeStyle { kAdjacentPairs, kHalves };
enum class RopeScaling { kNone, kLinear, kYarn };

struct RopeConfig {
  RopeStyle style = RopeStyle::kAdjacentPairs;
  int rotary_dim = 0;       // leading dims of each head that rotate (<= head_dim)
  float freq_base = 10000.f;
  RopeScaling scaling = RopeScaling::kNone;
  float scaling_factor = 1.f;           // context extension factor (linear, yarn)
  int original_context_length = 0;      // yarn
  float yarn_beta_fast = 32.f;
  float yarn_beta_slow = 1.f;
  std::vector<float> freq_factors;      // [rotary_dim / 2] divisors, empty if none
};

class Rope {
 public:
  explicit Rope(RopeConfig config);
  const RopeConfig& config() const { return config_; }
  // Rotates each of num_heads head vectors (stride head_dim) of one token at position `pos`.
  void Apply(float* x, int num_heads, int head_dim, int32_t pos) const;

 private:
  RopeConfig config_;
  std::vector<float> inv_freq_;   // [rotary_dim / 2]
  std::vector<float> ramp_mix_;   // yarn: 1 = extrapolate, 0 = interpolate, per pair
  float mscale_ = 1.f;
};

}  // namespace kvserve
