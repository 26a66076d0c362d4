#include "ops/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
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

INSTANTIATE_TEST_SUITE_P(KvTypes, AttentionTest, ::testing::ValuesIn(kAllKvDtypes),
                         [](const auto& p) { return std::string(KvDtypeName(p.param)); });

// A paged K/V arena for one layer with a scrambled block table. Slots nobody wrote hold NaN, so
// a kernel that reads (or fails to mask) a slot past a row's context shows it.
struct Arena {
  KvDtype dtype;
  int head_dim, block_size, kv_heads;
  size_t head_bytes;
  std::vector<uint8_t> k, v;
  std::vector<BlockId> table;
  PagedKvLayerView view;

  Arena(KvDtype dt, int d, int bs, int heads, int num_slots, std::mt19937& rng)
      : dtype(dt), head_dim(d), block_size(bs), kv_heads(heads),
        head_bytes(KvBytesPerHeadVector(dt, d)) {
    const int blocks = (num_slots + bs - 1) / bs;
    const int arena_blocks = blocks + 3;
    k.assign(static_cast<size_t>(arena_blocks) * heads * bs * head_bytes, 0xFF);
    v.assign(k.size(), 0xFF);
    std::vector<int> ids(arena_blocks);
    for (int i = 0; i < arena_blocks; ++i) ids[i] = i;
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int i = 0; i < blocks; ++i) table.emplace_back(ids[i]);
    view = PagedKvLayerView{k.data(), v.data(), dt, dt, heads, d, bs, head_bytes, head_bytes};
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> x(d);
    for (int h = 0; h < heads; ++h) {
      for (int s = 0; s < num_slots; ++s) {
        const BlockId b = table[s / bs];
        for (float& e : x) e = u(rng);
        StoreKvVector(dt, x.data(), d, const_cast<uint8_t*>(view.KSlot(b, h, s % bs)));
        for (float& e : x) e = u(rng);
        StoreKvVector(dt, x.data(), d, const_cast<uint8_t*>(view.VSlot(b, h, s % bs)));
      }
    }
  }
};

std::vector<std::string> Isas() {
  std::vector<std::string> out;
  for (const char* isa : {"generic", "avx2", "avx512"}) {
    if (SetAttentionIsa(isa)) out.push_back(isa);
  }
  SetAttentionIsa("best");
  return out;
}

struct IsaGuard {
  ~IsaGuard() { SetAttentionIsa("best"); }
};

bool Supports(KvDtype dtype, int head_dim) { return CheckKvDtype(dtype, head_dim).ok(); }

// The fast kernel against the reference over head dims, group sizes, context lengths around
// chunk, block and partition boundaries, K/V dtypes and every ISA this CPU has. Both dequantize
// the same bytes (the reference through LoadKvVector, un-rotated; the kernel inside its chunk
// conversion, against a rotated query for int4), so they agree to float rounding for every type.
TEST(AttentionFast, MatchesReference) {
  IsaGuard guard;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  const std::vector<int> lengths = {1,   2,   3,   7,   8,   9,   15,  16,   17,   31,  32,
                                    33,  63,  100, 255, 511, 512, 513, 1023, 1025, 1537, 2100};
  for (const std::string& isa : Isas()) {
    ASSERT_TRUE(SetAttentionIsa(isa));
    for (KvDtype dtype : kAllKvDtypes) {
      for (int head_dim : {64, 128, 16, 80, 40}) {
        if (!Supports(dtype, head_dim)) continue;
        // The quantized types share the f16/f32 code paths but the conversion: fewer shapes.
        const bool plain = dtype == KvDtype::kF16 || dtype == KvDtype::kF32;
        if (!plain && head_dim != 64 && head_dim != 16 && head_dim != 80) continue;
        for (int block_size : {16, 5}) {
          if (!plain && block_size != (head_dim == 64 ? 5 : 16)) continue;
          const int max_len = head_dim == 64 ? 2100 : 600;
          Arena a(dtype, head_dim, block_size, 2, max_len, rng);
          for (int group : {1, 2, 3, 4, 5, 6, 7, 8}) {
            for (int len : lengths) {
              if (len > max_len) continue;
              if (head_dim != 64 && group % 3 != 1 && len > 100) continue;  // keep it quick
              const int kvh = len % 2;
              // Sharp and flat softmaxes.
              const float qscale = (len % 3 == 0) ? 4.f : 1.f;
              std::vector<float> q(static_cast<size_t>(group) * head_dim);
              for (float& x : q) x = nd(rng) * qscale;
              const float scale = 1.f / std::sqrt(static_cast<float>(head_dim));
              std::vector<float> scratch(AttentionScratchFloats(len, group, head_dim));
              std::vector<float> want(q.size()), got(q.size());
              AttendGroupReference(q.data(), group, kvh, a.view, a.table, len, scale,
                                   scratch.data(), want.data());
              AttendGroup(q.data(), group, kvh, a.view, a.table, len, scale, nullptr, got.data());
              double max_ref = 0;
              for (float x : want) max_ref = std::max(max_ref, std::fabs(static_cast<double>(x)));
              for (size_t i = 0; i < got.size(); ++i) {
                ASSERT_TRUE(std::isfinite(got[i]));
                ASSERT_LE(std::fabs(got[i] - want[i]), 1e-5 + 2e-5 * max_ref)
                    << isa << " " << KvDtypeName(dtype) << " d=" << head_dim
                    << " bs=" << block_size << " group=" << group << " len=" << len << " i=" << i;
              }
            }
          }
        }
      }
    }
  }
}

// MLA's head sizes: the absorbed form's 576-value latent (values read from the key arena: one
// copy) and the decompressed form's 192-value heads, with the query-group sizes they run at.
TEST(AttentionFast, LatentHeadSizesMatchReference) {
  IsaGuard guard;
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const std::string& isa : Isas()) {
    ASSERT_TRUE(SetAttentionIsa(isa));
    for (KvDtype dtype : {KvDtype::kF16, KvDtype::kF32, KvDtype::kBF16, KvDtype::kInt8,
                          KvDtype::kFp8E4M3}) {
      for (int head_dim : {576, 192}) {
        Arena a(dtype, head_dim, 16, 1, 700, rng);
        PagedKvLayerView view = a.view;
        if (head_dim == 576) view.v = view.k;  // the latent layout
        for (int group : {1, 16}) {
          for (int len : {1, 17, 513, 700}) {
            std::vector<float> q(static_cast<size_t>(group) * head_dim);
            for (float& x : q) x = nd(rng) * 0.3f;
            const float scale = 1.f / std::sqrt(192.f);
            std::vector<float> scratch(AttentionScratchFloats(len, group, head_dim));
            std::vector<float> want(q.size()), got(q.size());
            AttendGroupReference(q.data(), group, 0, view, a.table, len, scale, scratch.data(),
                                 want.data());
            AttendGroup(q.data(), group, 0, view, a.table, len, scale, nullptr, got.data());
            double max_ref = 0;
            for (float x : want) max_ref = std::max(max_ref, std::fabs(static_cast<double>(x)));
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_LE(std::fabs(got[i] - want[i]), 1e-5 + 2e-5 * max_ref)
                  << isa << " " << KvDtypeName(dtype) << " d=" << head_dim << " group=" << group
                  << " len=" << len << " i=" << i;
            }
          }
        }
      }
    }
  }
}

// Batch invariance: a row's output is bit-identical whether it is computed alone, in a tile of
// several tokens (prefill), from partitions computed separately and merged, for any tile split.
TEST(AttentionFast, RowsAreBitIdenticalHoweverTheWorkIsSplit) {
  IsaGuard guard;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const std::string& isa : Isas()) {
    ASSERT_TRUE(SetAttentionIsa(isa));
    for (KvDtype dtype : kAllKvDtypes) {
      for (int head_dim : {64, 128, 576}) {
        for (int group : {1, 4, 8}) {
          const bool plain = dtype == KvDtype::kF16 || dtype == KvDtype::kF32;
          if (!plain && group == 4) continue;
          if (head_dim == 576 && (!Supports(dtype, head_dim) || group != 8)) continue;
          const int cached = head_dim == 64 ? 1000 : 500, num_new = 40;
          const int total = cached + num_new;
          Arena a(dtype, head_dim, 16, 1, total, rng);
          const int64_t stride = static_cast<int64_t>(group) * head_dim;
          std::vector<float> q(static_cast<size_t>(num_new) * stride);
          for (float& x : q) x = nd(rng) * 2.f;
          const float scale = 1.f / std::sqrt(static_cast<float>(head_dim));
          // Reference for bit comparison: each token alone.
          std::vector<float> alone(q.size());
          for (int j = 0; j < num_new; ++j) {
            AttendGroup(q.data() + j * stride, group, 0, a.view, a.table, cached + j + 1, scale,
                        nullptr, alone.data() + j * stride);
          }
          // Tiles of several sizes, whole.
          for (int tile : {1, 3, 4, 16, 40}) {
            std::vector<float> out(q.size(), -1.f);
            for (int j0 = 0; j0 < num_new; j0 += tile) {
              AttentionTile t;
              t.q = q.data() + j0 * stride;
              t.q_stride = stride;
              t.out = out.data() + j0 * stride;
              t.out_stride = stride;
              t.num_tokens = std::min(tile, num_new - j0);
              t.group = group;
              t.first_slots = cached + j0 + 1;
              t.block_table = a.table;
              AttendTile(t, a.view, scale);
            }
            ASSERT_EQ(0, std::memcmp(out.data(), alone.data(), out.size() * sizeof(float)))
                << isa << " tile=" << tile << " group=" << group << " d=" << head_dim;
          }
          // One tile split into partitions, computed in reverse order, then merged.
          {
            AttentionTile t;
            t.q = q.data();
            t.q_stride = stride;
            t.num_tokens = num_new;
            t.group = group;
            t.first_slots = cached + 1;
            t.block_table = a.table;
            const int rows = num_new * group;
            const size_t pf = AttentionPartialFloats(head_dim);
            const int np = AttentionPartitions(total);
            std::vector<float> partials(static_cast<size_t>(np) * rows * pf, 0.f);
            for (int p = np - 1; p >= 0; --p) {
              AttendTilePartition(t, a.view, scale, p, partials.data() + p * rows * pf);
            }
            std::vector<float> out(q.size(), -1.f);
            for (int r = 0; r < rows; ++r) {
              const int j = r / group, g = r % group;
              MergeAttentionPartials(partials.data() + r * pf, AttentionPartitions(cached + j + 1),
                                     static_cast<int64_t>(rows * pf), head_dim,
                                     out.data() + j * stride + g * head_dim);
            }
            ASSERT_EQ(0, std::memcmp(out.data(), alone.data(), out.size() * sizeof(float)))
                << isa << " partitions group=" << group << " d=" << head_dim;
          }
        }
      }
    }
  }
}

// K and V of mixed types: each side converts with its own type (int4 keys rotate the query,
// int4 values rotate the output back), the other side untouched.
TEST(AttentionFast, MixedKeyAndValueTypesMatchTheReference) {
  IsaGuard guard;
  for (const std::string& isa : Isas()) {
    ASSERT_TRUE(SetAttentionIsa(isa));
    for (auto [kt, vt] :
         {std::pair{KvDtype::kInt4, KvDtype::kF16}, std::pair{KvDtype::kF16, KvDtype::kInt4},
          std::pair{KvDtype::kInt8, KvDtype::kFp8E4M3},
          std::pair{KvDtype::kFp8E5M2, KvDtype::kBF16}}) {
      std::mt19937 rng_k(21), rng_v(21);
      Arena ka(kt, 64, 16, 1, 700, rng_k), va(vt, 64, 16, 1, 700, rng_v);
      PagedKvLayerView view = ka.view;  // same block table: the arenas drew the same shuffle
      view.v = va.view.v;
      view.v_dtype = vt;
      view.v_head_bytes = va.view.v_head_bytes;
      std::mt19937 rng(3);
      std::normal_distribution<float> nd(0.f, 1.f);
      for (int len : {1, 17, 513, 700}) {
        const int group = 4;
        std::vector<float> q(static_cast<size_t>(group) * 64);
        for (float& x : q) x = nd(rng);
        std::vector<float> scratch(AttentionScratchFloats(len, group, 64));
        std::vector<float> want(q.size()), got(q.size());
        AttendGroupReference(q.data(), group, 0, view, ka.table, len, 0.125f, scratch.data(),
                             want.data());
        AttendGroup(q.data(), group, 0, view, ka.table, len, 0.125f, nullptr, got.data());
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 3e-5) << isa << " " << KvDtypeName(kt) << "/"
                                             << KvDtypeName(vt) << " len=" << len << " i=" << i;
        }
      }
    }
  }
}

// Each quantized type against the same K/V kept in f32: the output error is bounded by what the
// type's rounding allows.
TEST(AttentionFast, QuantizedTypesStayCloseToUnquantizedAttention) {
  struct Case {
    KvDtype dtype;
    double bound;  // max |out - out_f32| / max |out_f32|
  };
  // Uniform random K/V (no outliers, near-zero outputs over long contexts): a loose sanity
  // bound per type, about twice the measured maxima (f16 5e-4, bf16 3e-3, int8 1e-2,
  // fp8_e4m3 6e-2, fp8_e5m2 1.2e-1, int4 2.4e-1). Quality on real models: kvserve perplexity.
  const Case cases[] = {{KvDtype::kF16, 2e-3},       {KvDtype::kBF16, 1e-2},
                        {KvDtype::kInt8, 2e-2},      {KvDtype::kFp8E4M3, 1.2e-1},
                        {KvDtype::kFp8E5M2, 2.5e-1}, {KvDtype::kInt4, 5e-1}};
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const Case& c : cases) {
    double worst = 0;
    for (int head_dim : {64, 128}) {
      std::mt19937 rng_a(31), rng_b(31);
      Arena ref(KvDtype::kF32, head_dim, 16, 1, 1100, rng_a);
      Arena quant(c.dtype, head_dim, 16, 1, 1100, rng_b);
      ASSERT_EQ(ref.table, quant.table);
      for (int len : {1, 5, 64, 600, 1100}) {
        const int group = 2;
        std::vector<float> q(static_cast<size_t>(group) * head_dim);
        for (float& x : q) x = nd(rng) * 2.f;
        const float scale = 1.f / std::sqrt(static_cast<float>(head_dim));
        std::vector<float> want(q.size()), got(q.size());
        AttendGroup(q.data(), group, 0, ref.view, ref.table, len, scale, nullptr, want.data());
        AttendGroup(q.data(), group, 0, quant.view, quant.table, len, scale, nullptr, got.data());
        double max_ref = 0, max_err = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
          max_err = std::max(max_err, std::fabs(static_cast<double>(got[i]) - want[i]));
        }
        worst = std::max(worst, max_err / max_ref);
      }
    }
    EXPECT_LE(worst, c.bound) << KvDtypeName(c.dtype);
    std::printf("[ measured ] %-9s max relative error %.2e (bound %.0e)\n",
                std::string(KvDtypeName(c.dtype)).c_str(), worst, c.bound);
  }
}

// Sliding windows (gemma2/3's local layers, Mistral) and gemma2's score soft-cap. Rows see the
// last `window` slots only: the kernel against the reference (which attends [first_slot, n)
// alone), the slots below the earliest window poisoned with NaN so that reading one shows, and
// rows bit-identical alone, in tiles of any size, and from partitions merged from each row's
// first partition (windows that start inside, at and across partition boundaries).
TEST(AttentionFast, SlidingWindowAndSoftCap) {
  IsaGuard guard;
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int cached = 1000, num_new = 24, total = cached + num_new;
  for (const std::string& isa : Isas()) {
    ASSERT_TRUE(SetAttentionIsa(isa));
    for (KvDtype dtype : {KvDtype::kF16, KvDtype::kF32, KvDtype::kInt8, KvDtype::kInt4}) {
      for (int head_dim : {64, 256, 40}) {
        if (!Supports(dtype, head_dim)) continue;
        for (int window : {1, 7, 100, 500, 520, 700, 5000}) {
          // The long head (two passes over the rows) and the reference's head dim, and the
          // quantized types: fewer cases.
          const bool full = head_dim == 64 && dtype == KvDtype::kF16;
          if (!full && window != 7 && window != 520) continue;
          if (head_dim != 64 && dtype != KvDtype::kF16) continue;
          for (float softcap : {0.f, 2.5f}) {
            const int group = window % 2 == 0 ? 4 : 1;
            Arena a(dtype, head_dim, 16, 1, total, rng);
            // Slots no row sees: NaN.
            const int lo_min = AttentionFirstSlot(cached + 1, window);
            for (int s = 0; s < lo_min; ++s) {
              const BlockId b = a.table[s / 16];
              std::memset(const_cast<uint8_t*>(a.view.KSlot(b, 0, s % 16)), 0xFF, a.head_bytes);
              std::memset(const_cast<uint8_t*>(a.view.VSlot(b, 0, s % 16)), 0xFF, a.head_bytes);
            }
            const int64_t stride = static_cast<int64_t>(group) * head_dim;
            std::vector<float> q(static_cast<size_t>(num_new) * stride);
            for (float& x : q) x = nd(rng) * 2.f;
            const float scale = 1.f / std::sqrt(static_cast<float>(head_dim));
            auto tile_at = [&](int j0, int n, float* out) {
              AttentionTile t;
              t.q = q.data() + j0 * stride;
              t.q_stride = stride;
              t.out = out + j0 * stride;
              t.out_stride = stride;
              t.num_tokens = n;
              t.group = group;
              t.first_slots = cached + j0 + 1;
              t.block_table = a.table;
              t.window = window;
              t.softcap = softcap;
              return t;
            };
            const std::string what =
                isa + " " + std::string(KvDtypeName(dtype)) + " d=" + std::to_string(head_dim) +
                " window=" + std::to_string(window) + " cap=" + std::to_string(softcap);
            // Each token alone, against the reference.
            std::vector<float> alone(q.size(), -1.f);
            for (int j = 0; j < num_new; ++j)
              AttendTile(tile_at(j, 1, alone.data()), a.view, scale);
            for (int j = 0; j < num_new; ++j) {
              const int n = cached + j + 1;
              std::vector<float> scratch(AttentionScratchFloats(n, group, head_dim));
              std::vector<float> want(static_cast<size_t>(stride));
              AttendGroupReference(q.data() + j * stride, group, 0, a.view, a.table, n, scale,
                                   scratch.data(), want.data(), AttentionFirstSlot(n, window),
                                   softcap);
              double max_ref = 0;
              for (float x : want) max_ref = std::max(max_ref, std::fabs(static_cast<double>(x)));
              for (int64_t i = 0; i < stride; ++i) {
                const float got = alone[static_cast<size_t>(j * stride + i)];
                ASSERT_TRUE(std::isfinite(got)) << what << " j=" << j;
                ASSERT_LE(std::fabs(got - want[static_cast<size_t>(i)]), 1e-5 + 3e-5 * max_ref)
                    << what << " j=" << j << " i=" << i;
              }
            }
            // Tiles of several sizes.
            for (int tile : {3, 16, num_new}) {
              std::vector<float> out(q.size(), -1.f);
              for (int j0 = 0; j0 < num_new; j0 += tile) {
                AttendTile(tile_at(j0, std::min(tile, num_new - j0), out.data()), a.view, scale);
              }
              ASSERT_EQ(0, std::memcmp(out.data(), alone.data(), out.size() * sizeof(float)))
                  << what << " tile=" << tile;
            }
            // Partitions from the tile's first, in reverse order, merged per row from its own.
            if (!AttentionCanSplit(head_dim)) continue;
            std::vector<float> out(q.size(), -1.f);
            const AttentionTile t = tile_at(0, num_new, out.data());
            const int rows = num_new * group;
            const size_t pf = AttentionPartialFloats(head_dim);
            const int np = AttentionPartitions(total);
            std::vector<float> partials(static_cast<size_t>(np) * rows * pf, 0.f);
            for (int p = np - 1; p >= AttentionTileFirstPartition(t); --p) {
              AttendTilePartition(t, a.view, scale, p, partials.data() + p * rows * pf);
            }
            for (int r = 0; r < rows; ++r) {
              const int j = r / group, g = r % group;
              const int p0 = AttentionRowFirstPartition(t, j);
              MergeAttentionPartials(partials.data() + (static_cast<size_t>(p0) * rows + r) * pf,
                                     AttentionPartitions(cached + j + 1) - p0,
                                     static_cast<int64_t>(rows * pf), head_dim,
                                     out.data() + j * stride + g * head_dim);
            }
            ASSERT_EQ(0, std::memcmp(out.data(), alone.data(), out.size() * sizeof(float)))
                << what << " partitions";
          }
        }
      }
    }
  }
}

// gpt-oss's learned sinks: one more logit per query head in each row's softmax, for no value.
// The kernel against the reference, whole tiles against partitions merged, with and without a
// window (sinks large and small against the scores).
TEST(AttentionFast, SinksMatchTheReferenceHoweverTheWorkIsSplit) {
  IsaGuard guard;
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int group = 4, head_dim = 64, len = 1100;
  for (const std::string& isa : Isas()) {
    ASSERT_TRUE(SetAttentionIsa(isa));
    for (KvDtype dtype : {KvDtype::kF16, KvDtype::kInt8}) {
      Arena a(dtype, head_dim, 16, 1, len, rng);
      for (int window : {0, 128}) {
        for (float sink_level : {-3.f, 0.f, 6.f}) {
          std::vector<float> sinks(group);
          for (float& x : sinks) x = sink_level + nd(rng);
          std::vector<float> q(static_cast<size_t>(group) * head_dim);
          for (float& x : q) x = nd(rng);
          const float scale = 1.f / std::sqrt(static_cast<float>(head_dim));
          for (int n : {1, 100, len}) {
            AttentionTile t;
            std::vector<float> got(q.size(), -1.f), merged(q.size(), -1.f), want(q.size());
            t.q = q.data();
            t.out = got.data();
            t.group = group;
            t.first_slots = n;
            t.block_table = a.table;
            t.window = window;
            t.sinks = sinks.data();
            AttendTile(t, a.view, scale);
            std::vector<float> scratch(AttentionScratchFloats(n, group, head_dim));
            AttendGroupReference(q.data(), group, 0, a.view, a.table, n, scale, scratch.data(),
                                 want.data(), AttentionFirstSlot(n, window), 0.f, sinks.data());
            double max_ref = 0;
            for (float x : want) max_ref = std::max(max_ref, std::fabs(static_cast<double>(x)));
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_LE(std::fabs(got[i] - want[i]), 1e-6 + 3e-5 * max_ref)
                  << isa << " " << KvDtypeName(dtype) << " window=" << window << " n=" << n;
            }
            // Partitions, merged with each row's sink.
            const int np = AttentionPartitions(n), p0 = AttentionTileFirstPartition(t);
            const size_t pf = AttentionPartialFloats(head_dim);
            std::vector<float> partials(static_cast<size_t>(np) * group * pf);
            for (int p = p0; p < np; ++p) {
              AttendTilePartition(t, a.view, scale, p, partials.data() + p * group * pf);
            }
            for (int g = 0; g < group; ++g) {
              MergeAttentionPartials(partials.data() + (static_cast<size_t>(p0) * group + g) * pf,
                                     np - p0, static_cast<int64_t>(group * pf), head_dim,
                                     merged.data() + g * head_dim, nullptr, sinks[g]);
            }
            ASSERT_EQ(0, std::memcmp(merged.data(), got.data(), got.size() * sizeof(float)))
                << isa << " " << KvDtypeName(dtype) << " window=" << window << " n=" << n;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvserve

namespace kvserve {
namespace {

// H2O / SnapKV scores: AccumulateAttentionScores gathers, per slot, the probabilities of a
// tile's rows from first_token on, summed over the query group, in fixed point. Against the
// reference's probabilities (double sums), for every K type and ISA, with the lse of AttendTile
// and of the split path (partitions merged), and bit-identical however the tokens are tiled.
TEST(AttentionScores, MatchReferenceProbabilitiesAndDoNotDependOnTiling) {
  IsaGuard guard;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int d = 64, group = 2, bs = 16, first_slots = 500, tokens = 40, first_token = 7;
  const int slots = first_slots + tokens - 1;
  for (const std::string& isa : Isas()) {
    ASSERT_TRUE(SetAttentionIsa(isa));
    for (KvDtype dtype : kAllKvDtypes) {
      if (!Supports(dtype, d)) continue;
      Arena a(dtype, d, bs, 1, slots, rng);
      std::vector<float> q(static_cast<size_t>(tokens) * group * d);
      for (float& x : q) x = nd(rng) * 0.5f;
      std::vector<float> out(q.size()), lse(static_cast<size_t>(tokens) * group);
      const float scale = 0.125f;
      // The reference: per token, its group's probabilities, summed in double.
      std::vector<double> want(static_cast<size_t>(slots), 0.0);
      std::vector<float> scratch(AttentionScratchFloats(slots, group, d));
      for (int j = first_token; j < tokens; ++j) {
        const int n = first_slots + j;
        ReferenceProbabilities(q.data() + static_cast<size_t>(j) * group * d, group, 0, a.view,
                               a.table, n, scale, scratch.data());
        for (int g = 0; g < group; ++g) {
          for (int s = 0; s < n; ++s) want[s] += scratch[static_cast<size_t>(g) * n + s];
        }
      }
      // Whole tile, then the same tokens in tiles of 3 (lse per tile).
      auto run = [&](int tile_tokens) {
        std::vector<int64_t> acc(static_cast<size_t>(slots), 0);
        for (int j0 = 0; j0 < tokens; j0 += tile_tokens) {
          AttentionTile t;
          t.q = q.data() + static_cast<size_t>(j0) * group * d;
          t.q_stride = group * d;
          t.out = out.data() + static_cast<size_t>(j0) * group * d;
          t.out_stride = group * d;
          t.num_tokens = std::min(tile_tokens, tokens - j0);
          t.group = group;
          t.first_slots = first_slots + j0;
          t.block_table = a.table;
          t.lse = lse.data() + static_cast<size_t>(j0) * group;
          AttendTile(t, a.view, scale);
          AccumulateAttentionScores(t, a.view, scale, std::max(0, first_token - j0), acc.data());
        }
        return acc;
      };
      const std::vector<int64_t> whole = run(tokens), tiled = run(3);
      EXPECT_EQ(whole, tiled) << isa << " " << KvDtypeName(dtype);
      double total = 0;
      for (int s = 0; s < slots; ++s) {
        const double got = static_cast<double>(whole[s]) / kAttentionScoreFixedOne;
        // Float probabilities, each rounded down to 2^-24: within 1e-4 of the reference's sum.
        ASSERT_NEAR(got, want[s], 1e-4 + 1e-4 * want[s]) << isa << " " << KvDtypeName(dtype)
                                                          << " slot " << s;
        total += got;
      }
      // Each row's probabilities sum to 1, less up to 2^-24 per slot rounded down.
      const int rows = (tokens - first_token) * group;
      EXPECT_NEAR(total, rows, 1e-4 + static_cast<double>(rows) * slots / kAttentionScoreFixedOne);
    }
  }
}

}  // namespace
}  // namespace kvserve
