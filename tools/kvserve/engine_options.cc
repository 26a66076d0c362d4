#include "engine_options.h"

#include <fmt/format.h>

#include "commands.h"
#include "engine/synthetic_model.h"
#include "util/byte_size.h"

namespace kvserve::cli {

void AddEngineOptions(CLI::App* cmd, EngineOptions& o) {
  cmd->add_option("-m,--model", o.model, "GGUF model file (default: the embedded model)");
  cmd->add_option("-t,--threads", o.threads, "Worker threads (default: all hardware threads)");
  AddPollOption(cmd, o.poll_us);
  cmd->add_option("--cache-type-k", o.cache_type_k, KvCacheTypeHelp("keys"));
  cmd->add_option("--cache-type-v", o.cache_type_v, KvCacheTypeHelp("values"));
  cmd->add_option("--kv-cache-memory", o.kv_cache_memory,
                  "KV cache budget, e.g. 256MiB (default: room for one --ctx sequence)");
  cmd->add_option("-c,--ctx,--max-model-len", o.ctx, "Maximum tokens per sequence (default: model's)");
  cmd->add_option("--block-size", o.block_size, "Tokens per KV block");
  cmd->add_option("-b,--batch", o.batch, "Most tokens per forward pass (prefill chunk)");
  AddMlaOption(cmd, o.mla_form);
}

void AddMlaOption(CLI::App* cmd, MlaForm& form) {
  cmd->add_option_function<std::string>(
         "--mla-attention",
         [&form](const std::string& v) {
           form = v == "decompressed" ? MlaForm::kDecompressed : MlaForm::kAbsorbed;
         },
         "deepseek2: absorbed (default; queries into the latent space) or decompressed "
         "(per-head keys and values expanded each step)")
      ->check(CLI::IsMember({"absorbed", "decompressed"}));
}

KvOptions ParseKvOptions(const EngineOptions& o) {
  KvOptions kv;
  const auto k = ParseKvDtypeOrError(o.cache_type_k, "--cache-type-k");
  if (!k.ok()) Fail(k.status().message());
  const auto v = ParseKvDtypeOrError(o.cache_type_v, "--cache-type-v");
  if (!v.ok()) Fail(v.status().message());
  kv.k_dtype = *k;
  kv.v_dtype = *v;
  if (!o.kv_cache_memory.empty()) {
    auto bytes = ParseByteSize(o.kv_cache_memory);
    if (!bytes.ok()) Fail("--kv-cache-memory: " + bytes.status().message());
    kv.kv_cache_bytes = *bytes;
  }
  return kv;
}

LoadedModel LoadModel(const EngineOptions& o, bool need_tokenizer) {
  auto file = OpenModelOrDefault(o.model);
  if (!file.ok()) Fail(file.status().ToString());
  LoadedModel out;
  if (need_tokenizer) {
    auto tok = Tokenizer::FromGguf(*file);
    if (!tok.ok()) Fail(tok.status().ToString());
    out.tokenizer.emplace(std::move(tok).value());
  }
  ModelOptions mo;
  mo.max_batch_tokens = o.batch;
  mo.max_context = o.ctx;
  mo.mla_form = o.mla_form;
  auto model = Model::Load(std::move(file).value(), mo);
  if (!model.ok()) Fail(model.status().ToString());
  out.model = std::move(model).value();
  return out;
}

Loaded Load(const EngineOptions& o, bool need_tokenizer, bool quiet) {
  LoadedModel m = LoadModel(o, need_tokenizer);
  Loaded out;
  out.tokenizer = std::move(m.tokenizer);
  GeneratorConfig gc;
  gc.num_threads = o.threads;
  gc.poll_us = o.poll_us;
  gc.block_size = o.block_size;
  const KvOptions kv_options = ParseKvOptions(o);
  gc.k_dtype = kv_options.k_dtype;
  gc.v_dtype = kv_options.v_dtype;
  gc.kv_cache_bytes = kv_options.kv_cache_bytes;
  auto gen = Generator::Create(std::move(m.model), gc);
  if (!gen.ok()) Fail(gen.status().ToString());
  out.generator = std::move(gen).value();
  const KvStorage& kv = out.generator->kv_storage();
  if (!quiet) fmt::print(stderr, "kvserve: {}\n", KvCapacitySummary(kv.layout(), kv.num_blocks()));
  return out;
}

void AddPollOption(CLI::App* cmd, int& poll_us) {
  cmd->add_option("--poll-us", poll_us,
                  fmt::format("Microseconds a compute thread spins for work before it sleeps "
                              "(default {}; 0 sleeps at once)",
                              ThreadPool::kDefaultSpin.count()))
      ->check(CLI::Range(0, 1000000));
}

void AddJumpForwardOptions(CLI::App* cmd, JumpForwardOptions& o) {
  cmd->add_flag("--no-jump-forward", o.off,
                "Structured output: decode the text a constraint forces one token per step "
                "instead of computing it in one step");
  cmd->add_option("--jump-forward-mode", o.mode,
                  "force: forced text goes in as the tokenizer writes it (default; the same text, "
                  "the tokens may differ from decoding); verify: it is verified like speculative "
                  "drafts, so the tokens are exactly those of decoding one per step")
      ->check(CLI::IsMember({"force", "verify"}));
}

void ApplyJumpForwardOptions(const JumpForwardOptions& o, EngineConfig* config) {
  config->jump_forward = !o.off;
  config->jump_forward_mode = o.mode == "verify" ? EngineConfig::JumpForwardMode::kVerify
                                                 : EngineConfig::JumpForwardMode::kForce;
}

EngineConfig OneSequenceEngineConfig(const EngineOptions& o) {
  EngineConfig c;
  c.num_threads = o.threads;
  c.poll_us = o.poll_us;
  c.block_size = o.block_size;
  const KvOptions kv = ParseKvOptions(o);
  c.k_dtype = kv.k_dtype;
  c.v_dtype = kv.v_dtype;
  c.kv_cache_memory_bytes = kv.kv_cache_bytes;
  c.max_model_len = o.ctx;
  c.max_num_seqs = 1;
  c.max_num_batched_tokens = o.batch;
  return c;
}

void AddKvEvictionOptions(CLI::App* cmd, KvEvictionOptions& o) {
  cmd->add_option("--kv-eviction", o.policy,
                  "Eviction inside a sequence: none (default), window (the oldest tokens go), "
                  "sinks (the first --kv-sink-tokens stay, then the oldest go), h2o (heavy "
                  "hitters by accumulated attention) or snapkv (by an observation window's "
                  "attention); with a policy a sequence holds at most --kv-budget tokens of KV "
                  "and may run past the context");
  cmd->add_option("--kv-budget", o.budget,
                  "KV tokens one sequence holds at most with --kv-eviction (whole blocks)")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--kv-sink-tokens", o.sink_tokens,
                  "Attention sinks kept for good with --kv-eviction sinks (default 4, rounded up "
                  "to a whole block)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--kv-evict-batch", o.evict_batch,
                  "Tokens dropped at once, rounded up to whole blocks (default: an eighth of the "
                  "budget; snapkv: at least its window); larger batches shift keys less often")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--h2o-recent-fraction", o.h2o_recent_fraction,
                  "h2o: share of the budget kept as the newest tokens; the rest are heavy "
                  "hitters (default 0.5)")
      ->check(CLI::Range(0.0, 0.99));
  cmd->add_option("--snapkv-window", o.snapkv_window,
                  "snapkv: the observation window, the newest tokens whose queries score the "
                  "older ones (default 32; at most the evict batch)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--snapkv-kernel", o.snapkv_kernel,
                  "snapkv: max-pooling width over the scores, to keep neighbours (default 5)")
      ->check(CLI::Range(1, 1 << 10));
}

KvEvictionConfig KvEvictionFromOptions(const KvEvictionOptions& o) {
  Result<KvEvictionPolicy> policy = ParseKvEvictionPolicy(o.policy, "--kv-eviction");
  if (!policy.ok()) Fail(policy.status().message());
  return KvEvictionConfig{.policy = *policy,
                          .budget_tokens = o.budget,
                          .sink_tokens = o.sink_tokens,
                          .evict_batch_tokens = o.evict_batch,
                          .h2o_recent_fraction = o.h2o_recent_fraction,
                          .snapkv_window = o.snapkv_window,
                          .snapkv_kernel = o.snapkv_kernel};
}

std::string KvCacheTypeHelp(std::string_view what) {
  return fmt::format("KV cache type of {}: {} (default f16; see docs/kv_dtypes.md)", what,
                     KvDtypeNames());
}

}  // namespace kvserve::cli
