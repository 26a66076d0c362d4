// kvserve perplexity: how well the model predicts a text file, and how much a quantized KV cache
// changes that.
//
// The text is tokenized whole (with BOS when the model adds one) and read in windows of --ctx
// tokens that advance by half a window: the first window scores every token after its first,
// each later one only its second half, so every token is scored exactly once and (beyond the
// first half window) with at least ctx/2 tokens of context.
//
// When --cache-type-k / --cache-type-v are not both f16, every window also runs on a second
// Generator with an f16 cache (same windows, chunks and threads) and each scored position
// compares the two next-token distributions: KL(P_f16 || P_quantized) in nats and whether their
// argmaxes agree. Only one window's logits of each run are held at a time. With both types f16
// there is no second run: the comparison is with itself (KL 0, agreement 1).
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "engine_options.h"

namespace kvserve::cli {
namespace {

struct PerplexityOptions {
  EngineOptions engine;
  std::string file;
  bool json = false;
  bool parse_special = false;
};

// log-softmax of one logits row into out (double, for the sums over many tokens).
void LogSoftmax(const float* row, int vocab, std::vector<double>& out) {
  out.resize(static_cast<size_t>(vocab));
  float max = row[0];
  for (int v = 1; v < vocab; ++v) max = std::max(max, row[v]);
  double sum = 0;
  for (int v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
  const double log_z = std::log(sum) + max;
  for (int v = 0; v < vocab; ++v) out[static_cast<size_t>(v)] = row[v] - log_z;
}

int ArgMax(const float* row, int vocab) {
  int best = 0;
  for (int v = 1; v < vocab; ++v) {
    if (row[v] > row[best]) best = v;
  }
  return best;
}

// Sums over scored positions.
struct Totals {
  double nll = 0, ref_nll = 0, kl = 0;
  int64_t scored = 0, agree = 0, windows = 0;
  double seconds = 0, ref_seconds = 0;
};

std::vector<float> WindowLogits(Generator& gen, std::span<const TokenId> window, double* seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  auto logits = gen.PromptLogits(window, 0);
  if (!logits.ok()) Fail(logits.status().ToString());
  *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::move(logits).value();
}

void RunPerplexity(PerplexityOptions& o) {
  std::ifstream in(o.file, std::ios::binary);
  if (!in) Fail(fmt::format("cannot read '{}'", o.file));
  std::stringstream ss;
  ss << in.rdbuf();
  if (o.engine.ctx < 2) Fail("--ctx must be at least 2");
  Loaded l = Load(o.engine, true);
  const KvLayout& layout = l.generator->kv_storage().layout();
  const bool compare = layout.k_dtype != KvDtype::kF16 || layout.v_dtype != KvDtype::kF16;
  Loaded ref;
  if (compare) {
    EngineOptions ro = o.engine;
    ro.cache_type_k = ro.cache_type_v = "f16";
    ref = Load(ro, false, /*quiet=*/true);
  }
  const std::vector<TokenId> ids = l.tokenizer->Encode(ss.str(), /*add_special=*/true,
                                                       o.parse_special);
  if (ids.size() < 2) Fail(fmt::format("'{}' has fewer than 2 tokens to score", o.file));
  const int ctx = o.engine.ctx;
  const int vocab = l.generator->model().config().vocab;
  const int64_t n = static_cast<int64_t>(ids.size());
  Totals t;
  std::vector<double> lp, ref_lp;
  int64_t scored_until = 1;
  for (int64_t start = 0; scored_until < n; start += ctx / 2) {
    const int64_t end = std::min<int64_t>(start + ctx, n);
    const auto window = std::span<const TokenId>(ids).subspan(static_cast<size_t>(start),
                                                              static_cast<size_t>(end - start));
    const std::vector<float> logits = WindowLogits(*l.generator, window, &t.seconds);
    std::vector<float> ref_logits;
    if (compare) ref_logits = WindowLogits(*ref.generator, window, &t.ref_seconds);
    for (int64_t i = std::max(scored_until, start + 1); i < end; ++i) {
      const size_t off = static_cast<size_t>(i - start - 1) * vocab;
      const size_t next = static_cast<size_t>(ids[static_cast<size_t>(i)]);
      LogSoftmax(logits.data() + off, vocab, lp);
      t.nll -= lp[next];
      if (compare) {
        LogSoftmax(ref_logits.data() + off, vocab, ref_lp);
        t.ref_nll -= ref_lp[next];
        double kl = 0;
        for (size_t v = 0; v < lp.size(); ++v) kl += std::exp(ref_lp[v]) * (ref_lp[v] - lp[v]);
        t.kl += std::max(kl, 0.0);
        t.agree += ArgMax(logits.data() + off, vocab) == ArgMax(ref_logits.data() + off, vocab);
      }
      ++t.scored;
    }
    scored_until = end;
    ++t.windows;
  }
  const double count = static_cast<double>(t.scored);
  const double mean = t.nll / count;
  const double ppl = std::exp(mean);
  const double ref_ppl = compare ? std::exp(t.ref_nll / count) : ppl;
  const double kl = compare ? t.kl / count : 0.0;
  const double top1 = compare ? static_cast<double>(t.agree) / count : 1.0;
  const std::string k_name(KvDtypeName(layout.k_dtype)), v_name(KvDtypeName(layout.v_dtype));
  const size_t f16_bytes = KvLayout{layout.num_layers, layout.num_kv_heads, layout.head_dim,
                                    layout.block_size, KvDtype::kF16, KvDtype::kF16}
                               .bytes_per_token();
  if (o.json) {
    nlohmann::json j = {
        {"perplexity", ppl},
        {"tokens", t.scored},
        {"nll", mean},
        {"windows", t.windows},
        {"ctx", ctx},
        {"seconds", t.seconds},
        {"tokens_per_second", t.seconds > 0 ? count / t.seconds : 0.0},
        {"cache_type_k", k_name},
        {"cache_type_v", v_name},
        {"bytes_per_token", layout.bytes_per_token()},
        {"reference_cache_type", "f16"},
        {"reference_perplexity", ref_ppl},
        {"reference_bytes_per_token", f16_bytes},
        {"compared", compare},
        {"kl_divergence", kl},
        {"top1_agreement", top1},
    };
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("{:<20} {:>12} {:>14} {:>10} {:>12}\n", "KV cache (K/V)", "perplexity", "KL vs f16",
             "top-1", "bytes/token");
  fmt::print("{:<20} {:>12.4f} {:>14} {:>10} {:>12}\n", "f16/f16", ref_ppl, "-", "-", f16_bytes);
  if (compare) {
    fmt::print("{:<20} {:>12.4f} {:>14.4e} {:>9.2f}% {:>12}\n", k_name + "/" + v_name, ppl, kl,
               100.0 * top1, layout.bytes_per_token());
  }
  fmt::print(
      "{} tokens in {} windows of {}; perplexity {:+.3f}% against f16, mean NLL {:.4f}, "
      "{:.1f} s ({:.1f} s for the f16 reference)\n",
      t.scored, t.windows, ctx, 100.0 * (ppl / ref_ppl - 1.0), mean, t.seconds, t.ref_seconds);
}

}  // namespace

void AddPerplexityCommand(CLI::App& app) {
  auto o = std::make_shared<PerplexityOptions>();
  o->engine.ctx = 512;
  CLI::App* cmd = app.add_subcommand(
      "perplexity",
      "Perplexity of the model over a text file; with quantized --cache-type-k/-v also the KL "
      "divergence and top-1 agreement against an f16 cache");
  AddEngineOptions(cmd, o->engine);
  cmd->add_option("-f,--file", o->file, "Text file to score")->required();
  cmd->add_flag("--json", o->json,
                "Print one JSON object (perplexity, tokens, kl_divergence, top1_agreement, "
                "reference_perplexity, ...)");
  cmd->add_flag("--parse-special", o->parse_special,
                "Tokenize special-token text such as <s> or <|im_end|> as those tokens (off: as "
                "plain text, like llama.cpp's perplexity)");
  cmd->callback([o] { RunPerplexity(*o); });
}

}  // namespace kvserve::cli
