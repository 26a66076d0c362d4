#include "ops/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "ops/act_quant.h"

namespace kvserve {
namespace {

struct Quantized {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

Quantized MakeWeights(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> values(rows * cols);
  for (float& v : values) v = u(rng);
  Quantized q;
  const uint64_t row_bytes = *RowBytes(type, cols);
  q.bytes.resize(row_bytes * rows);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(QuantizeRow(type, values.data() + r * cols, q.bytes.data() + r * row_bytes, cols));
  }
  q.w = WeightMatrix{type, q.bytes.data(), rows, cols, row_bytes};
  return q;
}

// Largest error relative to the magnitude of the terms summed: |got - want| / sum |w_rc x_tc|.
// (Relative to |want| alone a single output near zero, after cancellation, would look huge.)
double MaxRelError(const WeightMatrix& w, const float* x, int64_t tokens,
                   const std::vector<float>& got, const std::vector<float>& want) {
  std::vector<float> row(w.cols);
  double worst = 0;
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeWeightRow(w, r, row.data());
    for (int64_t t = 0; t < tokens; ++t) {
      double mag = 0;
      for (int64_t c = 0; c < w.cols; ++c) mag += std::fabs(row[c] * x[t * w.cols + c]);
      const double err = std::fabs(static_cast<double>(got[t * w.rows + r]) - want[t * w.rows + r]);
      worst = std::max(worst, err / std::max(mag, 1e-30));
    }
  }
  return worst;
}

// What the kernels see of x: on the integer paths the activations are quantized per token, so
// the exact answer to compare with is the product with the dequantized activations.
std::vector<float> EffectiveActivations(GgmlType type, const std::vector<float>& x,
                                        int64_t tokens, int64_t cols) {
  if (MatMulIsa() == "generic") return x;
  std::vector<int8_t> q(x.size());
  std::vector<float> out(x.size());
  if (type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0 || type == GgmlType::kMXFP4 ||
      type == GgmlType::kQ4_1 || type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1) {
    std::vector<float> d(x.size() / 32);
    ActQ8_0 a{q.data(), d.data(), cols};
    QuantizeActQ8_0(x.data(), tokens, a);
    for (size_t i = 0; i < x.size(); ++i) out[i] = q[i] * d[i / 32];
    return out;
  }
  if (type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K) {
    std::vector<float> d(x.size() / 256);
    std::vector<int16_t> bsum(x.size() / 16);
    ActQ8K a{q.data(), d.data(), bsum.data(), cols};
    QuantizeActQ8K(x.data(), tokens, a);
    for (size_t i = 0; i < x.size(); ++i) out[i] = q[i] * d[i / 256];
    return out;
  }
  return x;
}

class MatMulTest : public ::testing::TestWithParam<GgmlType> {
 protected:
  void TearDown() override { SetMatMulIsa("best"); }
};

TEST_P(MatMulTest, MatchesReferenceOverShapesAndThreadCounts) {
  const GgmlType type = GetParam();
  const int64_t block = Traits(type).block_elems;
  std::mt19937 rng(42);
  for (const char* isa : {"generic", "avx2", "avx512"}) {
  if (!SetMatMulIsa(isa)) continue;
  SCOPED_TRACE(isa);
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (int64_t cols : {block, 2 * block, 5 * block, 256 * ((block + 255) / 256) * 3}) {
      for (int64_t rows : {1, 3, 17, 64}) {
        Quantized q = MakeWeights(type, rows, cols, rng);
        for (int64_t tokens : {1, 2, 5, 9}) {
          std::vector<float> x(tokens * cols);
          std::uniform_real_distribution<float> u(-1.f, 1.f);
          for (float& v : x) v = u(rng);
          std::vector<float> got(tokens * rows), want(tokens * rows);
          MatMul(q.w, x.data(), tokens, got.data(), pool);
          const std::vector<float> xe = EffectiveActivations(type, x, tokens, cols);
          MatMulReference(q.w, xe.data(), tokens, want.data());
          ASSERT_LT(MaxRelError(q.w, xe.data(), tokens, got, want), 1e-6)
              << Traits(type).name << " rows=" << rows << " cols=" << cols << " tokens=" << tokens
              << " threads=" << threads;
        }
      }
    }
  }
  }
}

TEST_P(MatMulTest, QuantizedActivationsStayCloseToTheFloatProduct) {
  // The end-to-end cost of quantizing activations: bounded by the int8 rounding of x.
  const GgmlType type = GetParam();
  const int64_t cols = 512, rows = 24, tokens = 3;
  std::mt19937 rng(11);
  Quantized q = MakeWeights(type, rows, cols, rng);
  std::vector<float> x(tokens * cols);
  std::normal_distribution<float> n(0.f, 1.f);
  for (float& v : x) v = n(rng);
  ThreadPool pool(1);
  std::vector<float> got(tokens * rows), want(tokens * rows);
  MatMul(q.w, x.data(), tokens, got.data(), pool);
  MatMulReference(q.w, x.data(), tokens, want.data());
  // Rounding x to 1/127 of its block maximum moves each product by at most 0.4% of |w| amax.
  EXPECT_LT(MaxRelError(q.w, x.data(), tokens, got, want), 2e-2);
}

TEST_P(MatMulTest, ATokensResultDoesNotDependOnTheRestOfTheBatch) {
  // Batches of every tile shape: 4-token tiles, the paired Q8_0 path from 5 tokens on (8-token
  // tiles and their remainders), and for Q8_0 an odd number of blocks (a last unpaired block).
  const GgmlType type = GetParam();
  const int64_t rows = 37, tokens = 19;
  std::vector<int64_t> col_counts = {2 * 256};
  if (type == GgmlType::kQ8_0) col_counts.push_back(17 * 32);
  for (const int64_t cols : col_counts) {
    std::mt19937 rng(3);
    Quantized q = MakeWeights(type, rows, cols, rng);
    std::vector<float> x(tokens * cols);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (float& v : x) v = u(rng);
    ThreadPool pool(2);
    for (const char* isa : {"generic", "avx2", "avx512"}) {
      if (!SetMatMulIsa(isa)) continue;
      std::vector<float> alone(tokens * rows);
      for (int64_t t = 0; t < tokens; ++t) {
        MatMul(q.w, x.data() + t * cols, 1, alone.data() + t * rows, pool);
      }
      for (const int64_t n : {2, 4, 5, 7, 8, 9, 19}) {
        std::vector<float> batched(n * rows);
        MatMul(q.w, x.data(), n, batched.data(), pool);
        for (int64_t i = 0; i < n * rows; ++i) {
          ASSERT_EQ(alone[i], batched[i]) << isa << ": bit-identical expected, cols " << cols
                                          << ", batch " << n << ", token " << i / rows;
        }
      }
    }
  }
}

TEST(MatMulInt4Test, AvxTwoAndVnniGiveTheSameBits) {
  // Q4_0 and MXFP4 sum each block's products exactly in integers whichever instruction does it
  // (maddubs pairs or dpbusd), then in the same float order: the ISAs agree bit for bit.
  for (const GgmlType type : {GgmlType::kQ4_0, GgmlType::kMXFP4}) {
    std::mt19937 rng(5);
    const int64_t rows = 21, cols = 7 * 32, tokens = 6;
    Quantized q = MakeWeights(type, rows, cols, rng);
    std::vector<float> x(tokens * cols);
    std::normal_distribution<float> n(0.f, 1.f);
    for (float& v : x) v = n(rng);
    ThreadPool pool(2);
    if (!SetMatMulIsa("avx2") || !SetMatMulIsa("avx512")) GTEST_SKIP() << "needs AVX-512 VNNI";
    std::vector<float> a(tokens * rows), b(tokens * rows);
    SetMatMulIsa("avx2");
    MatMul(q.w, x.data(), tokens, a.data(), pool);
    SetMatMulIsa("avx512");
    MatMul(q.w, x.data(), tokens, b.data(), pool);
    SetMatMulIsa("best");
    EXPECT_EQ(a, b) << Traits(type).name;
  }
}

// --- F16 / BF16 direct kernels ---------------------------------------------------------------
// They multiply the 16-bit weights, converted exactly, with the float activations (no rounding
// of x), one vector accumulator per (row, token) over the columns and a fixed horizontal sum.

class HalfMatMulTest : public ::testing::TestWithParam<GgmlType> {
 protected:
  void TearDown() override { SetMatMulIsa("best"); }
};

std::vector<float> RandomActivations(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

TEST_P(HalfMatMulTest, MatchesReferenceOverShapesTokensAndThreads) {
  const GgmlType type = GetParam();
  std::mt19937 rng(7);
  for (const char* isa : {"generic", "avx2", "avx512"}) {
    if (!SetMatMulIsa(isa)) continue;
    SCOPED_TRACE(isa);
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      // Rows around the decode (4) and prefill (4 x panel) groupings and the 16-row thread
      // grain; columns whole vectors, partial vectors, below one vector, and across the
      // 1024-column chunks of the prefill path.
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 16}, {3, 7}, {5, 32}, {17, 24},
                                {37, 264}, {70, 520}, {33, 1000}, {6, 2056}, {4, 3000}}) {
        Quantized q = MakeWeights(type, rows, cols, rng);
        // f32 summation error bound for sum_c w*x: sequential FMAs over the vectors, the tail
        // and the horizontal sum, each at most one rounding of 2^-24 relative to sum |w x|.
        const double bound = (cols / 8 + 12) * std::ldexp(1.0, -24);
        for (int64_t tokens = 1; tokens <= 40; tokens += (tokens < 10 ? 1 : 7)) {
          const std::vector<float> x = RandomActivations(tokens * cols, rng);
          std::vector<float> got(tokens * rows), want(tokens * rows);
          MatMul(q.w, x.data(), tokens, got.data(), pool);
          MatMulReference(q.w, x.data(), tokens, want.data());
          ASSERT_LE(MaxRelError(q.w, x.data(), tokens, got, want), bound)
              << Traits(type).name << " rows=" << rows << " cols=" << cols << " tokens=" << tokens
              << " threads=" << threads;
        }
      }
    }
  }
}

TEST_P(HalfMatMulTest, OneTokenAndManyTokensAreBitIdentical) {
  // The decode path (few tokens, weights converted in registers) and the prefill path (many
  // tokens, converted panels, register tiles, column chunks) must give the same bits for every
  // token, whatever the batch, its split into chunks and the thread count.
  const GgmlType type = GetParam();
  std::mt19937 rng(5);
  for (const char* isa : {"generic", "avx2", "avx512"}) {
    if (!SetMatMulIsa(isa)) continue;
    SCOPED_TRACE(isa);
    ThreadPool one(1), three(3);
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 64}, {70, 1000}, {21, 2056}}) {
      Quantized q = MakeWeights(type, rows, cols, rng);
      const int64_t tokens = 40;
      const std::vector<float> x = RandomActivations(tokens * cols, rng);
      std::vector<float> alone(tokens * rows);
      for (int64_t t = 0; t < tokens; ++t) {
        MatMul(q.w, x.data() + t * cols, 1, alone.data() + t * rows, one);
      }
      for (int64_t n : {2, 3, 4, 5, 7, 13, 40}) {
        for (ThreadPool* pool : {&one, &three}) {
          // Tokens [0, tokens) in batches of n, like a prompt processed in chunks.
          std::vector<float> batched(tokens * rows);
          for (int64_t t0 = 0; t0 < tokens; t0 += n) {
            const int64_t nt = std::min(n, tokens - t0);
            MatMul(q.w, x.data() + t0 * cols, nt, batched.data() + t0 * rows, *pool);
          }
          for (int64_t i = 0; i < tokens * rows; ++i) {
            ASSERT_EQ(alone[i], batched[i])
                << Traits(type).name << " rows=" << rows << " cols=" << cols << " batch=" << n
                << " threads=" << pool->num_threads() << " token " << i / rows << " row "
                << i % rows;
          }
        }
      }
    }
  }
}

TEST_P(HalfMatMulTest, ActivationsAreNotRounded) {
  // x values with more precision than the weight format: a kernel that rounded x to f16/bf16
  // would be off by up to 2^-9 relative; the float kernels stay at float rounding.
  const GgmlType type = GetParam();
  const int64_t rows = 9, cols = 512, tokens = 6;
  std::mt19937 rng(9);
  Quantized q = MakeWeights(type, rows, cols, rng);
  std::vector<float> x = RandomActivations(tokens * cols, rng);
  for (float& v : x) v = 1.f + v * 1e-4f;  // all mantissa bits below bf16's matter
  ThreadPool pool(2);
  for (const char* isa : {"generic", "avx2", "avx512"}) {
    if (!SetMatMulIsa(isa)) continue;
    std::vector<float> got(tokens * rows), want(tokens * rows);
    for (int64_t n : {int64_t{1}, tokens}) {
      for (int64_t t = 0; t < tokens; t += n) {
        MatMul(q.w, x.data() + t * cols, n, got.data() + t * rows, pool);
      }
      MatMulReference(q.w, x.data(), tokens, want.data());
      EXPECT_LT(MaxRelError(q.w, x.data(), tokens, got, want), 1e-5) << isa << " batch " << n;
    }
  }
}

// --- Packed Q8_0, Q4_0 and MXFP4 (PackWeights) ------------------------------------------------
// On AVX-512 VNNI CPUs Q8_0, Q4_0 and MXFP4 matrices are repacked in groups of 16 interleaved rows;
// where AMX exists, Q8_0's whole 16-token tiles go through its tile product and the other
// tokens through VNNI.

// The ISAs with a packed kernel for `type` on this CPU (Q4_0: "avx2" too).
std::vector<const char*> PackedIsas(GgmlType type = GgmlType::kQ8_0) {
  std::vector<const char*> out;
  const int64_t cols = 2 * Traits(type).block_elems;
  std::vector<uint8_t> bytes(static_cast<size_t>(*RowBytes(type, cols)));
  const WeightMatrix probe{type, bytes.data(), 1, cols, bytes.size()};
  for (const char* isa : {"avx2", "avx512", "amx"}) {
    if (SetMatMulIsa(isa) && PackedWeightBytes(probe) > 0) out.push_back(isa);
  }
  SetMatMulIsa("best");
  return out;
}

struct PackedWeights {
  Quantized q;
  AlignedBuffer<uint8_t> packed;
};

PackedWeights MakePacked(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  PackedWeights p{MakeWeights(type, rows, cols, rng), {}};
  p.packed = PackWeights(p.q.w);
  p.q.w.packed = p.packed.data();
  return p;
}

// Column counts for the packed tests: odd and even block counts, one block, long rows.
std::vector<int64_t> PackedCols(GgmlType type) {
  const int64_t b = Traits(type).block_elems;
  return b == 256 ? std::vector<int64_t>{256, 3 * 256, 8 * 256}
                  : std::vector<int64_t>{32, 64, 17 * 32, 96 * 32};
}

class PackedMatMulTest : public ::testing::TestWithParam<GgmlType> {
 protected:
  void TearDown() override { SetMatMulIsa("best"); }
};

TEST(PackedWeightsTest, OnlyCpusWithAPackedKernelPackATypeAndWithTheLayoutsSize) {
  std::mt19937 rng(1);
  Quantized q5_1 = MakeWeights(GgmlType::kQ5_1, 16, 256, rng);
  EXPECT_EQ(PackWeights(q5_1.w).size(), 0u);
  Quantized q4k = MakeWeights(GgmlType::kQ4_K, 17, 512, rng);
  Quantized q5k = MakeWeights(GgmlType::kQ5_K, 17, 512, rng);
  Quantized q6k = MakeWeights(GgmlType::kQ6_K, 17, 512, rng);
  Quantized mx = MakeWeights(GgmlType::kMXFP4, 17, 64, rng);
  Quantized q8 = MakeWeights(GgmlType::kQ8_0, 17, 64, rng);
  Quantized q4 = MakeWeights(GgmlType::kQ4_0, 17, 64, rng);
  ASSERT_TRUE(SetMatMulIsa("generic"));
  EXPECT_EQ(PackWeights(q8.w).size(), 0u);
  EXPECT_EQ(PackWeights(q4.w).size(), 0u);
  EXPECT_EQ(PackWeights(mx.w).size(), 0u);
  EXPECT_EQ(PackWeights(q6k.w).size(), 0u);
  // Two groups of 16 rows (the second padded), each one pair of blocks: both blocks' values
  // (16 x 32 bytes for Q8_0, 16 x 16 for Q4_0) and 2 x 16 scales of 2 bytes.
  if (SetMatMulIsa("avx2")) {  // Q4_0 and MXFP4: Q8_0's w + 128 does not fit maddubs
    EXPECT_EQ(PackWeights(q8.w).size(), 0u);
    EXPECT_EQ(PackWeights(q4k.w).size(), 0u);
    EXPECT_EQ(PackWeights(q6k.w).size(), 0u);
    EXPECT_EQ(PackWeights(q4.w).size(), 2u * 576u);
    EXPECT_EQ(PackWeights(mx.w).size(), 2u * 576u);
  }
  if (SetMatMulIsa("avx512")) {  // MXFP4: Q4_0's layout, the exponent bytes in the scale slots
    EXPECT_EQ(PackWeights(q8.w).size(), 2u * 1088u);
    EXPECT_EQ(PackWeights(q4.w).size(), 2u * 576u);
    EXPECT_EQ(PackWeights(mx.w).size(), 2u * 576u);
    // K-quants: two groups of two super-blocks, each 16 rows' copies side by side.
    EXPECT_EQ(PackWeights(q4k.w).size(), 2u * 2u * 2368u);
    EXPECT_EQ(PackWeights(q5k.w).size(), 2u * 2u * 2880u);
    EXPECT_EQ(PackWeights(q6k.w).size(), 2u * 2u * 3392u);
  }
  SetMatMulIsa("best");
}

// y = w x under kernels `isa` (then back to the best), for tests that compare two ISAs.
std::vector<float> ProductUnder(const char* isa, const WeightMatrix& w, const std::vector<float>& x,
                                int64_t tokens) {
  ThreadPool pool(2);
  std::vector<float> y(tokens * w.rows);
  EXPECT_TRUE(SetMatMulIsa(isa));
  MatMul(w, x.data(), tokens, y.data(), pool);
  SetMatMulIsa("best");
  return y;
}

TEST(PackedWeightsTest, PackedQ4_0AndMxfp4GiveTheSameBitsWithAvxTwoAndVnni) {
  // maddubs pairs or dpbusd: the same exact block sums, the same float epilogue per lane.
  if (!SetMatMulIsa("avx2") || !SetMatMulIsa("avx512")) GTEST_SKIP() << "needs AVX-512 VNNI";
  const int64_t rows = 37, cols = 11 * 32, tokens = 7;
  std::mt19937 rng(6);
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kMXFP4}) {
    PackedWeights p = MakePacked(type, rows, cols, rng);
    const std::vector<float> x = RandomActivations(tokens * cols, rng);
    EXPECT_EQ(ProductUnder("avx2", p.q.w, x, tokens), ProductUnder("avx512", p.q.w, x, tokens))
        << Traits(type).name;
  }
}

// Packs q's matrix and expects its product with x (tokens rows) under each of `isas` to match
// the reference over the activations the kernels see: the block sums are integers, so to
// rounding.
void ExpectPackedMatchesTheReference(Quantized& q, const std::vector<float>& x, int64_t tokens,
                                     const std::vector<const char*>& isas) {
  AlignedBuffer<uint8_t> packed = PackWeights(q.w);
  q.w.packed = packed.data();
  const std::vector<float> xe = EffectiveActivations(q.w.type, x, tokens, q.w.cols);
  std::vector<float> want(tokens * q.w.rows);
  MatMulReference(q.w, xe.data(), tokens, want.data());
  for (const char* isa : isas) {
    std::vector<float> got(tokens * q.w.rows);
    ASSERT_TRUE(SetMatMulIsa(isa));
    ThreadPool pool(1);
    MatMul(q.w, x.data(), tokens, got.data(), pool);
    EXPECT_LT(MaxRelError(q.w, xe.data(), tokens, got, want), 1e-6) << isa;
  }
  SetMatMulIsa("best");
  q.w.packed = nullptr;
}

TEST(PackedWeightsTest, PackedQ8_0TakesEveryWeightByte) {
  // Every int8 value in the file, -128 included (stored as the byte 0 after the +128), against
  // activations at +-127. The block sums are integers, so the products equal the reference to
  // rounding.
  const std::vector<const char*> isas = PackedIsas(GgmlType::kQ8_0);
  if (isas.empty()) GTEST_SKIP() << "needs a packed Q8_0 kernel";
  const int64_t rows = 24, cols = 8 * 32, tokens = 3;
  std::mt19937 rng(9);
  Quantized q = MakeWeights(GgmlType::kQ8_0, rows, cols, rng);
  auto* blocks = reinterpret_cast<BlockQ8_0*>(q.bytes.data());
  for (int64_t i = 0; i < rows * cols; ++i) {
    blocks[i / 32].qs[i % 32] = static_cast<int8_t>(static_cast<uint8_t>(i * 37 + i / 256));
  }
  std::vector<float> x(tokens * cols);
  for (int64_t i = 0; i < tokens * cols; ++i) x[i] = i % 3 == 0 ? -1.f : (i % 3 == 1 ? 1.f : 0.5f);
  ExpectPackedMatchesTheReference(q, x, tokens, isas);
}

TEST(PackedWeightsTest, PackedKQuantsTakeTheLargestValuesScalesAndMins) {
  // Every nibble, fifth or sixth bit set, every 6-bit scale and min at 63 (Q6_K's int8 scales
  // at -128 and 127), activations at +-127: the int32 super-block sums and the int16 pair sums
  // at their bounds, still exact.
  const int64_t rows = 18, cols = 2 * 256, tokens = 3;
  std::vector<float> x(tokens * cols);
  for (int64_t i = 0; i < tokens * cols; ++i) x[i] = i < cols || i % 5 == 0 ? 1.f : -1.f;
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const std::vector<const char*> isas = PackedIsas(type);
    if (isas.empty()) GTEST_SKIP() << "needs a packed K-quant kernel";
    std::mt19937 rng(11);
    Quantized q = MakeWeights(type, rows, cols, rng);
    for (int64_t r = 0; r < rows; ++r) {
      uint8_t* row = q.bytes.data() + r * q.w.row_bytes;
      for (int64_t s = 0; s < cols / 256; ++s) {
        if (type == GgmlType::kQ6_K) {
          auto* b = reinterpret_cast<BlockQ6_K*>(row) + s;
          std::memset(b->ql, 0xFF, sizeof b->ql);
          std::memset(b->qh, r % 2 == 0 ? 0xFF : 0x00, sizeof b->qh);  // 63 or 15: +31 / -17
          for (int k = 0; k < 16; ++k) b->scales[k] = static_cast<int8_t>(k % 2 == 0 ? -128 : 127);
        } else if (type == GgmlType::kQ5_K) {
          auto* b = reinterpret_cast<BlockQ5_K*>(row) + s;
          std::memset(b->scales, 0xFF, sizeof b->scales);  // every scale and min 63
          std::memset(b->qs, 0xFF, sizeof b->qs);
          std::memset(b->qh, 0xFF, sizeof b->qh);
        } else {
          auto* b = reinterpret_cast<BlockQ4_K*>(row) + s;
          std::memset(b->scales, 0xFF, sizeof b->scales);
          std::memset(b->qs, 0xFF, sizeof b->qs);
        }
      }
    }
    SCOPED_TRACE(Traits(type).name);
    ExpectPackedMatchesTheReference(q, x, tokens, isas);
  }
}

TEST(PackedWeightsTest, Mxfp4ExponentsFromSubnormalToLargeMatchTheReference) {
  // The packed kernels decode E8M0 bytes themselves: 2^(e - 128) for e >= 2, subnormal below.
  if (!SetMatMulIsa("avx2")) GTEST_SKIP() << "needs AVX2";
  SetMatMulIsa("best");
  const int64_t rows = 20, cols = 4 * 32, tokens = 3;
  std::mt19937 rng(9);
  PackedWeights p = MakePacked(GgmlType::kMXFP4, rows, cols, rng);
  const uint8_t exps[] = {0, 1, 2, 3, 100, 127, 128, 180, 230};
  for (int64_t r = 0; r < rows; ++r) {  // every row one exponent for all its blocks
    auto* blocks = reinterpret_cast<BlockMXFP4*>(p.q.bytes.data() + r * p.q.w.row_bytes);
    for (int64_t b = 0; b < cols / 32; ++b) blocks[b].e = exps[r % std::size(exps)];
  }
  p.packed = PackWeights(p.q.w);
  p.q.w.packed = p.packed.data();
  const std::vector<float> x = RandomActivations(tokens * cols, rng);
  ThreadPool pool(2);
  for (const char* isa : PackedIsas(GgmlType::kMXFP4)) {
    std::vector<float> got(tokens * rows), want(tokens * rows);
    ASSERT_TRUE(SetMatMulIsa(isa));
    MatMul(p.q.w, x.data(), tokens, got.data(), pool);
    const std::vector<float> xe = EffectiveActivations(GgmlType::kMXFP4, x, tokens, cols);
    SetMatMulIsa("best");
    MatMulReference(p.q.w, xe.data(), tokens, want.data());
    EXPECT_LT(MaxRelError(p.q.w, xe.data(), tokens, got, want), 1e-6) << isa;
    // Near 2^-126, d_w * d_x is a subnormal float and keeps fewer bits, so the rows with the
    // smallest exponents are held to 1% (a scale decoded wrong is off by a power of two).
    for (int64_t i = 0; i < tokens * rows; ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-2 * std::fabs(want[i])) << isa << " row " << i % rows;
    }
  }
}

TEST_P(PackedMatMulTest, MatchesReferenceOverShapesTokensAndThreads) {
  const GgmlType type = GetParam();
  const std::vector<const char*> isas = PackedIsas(type);
  if (isas.empty()) GTEST_SKIP() << "needs AVX-512 VNNI";
  std::mt19937 rng(42);
  for (const char* isa : isas) {
    SCOPED_TRACE(isa);
    ASSERT_TRUE(SetMatMulIsa(isa));
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      for (int64_t cols : PackedCols(type)) {
        for (int64_t rows : {1, 3, 16, 17, 40}) {
          PackedWeights p = MakePacked(type, rows, cols, rng);
          for (int64_t tokens : {1, 2, 5, 9, 16, 21, 33, 80}) {
            std::vector<float> x(tokens * cols);
            std::uniform_real_distribution<float> u(-1.f, 1.f);
            for (float& v : x) v = u(rng);
            std::vector<float> got(tokens * rows), want(tokens * rows);
            MatMul(p.q.w, x.data(), tokens, got.data(), pool);
            const std::vector<float> xe = EffectiveActivations(type, x, tokens, cols);
            MatMulReference(p.q.w, xe.data(), tokens, want.data());
            ASSERT_LT(MaxRelError(p.q.w, xe.data(), tokens, got, want), 1e-6)
                << "rows=" << rows << " cols=" << cols << " tokens=" << tokens
                << " threads=" << threads;
          }
        }
      }
    }
  }
}

TEST_P(PackedMatMulTest, ATokensResultDoesNotDependOnTheRestOfTheBatch) {
  // Token tiles of 8 and their remainders, token chunks (256 with AVX-512), a thread's groups
  // taken two at a time (4-token tiles; one thread takes all the rows, two threads one group each
  // here) with a last odd group alone, and with AMX 16-token tiles with VNNI for the rest: a token
  // alone and in any batch gives the same bits.
  const std::vector<const char*> isas = PackedIsas(GetParam());
  if (isas.empty()) GTEST_SKIP() << "needs AVX-512 VNNI";
  const int64_t cols = 9 * Traits(GetParam()).block_elems, tokens = 300;
  std::mt19937 rng(3);
  std::vector<float> x(tokens * cols);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& v : x) v = u(rng);
  for (const int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const int64_t rows : {37, 83}) {
      PackedWeights p = MakePacked(GetParam(), rows, cols, rng);
      for (const char* isa : isas) {
        ASSERT_TRUE(SetMatMulIsa(isa));
        std::vector<float> alone(tokens * rows);
        for (int64_t t = 0; t < tokens; ++t) {
          MatMul(p.q.w, x.data() + t * cols, 1, alone.data() + t * rows, pool);
        }
        for (const int64_t n : {2, 7, 8, 9, 16, 17, 31, 32, 65, 83, 257, 300}) {
          std::vector<float> batched(n * rows);
          MatMul(p.q.w, x.data(), n, batched.data(), pool);
          for (int64_t i = 0; i < n * rows; ++i) {
            ASSERT_EQ(alone[i], batched[i])
                << isa << ": bit-identical expected, threads " << threads << ", rows " << rows
                << ", batch " << n << ", token " << i / rows;
          }
        }
      }
    }
  }
}

TEST(PackedWeightsTest, AmxTilesAndVnniGiveTheSameBits) {
  if (!SetMatMulIsa("amx")) GTEST_SKIP() << "needs AMX-INT8 (and Linux's grant of it)";
  const int64_t rows = 50, cols = 33 * 32, tokens = 48;
  std::mt19937 rng(8);
  PackedWeights p = MakePacked(GgmlType::kQ8_0, rows, cols, rng);
  const std::vector<float> x = RandomActivations(tokens * cols, rng);
  EXPECT_EQ(ProductUnder("amx", p.q.w, x, tokens), ProductUnder("avx512", p.q.w, x, tokens));
}

TEST_P(PackedMatMulTest, OtherIsasReadTheMatrixAsStored) {
  // Packed weights stay valid beside the file's: kernels without a packed form read `data`.
  const std::vector<const char*> isas = PackedIsas(GetParam());
  if (isas.empty()) GTEST_SKIP() << "needs a packed kernel";
  ASSERT_TRUE(SetMatMulIsa(isas.front()));
  const int64_t rows = 19, cols = 4 * Traits(GetParam()).block_elems, tokens = 3;
  std::mt19937 rng(4);
  PackedWeights p = MakePacked(GetParam(), rows, cols, rng);
  const std::vector<float> x = RandomActivations(tokens * cols, rng);
  ThreadPool pool(1);
  for (const char* isa : {"avx2", "generic"}) {
    if (!SetMatMulIsa(isa) || PackedWeightBytes(p.q.w) > 0) continue;
    std::vector<float> with(tokens * rows), without(tokens * rows);
    MatMul(p.q.w, x.data(), tokens, with.data(), pool);
    WeightMatrix plain = p.q.w;
    plain.packed = nullptr;
    MatMul(plain, x.data(), tokens, without.data(), pool);
    EXPECT_EQ(with, without) << isa;
  }
}

INSTANTIATE_TEST_SUITE_P(PackedTypes, PackedMatMulTest,
                         ::testing::Values(GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kMXFP4,
                                           GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K),
                         [](const auto& p) { return std::string(Traits(p.param).name); });

INSTANTIATE_TEST_SUITE_P(HalfTypes, HalfMatMulTest,
                         ::testing::Values(GgmlType::kF16, GgmlType::kBF16),
                         [](const auto& p) { return std::string(Traits(p.param).name); });

INSTANTIATE_TEST_SUITE_P(AllTypes, MatMulTest,
                         ::testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16,
                                           GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1,
                                           GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ4_K,
                                           GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kMXFP4),
                         [](const auto& p) { return std::string(Traits(p.param).name); });

// --- Activation quantization ------------------------------------------------------------------

// Whether x * id rounded to float, then +-0.5 added, truncates to another integer than the
// product and the add fused into one rounding (the double holds both exactly).
bool FusedRoundingDiffers(float x, float id) {
  const float v = x * id;
  const float half = v >= 0.f ? 0.5f : -0.5f;
  const float fused = static_cast<float>(static_cast<double>(x) * id + half);
  return static_cast<int>(v + half) != static_cast<int>(fused);
}

// Tokens of 512 values that exercise the rounding: random, all zero, halfway cases (a block
// maximum of 127 makes 1 / d exactly 1, so k + 0.5 and the float just below 0.5 reach the
// rounding as they are), tiny and huge magnitudes, signed zeros, and values whose x * (1 / d)
// lands next to +-0.5 where rounding the product before the add (the scalar code) and fusing
// the two give different bytes (searched for; each super-block of 256 one maximum, so the 32-
// and 256-value blocks share d).
std::vector<float> QuantizationInputs(int64_t cols, int64_t& tokens) {
  tokens = 6;
  std::vector<float> x(tokens * cols, 0.f);
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.f, 1.f);
  for (int64_t i = 0; i < cols; ++i) x[i] = n(rng);  // token 0; token 1 stays zero
  float* ties = x.data() + 2 * cols;
  for (int64_t i = 0; i < cols; ++i) ties[i] = static_cast<float>(i % 254) - 126.5f;
  for (int64_t b = 0; b < cols; b += 32) {
    ties[b] = 127.f;
    ties[b + 1] = 0.49999997f;
    ties[b + 2] = -0.49999997f;
    ties[b + 3] = -0.f;
    ties[b + 4] = -0.5f;
  }
  for (int64_t i = 0; i < cols; ++i) x[3 * cols + i] = n(rng) * 1e-30f;
  for (int64_t i = 0; i < cols; ++i) x[4 * cols + i] = (i % 7 == 0 ? -0.f : n(rng) * 1e30f);
  float* near_half = x.data() + 5 * cols;
  float amax = 100.f;
  for (int64_t s = 0; s < cols / 256; ++s) {
    std::vector<float> found;
    for (int tries = 0; found.empty() && tries < 100000;
         ++tries, amax = std::nextafter(amax, 200.f)) {
      const float d = amax / 127.f, id = 1.f / d;
      for (const float sign : {1.f, -1.f}) {
        float v = sign * 0.5f * d;
        for (int k = 0; k < 64; ++k) v = std::nextafter(v, 0.f);
        for (int k = 0; k < 128; ++k, v = std::nextafter(v, sign * 2.f)) {
          if (FusedRoundingDiffers(v, id)) found.push_back(v);
        }
      }
      if (found.empty()) continue;
      for (int64_t i = 0; i < 256; ++i) {
        near_half[s * 256 + i] = i % 32 == 0 ? amax : found[static_cast<size_t>(i) % found.size()];
      }
    }
  }
  return x;
}

TEST(ActivationQuantizationTest, VectorVersionsWriteTheScalarBytes) {
  const int64_t cols = 512;
  int64_t tokens = 0;
  const std::vector<float> x = QuantizationInputs(cols, tokens);
  std::vector<int8_t> q0(tokens * cols), k0(tokens * cols);
  std::vector<float> d0(tokens * cols / 32), kd0(tokens * cols / 256);
  std::vector<int16_t> bsum0(tokens * cols / 16);
  std::vector<uint8_t> qu0(tokens * cols);
  ActQ8_0 a0{q0.data(), d0.data(), cols};
  QuantizeActQ8_0(x.data(), tokens, a0);
  ActQ8K b0{k0.data(), kd0.data(), bsum0.data(), cols};
  b0.qu = qu0.data();
  QuantizeActQ8K(x.data(), tokens, b0);
  int checked = 0;
  for (const char* isa : {"avx2", "avx512"}) {
    if (!SetMatMulIsa(isa)) continue;
    SCOPED_TRACE(isa);
    ++checked;
    std::vector<int8_t> q(tokens * cols, 1), k(tokens * cols, 1);
    std::vector<float> d(d0.size(), -1.f), kd(kd0.size(), -1.f);
    std::vector<int16_t> bsum(bsum0.size(), -1);
    std::vector<uint8_t> qu(tokens * cols, 1);
    ActQ8_0 a{q.data(), d.data(), cols};
    QuantizeActQ8_0ForIsa(x.data(), tokens, a);
    EXPECT_EQ(q, q0);
    EXPECT_EQ(0, std::memcmp(d.data(), d0.data(), d.size() * sizeof(float)));
    ActQ8K b{k.data(), kd.data(), bsum.data(), cols};
    b.qu = qu.data();
    QuantizeActQ8KForIsa(x.data(), tokens, b);
    EXPECT_EQ(k, k0);
    EXPECT_EQ(0, std::memcmp(kd.data(), kd0.data(), kd.size() * sizeof(float)));
    EXPECT_EQ(bsum, bsum0);
    EXPECT_EQ(qu, qu0);
  }
  SetMatMulIsa("best");
  // Token 5 holds values where fusing the product into the add would change the bytes.
  int fused_differs = 0;
  for (int64_t i = 0; i < cols; ++i) {
    const float amax = x[5 * cols + i / 32 * 32];
    if (amax == 0.f) continue;  // a super-block the search left empty
    fused_differs += FusedRoundingDiffers(x[5 * cols + i], 1.f / (amax / 127.f)) ? 1 : 0;
  }
  EXPECT_GT(fused_differs, 0);
  // The scalar reference itself: halfway cases round away from zero (-0.5, -121.5, -120.5).
  EXPECT_EQ(d0[2 * cols / 32], 1.f);
  EXPECT_EQ(q0[2 * cols + 4], -1);
  EXPECT_EQ(q0[2 * cols + 5], -122);
  EXPECT_EQ(q0[2 * cols + 6], -121);
  if (checked == 0) GTEST_SKIP() << "needs AVX2";
}

}  // namespace
}  // namespace kvserve
