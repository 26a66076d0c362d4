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
  SyntheticMoeSpec moe;
  std::string gating = "softmax";
  SyntheticMlaSpec mla;
  std::string kv_b = "split";
  int sliding_window = 0, rope_original_context = 0, yarn_original_context = 4096;
  float attn_softcap = 0.f, final_softcap = 0.f;
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
  s.moe = o.moe;
  s.moe.gating = o.gating == "sigmoid" ? 2 : 1;
  s.mla = o.mla;
  s.mla.split_kv_b = o.kv_b == "split";
  s.sliding_window = o.sliding_window;
  s.rope_original_context = o.rope_original_context;
  s.yarn_factor = o.mla.yarn_factor;  // deepseek2 writes its own YaRN keys from the same flag
  s.yarn_original_context = o.yarn_original_context;
  if (o.arch == "deepseek2") s.mla.yarn_original_context = o.yarn_original_context;
  s.attn_softcap = o.attn_softcap;
  s.final_softcap = o.final_softcap;
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
  cmd->add_option("--arch", o->arch,
                  "llama, qwen2, qwen3, qwen3moe, deepseek2, gemma2, gemma3, phi3 or gpt-oss")
      ->check(CLI::IsMember({"llama", "qwen2", "qwen3", "qwen3moe", "deepseek2", "gemma2", "gemma3",
                             "phi3", "gpt-oss"}));
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
  // Mixture of experts (qwen3moe, deepseek2; llama with --experts is Mixtral-style).
  cmd->add_option("--experts", o->moe.num_experts, "Experts per MoE layer (0: dense)");
  cmd->add_option("--experts-used", o->moe.num_used, "Experts each token takes (top-k)");
  cmd->add_option("--expert-ffn", o->moe.expert_ffn, "Rows of one expert (default: --ffn)");
  cmd->add_option("--shared-experts", o->moe.num_shared, "Shared experts (deepseek2)");
  cmd->add_option("--leading-dense", o->moe.leading_dense,
                  "Leading layers with a dense feed-forward (deepseek2)");
  cmd->add_option("--gating", o->gating, "Router probabilities (deepseek2): softmax or sigmoid")
      ->check(CLI::IsMember({"softmax", "sigmoid"}));
  cmd->add_flag("--expert-weights-norm", o->moe.weights_norm,
                "Renormalise the chosen experts' weights (deepseek2)");
  cmd->add_option("--expert-weights-scale", o->moe.weights_scale, "Scale of the expert weights (deepseek2)");
  cmd->add_flag("--selection-bias", o->moe.selection_bias, "Write exp_probs_b (deepseek2, V3-style)");
  cmd->add_option("--expert-groups", o->moe.num_groups, "Expert groups (deepseek2, V3-style)");
  cmd->add_option("--expert-groups-used", o->moe.num_groups_used, "Groups each token chooses from");
  // deepseek2's latent attention.
  cmd->add_option("--q-lora-rank", o->mla.q_lora_rank, "Low-rank query (0: full attn_q, V2-Lite)");
  cmd->add_option("--kv-lora-rank", o->mla.kv_lora_rank, "KV latent rank");
  cmd->add_option("--qk-nope", o->mla.qk_nope, "Per-head key dims without rope");
  cmd->add_option("--qk-rope", o->mla.qk_rope, "Rotary key dims (shared by the heads)");
  cmd->add_option("--v-head", o->mla.v_head, "Per-head value dims");
  cmd->add_option("--kv-b", o->kv_b, "split (attn_k_b, attn_v_b) or combined (attn_kv_b)")
      ->check(CLI::IsMember({"split", "combined"}));
  cmd->add_option("--yarn-factor", o->mla.yarn_factor,
                  "YaRN context factor (deepseek2, gpt-oss, any arch; 0: none)");
  cmd->add_option("--yarn-original-context", o->yarn_original_context,
                  "YaRN's original context length")
      ->check(CLI::PositiveNumber);
  // Sliding windows and gemma's soft-caps.
  cmd->add_option("--sliding-window", o->sliding_window,
                  "attention.sliding_window: every layer of a llama (Mistral v0.1), the local "
                  "layers of gemma2 (every other) and gemma3 (5 of 6); 0: not written")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--attn-softcap", o->attn_softcap, "attn_logit_softcapping (gemma2; 0: none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--final-softcap", o->final_softcap, "final_logit_softcapping (gemma2; 0: none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--rope-original-context", o->rope_original_context,
                  "phi3 LongRoPE: original context, with short and long factor sets (0: none)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([o] { RunMakeModel(*o); });
}

}  // namespace kvserve::cli
