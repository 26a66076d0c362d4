#include "ops/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "util/check.h"

namespace kvserve {
namespace {

// YaRN: the dimension index at which a pair completes `num_rotations` turns over the original
// context.
float YarnCorrDim(int rotary_dim, int orig_ctx, float num_rotations, float base) {
  return rotary_dim * std::log(orig_ctx / (num_rotations * 2 * std::numbers::pi_v<float>)) /
         (2 * std::log(base));
}

}  // namespace

Rope::Rope(RopeConfig config) : config_(std::move(config)) {
  const int half = config_.rotary_dim / 2;
  KV_CHECK_LE(half, 512);  // Angles' arrays
  inv_freq_.resize(half);
  for (int i = 0; i < half; ++i) {
    double f = std::pow(static_cast<double>(config_.freq_base), -2.0 * i / config_.rotary_dim);
    if (!config_.freq_factors.empty()) f /= config_.freq_factors[i];
    inv_freq_[i] = static_cast<float>(f);
  }
  if (config_.scaling == RopeScaling::kYarn && config_.scaling_factor > 1.f) {
    const int orig = config_.original_context_length > 0 ? config_.original_context_length : 4096;
    const float low = std::max(0.f, std::floor(YarnCorrDim(config_.rotary_dim, orig,
                                                           config_.yarn_beta_fast,
                                                           config_.freq_base)));
    const float high = std::min(static_cast<float>(config_.rotary_dim - 1),
                                std::ceil(YarnCorrDim(config_.rotary_dim, orig,
                                                      config_.yarn_beta_slow, config_.freq_base)));
    ramp_mix_.resize(half);
    for (int i = 0; i < half; ++i) {
      const float y = (i - low) / std::max(0.001f, high - low);
      ramp_mix_[i] = 1.f - std::clamp(y, 0.f, 1.f);
    }
    if (config_.yarn_magnitude) mscale_ = 1.f + 0.1f * std::log(config_.scaling_factor);
  }
}

void Rope::Angles(int32_t pos, bool magnitude, float* c, float* s) const {
  const int half = config_.rotary_dim / 2;
  float p = static_cast<float>(pos);
  if (config_.scaling == RopeScaling::kLinear && config_.scaling_factor > 0.f) {
    p /= config_.scaling_factor;
  }
  for (int i = 0; i < half; ++i) {
    float theta = p * inv_freq_[i];
    float mag = magnitude ? config_.attn_factor : 1.f;
    if (!ramp_mix_.empty()) {
      const float interp = theta / config_.scaling_factor;
      theta = interp + (theta - interp) * ramp_mix_[i];
      if (magnitude) mag *= mscale_;
    }
    c[i] = std::cos(theta) * mag;
    s[i] = std::sin(theta) * mag;
  }
}

void Rope::RotatePairs(float* x, int num_heads, int head_dim, const float* c,
                       const float* s) const {
  const int half = config_.rotary_dim / 2;
  const bool adjacent = config_.style == RopeStyle::kAdjacentPairs;
  for (int i = 0; i < half; ++i) {
    const int i0 = adjacent ? 2 * i : i;
    const int i1 = adjacent ? 2 * i + 1 : i + half;
    for (int h = 0; h < num_heads; ++h) {
      float* v = x + static_cast<int64_t>(h) * head_dim;
      const float a = v[i0];
      const float b = v[i1];
      v[i0] = a * c[i] - b * s[i];
      v[i1] = a * s[i] + b * c[i];
    }
  }
}

void Rope::Turn(float* x, int num_heads, int head_dim, int32_t pos, bool magnitude) const {
  constexpr int kMaxPairs = 512;
  float c[kMaxPairs], s[kMaxPairs];
  Angles(pos, magnitude, c, s);
  RotatePairs(x, num_heads, head_dim, c, s);
}

void Rope::Apply(float* x, int num_heads, int head_dim, int32_t pos) const {
  Turn(x, num_heads, head_dim, pos, /*magnitude=*/true);
}

void Rope::Rotate(float* x, int num_heads, int head_dim, int32_t delta) const {
  Turn(x, num_heads, head_dim, delta, /*magnitude=*/false);
}

}  // namespace kvserve
