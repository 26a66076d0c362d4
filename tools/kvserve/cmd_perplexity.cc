// kvserve perplexity: how well the model predicts a text file.
//
// The text is tokenized whole (with BOS when the model adds one) and read in windows of --ctx
// tokens that advance by half a window: the first window scores every token after its first,
// each later one only its second half, so every token is scored exactly once and (beyond the
// first half window) with at least ctx/2 tokens of context.
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
};

void RunPerplexity(PerplexityOptions& o) {
  std::ifstream in(o.file, std::ios::binary);
  if (!in) Fail(fmt::format("cannot read '{}'", o.file));
  std::stringstream ss;
  ss << in.rdbuf();
  if (o.engine.ctx < 2) Fail("--ctx must be at least 2");
  Loaded l = Load(o.engine, true);
  const std::vector<TokenId> ids = l.tokenizer->Encode(ss.str(), /*add_special=*/true,
                                                       /*parse_special=*/false);
  if (ids.size() < 2) Fail(fmt::format("'{}' has fewer than 2 tokens to score", o.file));
  const int ctx = o.engine.ctx;
  const int vocab = l.generator->model().config().vocab;
  const int64_t n = static_cast<int64_t>(ids.size());
  const auto t0 = std::chrono::steady_clock::now();
  double nll = 0;
  int64_t scored = 0, windows = 0, scored_until = 1;
  for (int64_t start = 0; scored_until < n; start += ctx / 2) {
    const int64_t end = std::min<int64_t>(start + ctx, n);
    auto logits = l.generator->PromptLogits(
        std::span<const TokenId>(ids).subspan(static_cast<size_t>(start),
                                              static_cast<size_t>(end - start)),
        0);
    if (!logits.ok()) Fail(logits.status().ToString());
    for (int64_t i = std::max(scored_until, start + 1); i < end; ++i) {
      const float* row = logits->data() + (i - start - 1) * vocab;
      float max = row[0];
      for (int v = 1; v < vocab; ++v) max = std::max(max, row[v]);
      double sum = 0;
      for (int v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
      nll += std::log(sum) + max - row[ids[static_cast<size_t>(i)]];
      ++scored;
    }
    scored_until = end;
    ++windows;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double mean = nll / static_cast<double>(scored);
  const double ppl = std::exp(mean);
  if (o.json) {
    nlohmann::json j = {{"perplexity", ppl},         {"tokens", scored},
                        {"nll", mean},               {"windows", windows},
                        {"ctx", ctx},                {"seconds", seconds},
                        {"tokens_per_second", seconds > 0 ? static_cast<double>(scored) / seconds
                                                          : 0.0}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("perplexity {:.4f} over {} tokens ({} windows of {}, mean NLL {:.4f}, {:.1f} s)\n",
               ppl, scored, windows, ctx, mean, seconds);
  }
}

}  // namespace

void AddPerplexityCommand(CLI::App& app) {
  auto o = std::make_shared<PerplexityOptions>();
  o->engine.ctx = 512;
  CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity of the model over a text file");
  AddEngineOptions(cmd, o->engine);
  cmd->add_option("-f,--file", o->file, "Text file to score")->required();
  cmd->add_flag("--json", o->json, "Print one JSON object (perplexity, tokens, nll, ...)");
  cmd->callback([o] { RunPerplexity(*o); });
}

}  // namespace kvserve::cli
