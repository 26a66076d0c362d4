#include "engine_options.h"

#include "commands.h"
#include "engine/synthetic_model.h"

namespace kvserve::cli {

void AddEngineOptions(CLI::App* cmd, EngineOptions& o) {
  cmd->add_option("-m,--model", o.model, "GGUF model file (default: the embedded model)");
  cmd->add_option("-t,--threads", o.threads, "Worker threads (default: all hardware threads)");
  cmd->add_option("--cache-type-k", o.cache_type_k, "KV cache type of keys: f16 or f32");
  cmd->add_option("--cache-type-v", o.cache_type_v, "KV cache type of values: f16 or f32");
  cmd->add_option("-c,--ctx,--max-model-len", o.ctx, "Maximum tokens per sequence (default: model's)");
  cmd->add_option("--block-size", o.block_size, "Tokens per KV block");
  cmd->add_option("-b,--batch", o.batch, "Most tokens per forward pass (prefill chunk)");
}

Loaded Load(const EngineOptions& o, bool need_tokenizer) {
  auto file = OpenModelOrDefault(o.model);
  if (!file.ok()) Fail(file.status().ToString());
  Loaded out;
  if (need_tokenizer) {
    auto tok = Tokenizer::FromGguf(*file);
    if (!tok.ok()) Fail(tok.status().ToString());
    out.tokenizer.emplace(std::move(tok).value());
  }
  ModelOptions mo;
  mo.max_batch_tokens = o.batch;
  mo.max_context = o.ctx;
  auto model = Model::Load(std::move(file).value(), mo);
  if (!model.ok()) Fail(model.status().ToString());
  GeneratorConfig gc;
  gc.num_threads = o.threads;
  gc.block_size = o.block_size;
  const auto k = ParseKvDtype(o.cache_type_k);
  const auto v = ParseKvDtype(o.cache_type_v);
  if (!k || !v) Fail("--cache-type-k/--cache-type-v must be f16 or f32");
  gc.k_dtype = *k;
  gc.v_dtype = *v;
  auto gen = Generator::Create(std::move(model).value(), gc);
  if (!gen.ok()) Fail(gen.status().ToString());
  out.generator = std::move(gen).value();
  return out;
}

}  // namespace kvserve::cli
