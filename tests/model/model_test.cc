// Model::Forward as a specification: batching and chunking never change the numbers, and bad
// files or batches are clear errors.
#include "model/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "engine/synthetic_model.h"
#include "kv/block_pool.h"

namespace kvserve {
namespace {

std::unique_ptr<Model> MakeModel(SyntheticModelSpec spec, int max_batch_tokens = 64,
                                 MlaForm form = MlaForm::kAbsorbed) {
  auto writer = BuildSyntheticModel(spec);
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  auto file = GgufFile::FromBytes(*writer->WriteToBytes());
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  auto model = Model::Load(std::move(file).value(), ModelOptions{max_batch_tokens, 0, form});
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return std::move(model).value();
}

// An architecture by name, or a variant: "mixtral" (llama with experts), "deepseek2" (V2-Lite
// style: full attn_q, combined attn_kv_b, softmax router, a shared expert, a leading dense
// layer), "deepseek2-qlora" (V3 style: low-rank query, split attn_k_b / attn_v_b, sigmoid router
// with a selection bias, renormalised and scaled weights, YaRN); "gemma2-swa" (every other
// layer a 5-slot window, soft-capped scores and logits), "gemma3-swa" (five local layers of 5
// slots then a global one, local rope base 10000, global 1e6 with linear scaling),
// "mistral-swa" (llama with a 5-slot window on every layer), "phi3" (fused attn_qkv and
// gate|up, LongRoPE factor sets over an original context of 16, a 5-slot window).
SyntheticModelSpec SmallSpec(std::string_view name) {
  SyntheticModelSpec s;
  s.arch = std::string(name);
  s.num_layers = 2;
  s.hidden = 64;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.ffn = 96;
  s.tokenizer = MakeSyntheticSpec(300);
  if (name == "mixtral" || name == "qwen3moe") {
    s.arch = name == "mixtral" ? "llama" : "qwen3moe";
    s.moe.num_experts = 8;
    s.moe.num_used = 2;
    s.moe.expert_ffn = name == "mixtral" ? 0 : 32;  // Mixtral's experts have ffn rows
    if (name == "mixtral") s.ffn = 48;
  } else if (name == "gpt-oss") {
    // Every other layer a 5-slot window, sinks, biases, 4 experts of 32 (2 used) chosen by a
    // softmax over their logits, the clamped SwiGLU, YaRN.
    s.sliding_window = 5;
    s.head_dim = 32;
    s.moe = {.num_experts = 4, .num_used = 2, .expert_ffn = 32};
    s.yarn_factor = 4.f;
    s.yarn_original_context = 16;
  } else if (name == "phi3") {
    s.sliding_window = 5;
    s.context_length = 64;
    s.rope_original_context = 16;
  } else if (name.ends_with("-swa")) {
    s.arch = name == "mistral-swa" ? "llama" : std::string(name.substr(0, 6));
    s.sliding_window = 5;
    if (name == "gemma2-swa") {
      s.attn_softcap = 3.f;
      s.final_softcap = 4.f;
    } else if (name == "gemma3-swa") {
      s.num_layers = 6;
      s.head_dim = 32;
      s.rope_base = 1e6f;
    }
  } else if (name.starts_with("deepseek2")) {
    s.arch = "deepseek2";
    s.num_layers = 3;
    s.moe = {.num_experts = 8, .num_used = 3, .expert_ffn = 32, .num_shared = 1, .leading_dense = 1};
    s.mla = {.q_lora_rank = 0, .kv_lora_rank = 32, .qk_nope = 16, .qk_rope = 8, .v_head = 16,
             .split_kv_b = false};
    if (name == "deepseek2-qlora") {
      s.moe.gating = 2;
      s.moe.weights_norm = true;
      s.moe.weights_scale = 2.5f;
      s.moe.selection_bias = true;
      s.mla.q_lora_rank = 24;
      s.mla.split_kv_b = true;
      s.mla.yarn_factor = 4.f;
      s.mla.yarn_original_context = 64;
    }
  }
  return s;
}

std::vector<TokenId> Tokens(int n, int salt) {
  std::vector<TokenId> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + salt * 11 + 5) % 300;
  return t;
}

double MaxRelDiff(const float* a, const float* b, size_t n) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < n; ++i) {
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
    ref = std::max(ref, std::fabs(static_cast<double>(b[i])));
  }
  return err / ref;
}

struct Seq {
  std::vector<BlockId> blocks;
};

class ForwardTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    model_ = MakeModel(SmallSpec(GetParam()));
    const KvLayout layout = model_->MakeKvLayout(4, KvDtype::kF16, KvDtype::kF16);
    kv_ = std::make_unique<KvStorage>(layout, 64);
    pool_ = std::make_unique<BlockPool>(64);
  }
  std::vector<BlockId> Blocks(int tokens) {
    std::vector<BlockId> b;
    EXPECT_TRUE(pool_->AllocateN((tokens + 3) / 4, &b));
    return b;
  }
  // Logits of the last token after feeding `ids` in chunks of `chunk`.
  std::vector<float> RunAlone(const std::vector<TokenId>& ids, int chunk) {
    std::vector<BlockId> blocks = Blocks(static_cast<int>(ids.size()));
    std::vector<float> logits(model_->config().vocab);
    for (size_t b = 0; b < ids.size(); b += chunk) {
      const size_t e = std::min(ids.size(), b + chunk);
      ForwardBatch batch;
      batch.AddSequence(blocks, static_cast<int>(b),
                        std::span<const TokenId>(ids).subspan(b, e - b), true);
      EXPECT_TRUE(model_->Forward(batch, *kv_, threads_, logits.data()).ok());
    }
    for (BlockId blk : blocks) pool_->Release(blk);
    return logits;
  }

  ThreadPool threads_{2};
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvStorage> kv_;
  std::unique_ptr<BlockPool> pool_;
};

TEST_P(ForwardTest, ChunkedPrefillEqualsOneShot) {
  const std::vector<TokenId> ids = Tokens(23, 1);
  const std::vector<float> whole = RunAlone(ids, 23);
  for (int chunk : {1, 4, 7}) {
    const std::vector<float> parts = RunAlone(ids, chunk);
    // Bit-identical: no kernel's result depends on how tokens are grouped into batches.
    EXPECT_EQ(MaxRelDiff(parts.data(), whole.data(), whole.size()), 0.0) << "chunk " << chunk;
  }
}

TEST_P(ForwardTest, OneBatchOfSeveralSequencesEqualsEachAlone) {
  const int vocab = model_->config().vocab;
  const std::vector<TokenId> a = Tokens(9, 2), b = Tokens(17, 3), c = Tokens(5, 4);
  const std::vector<float> la = RunAlone(a, 9), lb = RunAlone(b, 17), lc = RunAlone(c, 5);
  // Sequence b has its first 12 tokens cached already; a and c start fresh.
  std::vector<BlockId> ba = Blocks(9), bb = Blocks(17), bc = Blocks(5);
  {
    ForwardBatch pre;
    pre.AddSequence(bb, 0, std::span<const TokenId>(b).first(12), false);
    std::vector<float> unused(vocab);
    ASSERT_TRUE(model_->Forward(pre, *kv_, threads_, unused.data()).ok());
  }
  ForwardBatch batch;
  batch.AddSequence(ba, 0, a, true);
  batch.AddSequence(bb, 12, std::span<const TokenId>(b).subspan(12), true);
  batch.AddSequence(bc, 0, c, true);
  std::vector<float> logits(3 * vocab);
  ASSERT_TRUE(model_->Forward(batch, *kv_, threads_, logits.data()).ok());
  EXPECT_EQ(MaxRelDiff(logits.data(), la.data(), vocab), 0.0);
  EXPECT_EQ(MaxRelDiff(logits.data() + vocab, lb.data(), vocab), 0.0);
  EXPECT_EQ(MaxRelDiff(logits.data() + 2 * vocab, lc.data(), vocab), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Archs, ForwardTest,
                         ::testing::Values("llama", "qwen2", "qwen3", "qwen3moe", "mixtral",
                                           "deepseek2", "deepseek2-qlora", "gemma2-swa",
                                           "gemma3-swa", "mistral-swa", "phi3", "gpt-oss"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// The last token's logits after one prefill of `ids` into a fresh cache of the given dtype.
std::vector<float> PrefillLogits(Model& model, const std::vector<TokenId>& ids, KvDtype dtype,
                                 int chunk = 0) {
  KvStorage kv(model.MakeKvLayout(4, dtype, dtype), 16);
  std::vector<BlockId> blocks;
  for (int b = 0; b < 16; ++b) blocks.push_back(BlockId(b));
  ThreadPool threads(2);
  std::vector<float> logits(model.config().vocab);
  const size_t step = chunk > 0 ? static_cast<size_t>(chunk) : ids.size();
  for (size_t b = 0; b < ids.size(); b += step) {
    const size_t e = std::min(ids.size(), b + step);
    ForwardBatch batch;
    batch.AddSequence(blocks, static_cast<int>(b), std::span<const TokenId>(ids).subspan(b, e - b),
                      true);
    const Status st = model.Forward(batch, kv, threads, logits.data());
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  return logits;
}

// Sliding windows: a prompt no longer than the window gives the same logits (bit for bit) as
// with a window past the context, a longer one does not.
TEST(SlidingWindow, OnlyPromptsLongerThanTheWindowSeeIt) {
  for (const char* name : {"gemma2-swa", "gemma3-swa", "mistral-swa"}) {
    SyntheticModelSpec narrow = SmallSpec(name), wide = SmallSpec(name);
    wide.sliding_window = 4000;
    auto a = MakeModel(narrow), b = MakeModel(wide);
    const std::vector<TokenId> short_ids = Tokens(5, 1), long_ids = Tokens(14, 1);
    EXPECT_EQ(PrefillLogits(*a, short_ids, KvDtype::kF32),
              PrefillLogits(*b, short_ids, KvDtype::kF32))
        << name;
    EXPECT_NE(PrefillLogits(*a, long_ids, KvDtype::kF32),
              PrefillLogits(*b, long_ids, KvDtype::kF32))
        << name;
  }
}

// What the files say, as llama.cpp reads it: gemma2's local layers are the even ones (window
// 4096 and soft-caps 50 and 30 when the file has none), gemma3's five of every six with rope base
// 10000 and no scaling; the 27B layer counts scale queries by 1/sqrt(hidden / heads); soft-caps and
// the embedding scale; llama windows every layer.
TEST(SlidingWindow, ConfigFollowsTheFile) {
  auto config = [](SyntheticModelSpec s) { return MakeModel(s)->config(); };
  SyntheticModelSpec g2 = SmallSpec("gemma2-swa");
  g2.sliding_window = 0;
  const ModelConfig c2 = config(g2);
  EXPECT_EQ(c2.sliding_window, 4096);
  EXPECT_EQ(c2.LayerWindow(0), 4096);
  EXPECT_EQ(c2.LayerWindow(1), 0);
  EXPECT_FLOAT_EQ(c2.attn_scale, 1.f / 4.f);  // head_dim 16
  EXPECT_FLOAT_EQ(c2.attn_softcap, 3.f);
  EXPECT_FLOAT_EQ(c2.final_softcap, 4.f);
  EXPECT_FLOAT_EQ(c2.embed_scale, 8.f);  // sqrt(64)
  g2.attn_softcap = g2.final_softcap = 0.f;  // keys not written: llama.cpp's 50 and 30
  const ModelConfig c2d = config(g2);
  EXPECT_FLOAT_EQ(c2d.attn_softcap, 50.f);
  EXPECT_FLOAT_EQ(c2d.final_softcap, 30.f);
  SyntheticModelSpec g3 = SmallSpec("gemma3-swa");
  g3.num_layers = 62;  // the 27B's count: queries scaled by hidden / heads = 16, not head_dim 32
  g3.hidden = 64;
  const ModelConfig c3 = config(g3);
  for (int layer = 0; layer < 12; ++layer) {
    EXPECT_EQ(c3.LayerWindow(layer), layer % 6 == 5 ? 0 : 5) << layer;
  }
  EXPECT_FLOAT_EQ(c3.attn_scale, 1.f / 4.f);
  EXPECT_FLOAT_EQ(c3.rope.freq_base, 1e6f);
  EXPECT_FLOAT_EQ(c3.rope_local.freq_base, 10000.f);
  EXPECT_FLOAT_EQ(c3.attn_softcap, 0.f);
  const ModelConfig cm = config(SmallSpec("mistral-swa"));
  EXPECT_EQ(cm.LayerWindow(0), 5);
  EXPECT_EQ(cm.LayerWindow(1), 5);
  EXPECT_FLOAT_EQ(cm.embed_scale, 1.f);
  EXPECT_EQ(config(SmallSpec("llama")).LayerWindow(0), 0);
}

// phi3's LongRoPE: the short factors while a sequence stays within the original context, the
// long ones when the context allowed runs past it (as llama.cpp picks by its context), with the
// converter's attention factor on cos and sin; a phi3 file without a window of a shape llama.cpp
// has no default for is refused by name.
TEST(Phi3, LongRopeFactorsFollowTheContext) {
  const SyntheticModelSpec spec = SmallSpec("phi3");
  auto load = [&](int max_context) {
    auto writer = BuildSyntheticModel(spec);
    auto file = GgufFile::FromBytes(*writer->WriteToBytes());
    auto model = Model::Load(std::move(file).value(), ModelOptions{64, max_context});
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    return std::move(model).value();
  };
  auto at16 = load(16), at17 = load(17), at64 = load(0);
  EXPECT_EQ(at16->config().rope_factors, ModelConfig::RopeFactors::kShort);
  EXPECT_EQ(at17->config().rope_factors, ModelConfig::RopeFactors::kLong);
  EXPECT_EQ(at64->config().rope_factors, ModelConfig::RopeFactors::kLong);
  EXPECT_NE(at16->config().rope.freq_factors, at17->config().rope.freq_factors);
  EXPECT_FLOAT_EQ(at16->config().rope.attn_factor,
                  static_cast<float>(std::sqrt(1.0 + std::log(4.0) / std::log(16.0))));
  const std::vector<TokenId> ids = Tokens(12, 3);
  EXPECT_EQ(PrefillLogits(*at17, ids, KvDtype::kF32), PrefillLogits(*at64, ids, KvDtype::kF32));
  EXPECT_NE(PrefillLogits(*at16, ids, KvDtype::kF32), PrefillLogits(*at64, ids, KvDtype::kF32));

  // Metadata only: the window llama.cpp assumes for Phi-3-mini-4k's shape, none for others.
  auto config_of = [](int layers, int context) {
    GgufWriter w;
    w.SetString("general.architecture", "phi3");
    w.SetUint32("phi3.block_count", static_cast<uint32_t>(layers));
    w.SetUint32("phi3.embedding_length", 64);
    w.SetUint32("phi3.feed_forward_length", 96);
    w.SetUint32("phi3.attention.head_count", 4);
    w.SetUint32("phi3.context_length", static_cast<uint32_t>(context));
    return ModelConfigFromGguf(*GgufFile::FromBytes(*w.WriteToBytes()));
  };
  auto mini4k = config_of(32, 4096);
  ASSERT_TRUE(mini4k.ok()) << mini4k.status().ToString();
  EXPECT_EQ(mini4k->sliding_window, 2047);
  EXPECT_EQ(mini4k->LayerWindow(31), 2047);
  auto other = config_of(2, 64);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("sliding_window"), std::string::npos);
}

// attention.sliding_window_pattern as one flag per layer (llama.cpp reads a number or an array)
// picks the windowed layers itself; an array of the wrong length is refused by name.
TEST(SlidingWindow, APerLayerPatternArrayPicksTheLayers) {
  auto config_of = [](std::vector<int32_t> flags) {
    GgufWriter w;
    w.SetString("general.architecture", "gemma3");
    w.SetUint32("gemma3.block_count", 4);
    w.SetUint32("gemma3.embedding_length", 64);
    w.SetUint32("gemma3.feed_forward_length", 96);
    w.SetUint32("gemma3.attention.head_count", 4);
    w.SetUint32("gemma3.attention.sliding_window", 8);
    w.SetInt32Array("gemma3.attention.sliding_window_pattern", flags);
    return ModelConfigFromGguf(*GgufFile::FromBytes(*w.WriteToBytes()));
  };
  auto c = config_of({1, 0, 1, 1});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->LayerWindow(0), 8);
  EXPECT_EQ(c->LayerWindow(1), 0);
  EXPECT_EQ(c->LayerWindow(2), 8);
  EXPECT_EQ(c->LayerWindow(3), 8);
  auto bad = config_of({1, 0});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sliding_window_pattern"), std::string::npos);
}

TEST(Mla, LatentLayoutHoldsOneVectorPerTokenAndLayer) {
  auto model = MakeModel(SmallSpec("deepseek2"));
  const ModelConfig& c = model->config();
  ASSERT_TRUE(c.is_mla());
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 32 + 8);
  const KvLayout l = model->MakeKvLayout(16, KvDtype::kF16, KvDtype::kF32);
  EXPECT_TRUE(l.v_from_k);
  EXPECT_EQ(l.v_dtype, KvDtype::kF16);  // values are read from the keys' bytes
  EXPECT_EQ(l.bytes_per_token(), 3u * 40 * 2);
  const KvLayout q = model->MakeKvLayout(16, KvDtype::kInt8, KvDtype::kInt8);
  EXPECT_EQ(q.bytes_per_token(), 3u * (40 + 2));  // int8 levels and an f16 scale
  EXPECT_EQ(KvCapacitySummary(l, 4), "KV cache latent f16: 240 bytes/token, 64 tokens in 15.0 KiB");
}

// The absorbed form (queries into the latent space) and the decompressed one (per-head keys and
// values from the latents) are the same function: they differ by float rounding only.
TEST(Mla, AbsorbedAndDecompressedFormsAgree) {
  for (const char* name : {"deepseek2", "deepseek2-qlora"}) {
    auto absorbed = MakeModel(SmallSpec(name), 64, MlaForm::kAbsorbed);
    auto decompressed = MakeModel(SmallSpec(name), 64, MlaForm::kDecompressed);
    const std::vector<TokenId> ids = Tokens(29, 5);
    const std::vector<float> a = PrefillLogits(*absorbed, ids, KvDtype::kF32);
    const std::vector<float> d = PrefillLogits(*decompressed, ids, KvDtype::kF32);
    EXPECT_LT(MaxRelDiff(a.data(), d.data(), a.size()), 1e-5) << name;
    // Decode steps over the cache (one token at a time) agree as well.
    const std::vector<float> a1 = PrefillLogits(*absorbed, ids, KvDtype::kF32, 1);
    const std::vector<float> d1 = PrefillLogits(*decompressed, ids, KvDtype::kF32, 1);
    EXPECT_LT(MaxRelDiff(a1.data(), d1.data(), a1.size()), 1e-5) << name;
    EXPECT_EQ(MaxRelDiff(d1.data(), d.data(), d.size()), 0.0) << name;  // batch invariant too
  }
}

// Quantized latents: the same cache layout with int8 / fp8 / bf16 vectors stays close to f32.
TEST(Mla, QuantizedLatentsStayCloseToF32) {
  auto model = MakeModel(SmallSpec("deepseek2-qlora"));
  const std::vector<TokenId> ids = Tokens(31, 6);
  const std::vector<float> f32 = PrefillLogits(*model, ids, KvDtype::kF32);
  const std::pair<KvDtype, double> bounds[] = {
      {KvDtype::kF16, 2e-3}, {KvDtype::kBF16, 2e-2}, {KvDtype::kInt8, 3e-2},
      {KvDtype::kFp8E4M3, 1e-1}, {KvDtype::kFp8E5M2, 2e-1}};
  for (const auto& [dtype, bound] : bounds) {
    const std::vector<float> q = PrefillLogits(*model, ids, dtype);
    const double err = MaxRelDiff(q.data(), f32.data(), f32.size());
    EXPECT_LT(err, bound) << KvDtypeName(dtype);
    EXPECT_GT(err, 0.0) << KvDtypeName(dtype);
  }
  // A rotated type needs a power-of-two vector; the latent (40 values) is refused by name.
  EXPECT_FALSE(CheckKvDtype(KvDtype::kInt4, model->config().head_dim).ok());
}

// Grouping by expert reads each chosen expert once per step: a batch of many tokens reads less
// than one read per token, and every routing is counted.
TEST(Moe, ExpertsAreReadOncePerStep) {
  auto model = MakeModel(SmallSpec("qwen3moe"));
  const std::vector<TokenId> ids = Tokens(40, 7);
  PrefillLogits(*model, ids, KvDtype::kF16);
  const MoeStats& st = model->moe_stats();
  EXPECT_EQ(st.steps, 1u);
  const uint64_t per_expert = 3u * 32 * 64 * 4;  // gate, up, down of 32 x 64 in F32
  // 2 layers x 40 tokens x 2 experts, read once per token: the ungrouped count.
  EXPECT_EQ(st.expert_bytes_ungrouped, 2u * 40 * 2 * per_expert);
  // Grouped: at most every expert of both layers once.
  EXPECT_LE(st.expert_bytes_read, 2u * 8 * per_expert);
  EXPECT_EQ(st.expert_bytes_read % per_expert, 0u);
}

TEST(Moe, BadExpertMetadataIsAClearError) {
  SyntheticModelSpec spec = SmallSpec("qwen3moe");
  auto writer = BuildSyntheticModel(spec);
  ASSERT_TRUE(writer.ok());
  writer->SetUint32("qwen3moe.expert_used_count", 9);
  auto file = GgufFile::FromBytes(*writer->WriteToBytes());
  ASSERT_TRUE(file.ok());
  auto model = Model::Load(std::move(file).value(), ModelOptions{});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("expert_used_count 9 exceeds expert_count 8"),
            std::string::npos) << model.status().ToString();
  spec.moe.num_experts = 0;
  EXPECT_FALSE(BuildSyntheticModel(spec).ok());  // qwen3moe needs experts
}

TEST(ModelLoad, UnsupportedArchitectureIsNamed) {
  GgufWriter w;
  w.SetString("general.architecture", "mamba");
  auto file = GgufFile::FromBytes(*w.WriteToBytes());
  ASSERT_TRUE(file.ok());
  auto model = Model::Load(std::move(file).value(), ModelOptions{});
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(model.status().message().find("'mamba'"), std::string::npos);
  EXPECT_NE(model.status().message().find("qwen3"), std::string::npos);
}

TEST(ModelLoad, MissingTensorIsNamed) {
  // A llama-shaped file relabelled qwen2 lacks the qwen2 Q/K/V biases.
  auto writer = BuildSyntheticModel(SmallSpec("llama"));
  ASSERT_TRUE(writer.ok());
  writer->SetString("general.architecture", "qwen2");
  const std::pair<const char*, uint32_t> keys[] = {
      {"block_count", 2}, {"embedding_length", 64}, {"feed_forward_length", 96},
      {"attention.head_count", 4}, {"attention.head_count_kv", 2}};
  for (const auto& [key, value] : keys) writer->SetUint32(std::string("qwen2.") + key, value);
  auto file = GgufFile::FromBytes(*writer->WriteToBytes());
  ASSERT_TRUE(file.ok());
  auto model = Model::Load(std::move(file).value(), ModelOptions{});
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kNotFound);
  EXPECT_NE(model.status().message().find("blk.0.attn_q.bias"), std::string::npos)
      << model.status().ToString();
}

TEST(ModelForward, RejectsOutOfVocabularyTokensAndOverlongSequences) {
  auto model = MakeModel(SmallSpec("llama"));
  KvStorage kv(model->MakeKvLayout(4, KvDtype::kF16, KvDtype::kF16), 8);
  ThreadPool threads(1);
  std::vector<BlockId> blocks = {BlockId(0), BlockId(1)};
  std::vector<float> logits(model->config().vocab);
  ForwardBatch bad_token;
  const std::vector<TokenId> ids = {1, 300};
  bad_token.AddSequence(blocks, 0, ids, true);
  Status st = model->Forward(bad_token, kv, threads, logits.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("300"), std::string::npos);

  ForwardBatch uncovered;
  const std::vector<TokenId> nine(9, 1);
  uncovered.AddSequence(blocks, 0, nine, true);  // 9 slots, 2 blocks of 4
  EXPECT_EQ(model->Forward(uncovered, kv, threads, logits.data()).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve

namespace kvserve {
namespace {

// Token-level eviction's compaction (h2o, snapkv): per layer and KV head, slot j ends up with
// what was at kept[j], the key re-rotated by j - kept[j] positions and the value as stored;
// slots that stay put and slots past the kept ones are untouched.
TEST(CompactKv, MovesEachHeadsKeptSlotsToTheFrontAndReRotatesTheirKeys) {
  auto model = MakeModel(SmallSpec("llama"));
  const ModelConfig& c = model->config();
  const int bs = 4, slots = 12, d = c.head_dim;
  KvStorage kv(model->MakeKvLayout(bs, KvDtype::kF32, KvDtype::kF32), 8);
  const std::vector<BlockId> table = {BlockId(5), BlockId(1), BlockId(6)};
  auto k_at = [&](int l, int h, int s) {
    return reinterpret_cast<float*>(kv.KTile(l, table[s / bs], h) + (s % bs) * kv.layout().k_head_bytes());
  };
  auto v_at = [&](int l, int h, int s) {
    return reinterpret_cast<float*>(kv.VTile(l, table[s / bs], h) + (s % bs) * kv.layout().v_head_bytes());
  };
  auto key = [&](int l, int h, int s, int i) { return std::sin(0.37f * (l * 1000 + h * 100 + s * 7 + i)); };
  for (int l = 0; l < c.num_layers; ++l) {
    for (int h = 0; h < c.num_kv_heads; ++h) {
      for (int s = 0; s < slots; ++s) {
        for (int i = 0; i < d; ++i) {
          k_at(l, h, s)[i] = key(l, h, s, i);
          v_at(l, h, s)[i] = static_cast<float>(l * 1000 + h * 100 + s);
        }
      }
    }
  }
  // Every (layer, head) keeps 8 of 12 slots, each its own.
  std::vector<std::vector<int32_t>> kept = {
      {0, 1, 2, 3, 8, 9, 10, 11}, {1, 2, 4, 5, 6, 7, 9, 11},
      {0, 3, 4, 6, 7, 8, 10, 11}, {4, 5, 6, 7, 8, 9, 10, 11}};
  ASSERT_EQ(kept.size(), static_cast<size_t>(c.num_layers * c.num_kv_heads));
  ThreadPool threads(2);
  model->CompactKv(kv, table, kept, threads);
  const Rope rope(c.rope);
  for (int l = 0; l < c.num_layers; ++l) {
    for (int h = 0; h < c.num_kv_heads; ++h) {
      const std::vector<int32_t>& k = kept[static_cast<size_t>(l * c.num_kv_heads + h)];
      for (int j = 0; j < slots; ++j) {
        const int src = j < 8 ? k[static_cast<size_t>(j)] : j;  // past the kept: untouched
        std::vector<float> want(static_cast<size_t>(d));
        for (int i = 0; i < d; ++i) want[static_cast<size_t>(i)] = key(l, h, src, i);
        if (src != j) rope.Rotate(want.data(), 1, d, j - src);
        for (int i = 0; i < d; ++i) {
          ASSERT_FLOAT_EQ(v_at(l, h, j)[i], static_cast<float>(l * 1000 + h * 100 + src))
              << l << " " << h << " " << j;
          ASSERT_FLOAT_EQ(k_at(l, h, j)[i], want[static_cast<size_t>(i)]) << l << " " << h << " " << j;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvserve
