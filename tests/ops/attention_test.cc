#include "ops/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace kvserve {
namespace {

// Naive attention over contiguous K/V: k, v: [num_slots, head_dim] for one kv head.
std::vector<float> Naive(const float* q, int group, int head_dim, const std::vector<float>& k,
                         const std::vector<float>& v, int num_slots, float scale) {
  std::vector<float> out(group * head_dim, 0.f);
  for (int g = 0; g < group; ++g) {
    std::vector<double> s(num_slots);
    double mx = -1e300, sum = 0;
    for (int t = 0; t < num_slots; ++t) {
      double d = 0;
      for (int i = 0; i < head_dim; ++i) d += q[g * head_dim + i] * k[t * head_dim + i];
      s[t] = d * scale;
      mx = std::max(mx, s[t]);
    }
    for (double& x : s) sum += (x = std::exp(x - mx));
    for (int t = 0; t < num_slots; ++t) {
      for (int i = 0; i < head_dim; ++i) out[g * head_dim + i] += s[t] / sum * v[t * head_dim + i];
    }
  }
  return out;
}

class AttentionTest : public ::testing::TestWithParam<KvDtype> {};

TEST_P(AttentionTest, PagedMatchesNaiveWithScatteredBlocks) {
  const KvDtype dtype = GetParam();
  const int head_dim = 16, block_size = 4, kv_heads = 2, group = 3, num_blocks = 8;
  const size_t head_bytes = KvBytesPerHeadVector(dtype, head_dim);
  std::vector<uint8_t> k_arena(num_blocks * kv_heads * block_size * head_bytes);
  std::vector<uint8_t> v_arena(k_arena.size());
  PagedKvLayerView view{k_arena.data(), v_arena.data(), dtype, dtype, kv_heads, head_dim,
                        block_size, head_bytes, head_bytes};
  // The sequence's blocks in a scrambled order.
  const std::vector<BlockId> table = {BlockId(5), BlockId(2), BlockId(7), BlockId(0)};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int kvh = 0; kvh < kv_heads; ++kvh) {
    for (int num_slots : {1, 3, 4, 5, 13, 16}) {
      std::vector<float> k(num_slots * head_dim), v(num_slots * head_dim), q(group * head_dim);
      for (float& x : k) x = u(rng);
      for (float& x : v) x = u(rng);
      for (float& x : q) x = u(rng);
      for (int s = 0; s < num_slots; ++s) {
        const BlockId b = table[s / block_size];
        StoreKvVector(dtype, &k[s * head_dim], head_dim,
                      const_cast<uint8_t*>(view.KSlot(b, kvh, s % block_size)));
        StoreKvVector(dtype, &v[s * head_dim], head_dim,
                      const_cast<uint8_t*>(view.VSlot(b, kvh, s % block_size)));
        // What the kernel will read back (f16 rounding included).
        LoadKvVector(dtype, view.KSlot(b, kvh, s % block_size), head_dim, &k[s * head_dim]);
        LoadKvVector(dtype, view.VSlot(b, kvh, s % block_size), head_dim, &v[s * head_dim]);
      }
      std::vector<float> scratch(AttentionScratchFloats(num_slots, group, head_dim));
      std::vector<float> out(group * head_dim);
      AttendGroup(q.data(), group, kvh, view, table, num_slots, 0.25f, scratch.data(), out.data());
      const std::vector<float> want = Naive(q.data(), group, head_dim, k, v, num_slots, 0.25f);
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], want[i], 1e-5) << "slots=" << num_slots << " i=" << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KvTypes, AttentionTest, ::testing::Values(KvDtype::kF32, KvDtype::kF16),
                         [](const auto& p) { return std::string(KvDtypeName(p.param)); });

}  // namespace
}  // namespace kvserve
