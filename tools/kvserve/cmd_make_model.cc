// kvserve make-model: writes a synthetic GGUF model with seeded random weights.
#include <fmt/format.h>

#include "commands.h"
#include "engine/synthetic_model.h"

namespace kvserve::cli {
namespace {

struct MakeModelOptions {
  std::string out;
  std::string arch = "llama";
  int layers = 2, hidden = 256, heads = 8, kv_heads = 0, ffn = 512, vocab = 0, head_dim = 0;
  int context = 4096;
  float rope_base = 10000.f;
  std::string type = "F32";
  std::string tokenizer_from;
  uint64_t seed = 1;
  bool tie = false;
};

void RunMakeModel(const MakeModelOptions& o) {
  SyntheticModelSpec s;
  s.arch = o.arch;
  s.num_layers = o.layers;
  s.hidden = o.hidden;
  s.num_heads = o.heads;
  s.num_kv_heads = o.kv_heads > 0 ? o.kv_heads : o.heads;
  s.ffn = o.ffn;
  s.head_dim = o.head_dim;
  s.context_length = o.context;
  s.rope_base = o.rope_base;
  s.seed = o.seed;
  s.tie_embeddings = o.tie;
  const auto type = ParseGgmlType(o.type);
  if (!type || !CanQuantize(*type)) {
    Fail(fmt::format("--type {} is not a weight type make-model writes (F32, F16, BF16, Q8_0, "
                     "Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)", o.type));
  }
  s.type = *type;
  if (!o.tokenizer_from.empty()) {
    auto spec = LoadTokenizerSpec(o.tokenizer_from);
    if (!spec.ok()) Fail(spec.status().ToString());
    s.tokenizer = std::move(spec).value();
  } else {
    if (o.vocab < 259) Fail("--vocab must be at least 259 (or pass --tokenizer-from FILE)");
    s.tokenizer = MakeSyntheticSpec(o.vocab);
  }
  auto writer = BuildSyntheticModel(s);
  if (!writer.ok()) Fail(writer.status().ToString());
  Status st = writer->WriteFile(o.out);
  if (!st.ok()) Fail(st.ToString());
  fmt::print("wrote {}\n", o.out);
}

}  // namespace

void AddMakeModelCommand(CLI::App& app) {
  auto o = std::make_shared<MakeModelOptions>();
  CLI::App* cmd = app.add_subcommand("make-model", "Write a synthetic GGUF model with random weights");
  cmd->add_option("--out", o->out, "Output GGUF path")->required();
  cmd->add_option("--arch", o->arch, "llama, qwen2 or qwen3")->check(CLI::IsMember({"llama", "qwen2", "qwen3"}));
  cmd->add_option("--layers", o->layers, "Transformer blocks");
  cmd->add_option("--hidden", o->hidden, "Embedding length");
  cmd->add_option("--heads", o->heads, "Attention heads");
  cmd->add_option("--kv-heads", o->kv_heads, "KV heads (default: --heads)");
  cmd->add_option("--ffn", o->ffn, "Feed-forward length");
  cmd->add_option("--head-dim", o->head_dim, "Head dimension (default: hidden / heads)");
  cmd->add_option("--context", o->context, "Context length written to the metadata");
  cmd->add_option("--rope-base", o->rope_base, "RoPE frequency base");
  auto* vocab = cmd->add_option("--vocab", o->vocab, "Synthetic vocabulary size");
  auto* tok = cmd->add_option("--tokenizer-from", o->tokenizer_from,
                              "Take the tokenizer from a tokenizer.json or a GGUF file");
  vocab->excludes(tok);
  cmd->add_option("--type", o->type, "Weight type: F32, F16, BF16, Q8_0, Q4_0, Q4_K, ...");
  cmd->add_option("--seed", o->seed, "Random seed");
  cmd->add_flag("--tie-embeddings", o->tie, "No output.weight; logits use token_embd");
  cmd->callback([o] { RunMakeModel(*o); });
}

}  // namespace kvserve::cli
