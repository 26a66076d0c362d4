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
  // YaRN's magnitude factor (1 + 0.1 ln factor) on the rotated values; deepseek2 puts its own
  // mscale into the softmax scale instead and rotates without it.
  bool yarn_magnitude = true;
  // rope.scaling.attn_factor: cos and sin multiplied by it (LongRoPE's sqrt(1 + ln s / ln L)
  // for phi3), on top of YaRN's magnitude; Rotate leaves it out like that one.
  float attn_factor = 1.f;
};

class Rope {
 public:
  explicit Rope(RopeConfig config);
  const RopeConfig& config() const { return config_; }
  // Rotates each of num_heads head vectors (stride head_dim) of one token at position `pos`.
  void Apply(float* x, int num_heads, int head_dim, int32_t pos) const;
  // Rotates head vectors already rotated at some position p so that they are rotated at
  // p + delta (delta may be negative): the pure rotation by delta's angles, with the same
  // per-pair frequencies as Apply (linear scaling, frequency factors and YaRN's blend of
  // interpolated and extrapolated angles) but never YaRN's magnitude factor, which Apply put in
  // once already. Equal to Apply at p + delta up to float rounding.
  void Rotate(float* x, int num_heads, int head_dim, int32_t delta) const;

 private:
  RopeConfig config_;
  std::vector<float> inv_freq_;   // [rotary_dim / 2]
  std::vector<float> ramp_mix_;   // yarn: 1 = extrapolate, 0 = interpolate, per pair
  float mscale_ = 1.f;

  // cos and sin of every pair's angle at position `pos` (times YaRN's magnitude factor when
  // `magnitude`), into c and s.
  void Angles(int32_t pos, bool magnitude, float* c, float* s) const;
  void RotatePairs(float* x, int num_heads, int head_dim, const float* c, const float* s) const;
  // Apply (with YaRN's magnitude) or Rotate (without) by the angles of `pos`.
  void Turn(float* x, int num_heads, int head_dim, int32_t pos, bool magnitude) const;
};

}  // namespace kvserve
