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
#include "engine/engine_core.h"
#include "engine_options.h"

namespace kvserve::cli {
namespace {

struct PerplexityOptions {
  EngineOptions engine;
  std::string file;
  bool json = false;
  bool parse_special = false;
  bool stream = false;
  int segment_tokens = 4096;
  KvEvictionOptions kv_eviction;
  // --eviction-kl
  bool eviction_kl = false;
  int prompt_tokens = 1024;
  int eval_tokens = 8;
  int num_prompts = 25;
};

void RunEvictionKl(const PerplexityOptions& o);

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

template <typename T>
int ArgMax(const T* row, int vocab) {
  int best = 0;
  for (int v = 1; v < vocab; ++v) {
    if (row[v] > row[best]) best = v;
  }
  return best;
}

// Sums over scored positions.
struct ScoreTotals {
  double nll = 0, ref_nll = 0, kl = 0;
  int64_t scored = 0, agree = 0, windows = 0;
  double seconds = 0, ref_seconds = 0;

  // One position scored by the cache under test (lp) and the reference (ref_lp), both
  // log-probabilities over the vocab: the reference's NLL of the next token, KL(reference ||
  // tested) and whether the two argmaxes agree. (nll and scored are the caller's.)
  template <typename T>
  void Compare(const T* lp, const T* ref_lp, int vocab, size_t next) {
    ref_nll -= ref_lp[next];
    double d = 0;
    for (int v = 0; v < vocab; ++v) {
      d += std::exp(static_cast<double>(ref_lp[v])) * (static_cast<double>(ref_lp[v]) - lp[v]);
    }
    kl += std::max(d, 0.0);
    agree += ArgMax(lp, vocab) == ArgMax(ref_lp, vocab) ? 1 : 0;
  }
};

std::vector<float> WindowLogits(Generator& gen, std::span<const TokenId> window, double* seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  auto logits = gen.PromptLogits(window, 0);
  if (!logits.ok()) Fail(logits.status().ToString());
  *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::move(logits).value();
}

std::string ReadText(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) Fail(fmt::format("cannot read '{}'", file));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One segment of a streamed text: its scored tokens, their summed NLL, the time from the first
// to the last of its scores arriving, and the most KV blocks in use while it was computed.
struct Segment {
  int64_t first = 0;  // index of its first scored token in the text
  int64_t tokens = 0;
  double nll = 0;
  double seconds = 0;
  int peak_blocks = 0;
};

// --stream: the whole text is one request on the serving engine, scored token by token as its
// chunks are computed (each chunk sees only the KV the eviction policy kept), as StreamingLLM
// evaluates. Per segment of --segment-tokens: perplexity, tokens/s and peak KV blocks.
void RunStreamPerplexity(const PerplexityOptions& o) {
  if (o.segment_tokens < 1) Fail("--segment-tokens must be at least 1");
  const std::string text = ReadText(o.file);
  LoadedModel m = LoadModel(o.engine, /*need_tokenizer=*/true);
  EngineConfig c = OneSequenceEngineConfig(o.engine);
  c.enable_prefix_caching = false;
  c.kv_eviction = KvEvictionFromOptions(o.kv_eviction);
  auto core = EngineCore::Create(std::move(m.model), c, &*m.tokenizer);
  if (!core.ok()) Fail(core.status().ToString());
  EngineRequest req;
  req.prompt = m.tokenizer->Encode(text, /*add_special=*/true, o.parse_special);
  if (req.prompt.size() < 2) Fail(fmt::format("'{}' has fewer than 2 tokens to score", o.file));
  req.max_tokens = 1;
  req.ignore_eos = true;
  req.score_prompt = true;
  req.sampling.temperature = 0.f;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  if (Status st = (*core)->Add(RequestId(0), req, start); !st.ok()) Fail(st.ToString());
  std::vector<Segment> segments;
  Clock::time_point last = start;
  int64_t scored = 0, evicted = 0;
  int peak_blocks = 0;
  std::vector<RequestOutput> events;
  while ((*core)->HasWork()) {
    if (Status st = (*core)->Step(&events); !st.ok()) Fail(st.ToString());
    const int in_use = (*core)->stats().kv.num_in_use;
    peak_blocks = std::max(peak_blocks, in_use);
    const Clock::time_point now = Clock::now();
    for (RequestOutput& e : events) {
      if (e.finished && e.finish_reason == FinishReason::kError) Fail(e.error.ToString());
      if (e.finished) {
        // Its KV just before it was released: the prompt's slots that were not evicted.
        evicted = e.metrics.evicted_tokens;
        const int64_t slots = static_cast<int64_t>(req.prompt.size()) - evicted;
        const int blocks = static_cast<int>((slots + c.block_size - 1) / c.block_size);
        peak_blocks = std::max(peak_blocks, blocks);
        if (!segments.empty()) {
          segments.back().peak_blocks = std::max(segments.back().peak_blocks, blocks);
        }
      }
      if (e.prompt_logprobs.empty()) continue;
      // A step's scores are timed together: its time goes to the segment of its first score.
      bool timed = false;
      for (float lp : e.prompt_logprobs) {
        if (segments.empty() || segments.back().tokens == o.segment_tokens) {
          segments.push_back(Segment{.first = scored + 1});
        }
        Segment& seg = segments.back();
        if (!timed) {
          seg.seconds += std::chrono::duration<double>(now - last).count();
          timed = true;
        }
        seg.nll -= lp;
        ++seg.tokens;
        seg.peak_blocks = std::max(seg.peak_blocks, in_use);
        ++scored;
      }
    }
    events.clear();
    last = now;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  double nll = 0;
  for (const Segment& seg : segments) nll += seg.nll;
  const std::string policy(KvEvictionPolicyName(c.kv_eviction.policy));
  const KvLayout layout = (*core)->model().MakeKvLayout(c.block_size, c.k_dtype, c.v_dtype);
  const EngineStats stats = (*core)->stats();
  if (o.json) {
    nlohmann::json segs = nlohmann::json::array();
    for (const Segment& seg : segments) {
      segs.push_back({{"first_token", seg.first},
                      {"tokens", seg.tokens},
                      {"perplexity", std::exp(seg.nll / static_cast<double>(seg.tokens))},
                      {"tokens_per_second", seg.seconds > 0 ? seg.tokens / seg.seconds : 0.0},
                      {"peak_kv_blocks", seg.peak_blocks}});
    }
    const nlohmann::json j = {
        {"stream", true},
        {"tokens", scored},
        {"perplexity", std::exp(nll / static_cast<double>(scored))},
        {"seconds", seconds},
        {"tokens_per_second", scored / seconds},
        {"kv_eviction", policy},
        {"kv_budget", c.kv_eviction.budget_tokens},
        {"kv_sink_tokens", c.kv_eviction.sink_tokens},
        {"block_size", c.block_size},
        {"evicted_tokens", evicted},
        {"kv_shifts", stats.kv_eviction.num_shifts},
        {"kv_shift_seconds", stats.kv_eviction.shift_seconds},
        {"peak_kv_blocks", peak_blocks},
        {"peak_kv_bytes", static_cast<uint64_t>(peak_blocks) * layout.bytes_per_block()},
        {"segment_tokens", o.segment_tokens},
        {"segments", segs},
    };
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("{:>10} {:>8} {:>12} {:>10} {:>10}\n", "first", "tokens", "perplexity", "tok/s",
             "KV blocks");
  for (const Segment& seg : segments) {
    fmt::print("{:>10} {:>8} {:>12.4f} {:>10.1f} {:>10}\n", seg.first, seg.tokens,
               std::exp(seg.nll / static_cast<double>(seg.tokens)),
               seg.seconds > 0 ? seg.tokens / seg.seconds : 0.0, seg.peak_blocks);
  }
  fmt::print("{} tokens streamed with --kv-eviction {}: perplexity {:.4f}, {} evicted in {} "
             "shifts, peak {} KV blocks ({:.1f} MiB), {:.1f} s ({:.1f} tok/s)\n",
             scored, policy, std::exp(nll / static_cast<double>(scored)), evicted,
             stats.kv_eviction.num_shifts, peak_blocks,
             static_cast<double>(peak_blocks) * layout.bytes_per_block() / (1 << 20), seconds,
             scored / seconds);
}

void RunPerplexity(PerplexityOptions& o) {
  if (o.eviction_kl) return RunEvictionKl(o);
  if (o.stream) return RunStreamPerplexity(o);
  if (o.kv_eviction.policy != "none") Fail("--kv-eviction needs --stream");
  std::stringstream ss;
  ss << ReadText(o.file);
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
  ScoreTotals t;
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
        t.Compare(lp.data(), ref_lp.data(), vocab, next);
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
                                    layout.block_size, KvDtype::kF16, KvDtype::kF16,
                                    layout.v_from_k}
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

// --eviction-kl: prompts of --prompt-tokens tokens (consecutive pieces of the text, each after
// a BOS) compressed by the --kv-eviction policy to --kv-budget, against the full cache: over the
// next --eval-tokens positions of each (the text's own tokens, teacher-forced), the KL divergence
// of the next-token distribution from the full cache's and top-1 agreement.
void RunEvictionKl(const PerplexityOptions& o) {
  if (o.prompt_tokens < 2 || o.eval_tokens < 1 || o.num_prompts < 1) {
    Fail("--prompt-tokens must be at least 2, --eval-tokens and --prompts at least 1");
  }
  const std::string text = ReadText(o.file);
  LoadedModel m = LoadModel(o.engine, /*need_tokenizer=*/true);
  const int vocab = m.model->config().vocab;
  EngineConfig c = OneSequenceEngineConfig(o.engine);
  c.enable_prefix_caching = false;
  const KvEvictionConfig policy = KvEvictionFromOptions(o.kv_eviction);
  if (!policy.enabled()) Fail("--eviction-kl needs a --kv-eviction policy to compare");
  const int len = o.prompt_tokens + o.eval_tokens;
  if (len > c.max_model_len) {
    Fail(fmt::format("--eviction-kl: the full cache needs --ctx of at least {}", len));
  }
  const TokenId bos = m.tokenizer->bos_id();
  auto core = EngineCore::Create(std::move(m.model), c, &*m.tokenizer);
  if (!core.ok()) Fail(core.status().ToString());
  const std::vector<TokenId> ids = m.tokenizer->Encode(text, /*add_special=*/false,
                                                       o.parse_special);
  if (static_cast<int64_t>(ids.size()) < static_cast<int64_t>(o.num_prompts) * (len - 1)) {
    Fail(fmt::format("'{}' has {} tokens; {} prompts of {} need {}", o.file, ids.size(),
                     o.num_prompts, len, static_cast<int64_t>(o.num_prompts) * (len - 1)));
  }
  // The distributions of prompt positions [prompt_tokens, len) of one request.
  auto score = [&](const std::vector<TokenId>& prompt, const KvEvictionConfig& ev) {
    EngineRequest req;
    req.prompt = prompt;
    req.max_tokens = 1;
    req.ignore_eos = true;
    req.score_prompt = true;
    req.prompt_distributions_from = o.prompt_tokens;
    req.sampling.temperature = 0.f;
    req.kv_eviction = ev;
    if (Status st = (*core)->Add(RequestId(0), req); !st.ok()) Fail(st.ToString());
    std::vector<float> rows;
    std::vector<RequestOutput> events;
    while ((*core)->HasWork()) {
      if (Status st = (*core)->Step(&events); !st.ok()) Fail(st.ToString());
      for (RequestOutput& e : events) {
        if (e.finished && e.finish_reason == FinishReason::kError) Fail(e.error.ToString());
        rows.insert(rows.end(), e.prompt_distributions.begin(), e.prompt_distributions.end());
      }
      events.clear();
    }
    if (rows.size() != static_cast<size_t>(o.eval_tokens) * vocab) Fail("missing distributions");
    return rows;
  };
  ScoreTotals t;
  for (int i = 0; i < o.num_prompts; ++i) {
    std::vector<TokenId> prompt{bos};
    const auto first = ids.begin() + static_cast<std::ptrdiff_t>(i) * (len - 1);
    prompt.insert(prompt.end(), first, first + (len - 1));
    const std::vector<float> full = score(prompt, KvEvictionConfig{});
    const std::vector<float> got = score(prompt, policy);
    for (int j = 0; j < o.eval_tokens; ++j) {
      const float* q = got.data() + static_cast<size_t>(j) * vocab;
      const auto next = static_cast<size_t>(prompt[static_cast<size_t>(o.prompt_tokens + j)]);
      t.nll -= q[next];
      ++t.scored;
      t.Compare(q, full.data() + static_cast<size_t>(j) * vocab, vocab, next);
    }
  }
  const double n = static_cast<double>(t.scored);
  const nlohmann::json j = {
      {"kv_eviction", std::string(KvEvictionPolicyName(policy.policy))},
      {"kv_budget", policy.budget_tokens},
      {"prompt_tokens", o.prompt_tokens},
      {"eval_tokens", o.eval_tokens},
      {"prompts", o.num_prompts},
      {"positions", t.scored},
      {"kl_divergence", t.kl / n},
      {"top1_agreement", static_cast<double>(t.agree) / n},
      {"perplexity", std::exp(t.nll / n)},
      {"full_cache_perplexity", std::exp(t.ref_nll / n)},
  };
  if (o.json) {
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("{} at budget {}: KL {:.5f}, top-1 {:.1f}% over {} positions; perplexity {:.4f} "
             "(full cache {:.4f})\n",
             KvEvictionPolicyName(policy.policy), policy.budget_tokens, t.kl / n,
             100.0 * static_cast<double>(t.agree) / n, t.scored, std::exp(t.nll / n),
             std::exp(t.ref_nll / n));
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
  cmd->add_flag("--stream", o->stream,
                "Score the whole text as one stream through the serving engine (with "
                "--kv-eviction, past the context in constant memory) instead of in windows");
  cmd->add_option("--segment-tokens", o->segment_tokens,
                  "--stream: report perplexity, tokens/s and peak KV blocks per segment of this "
                  "many tokens (default 4096)");
  AddKvEvictionOptions(cmd, o->kv_eviction);
  cmd->add_flag("--eviction-kl", o->eviction_kl,
                "Compress prompts of --prompt-tokens to --kv-budget with --kv-eviction and report "
                "the KL divergence and top-1 agreement against the full cache over the next "
                "--eval-tokens positions of each of --prompts prompts (needs --ctx >= both)");
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "--eviction-kl: prompt length (1024)");
  cmd->add_option("--eval-tokens", o->eval_tokens,
                  "--eviction-kl: positions scored after each prompt (8)");
  cmd->add_option("--prompts", o->num_prompts, "--eviction-kl: prompts (25)");
  cmd->add_flag("--parse-special", o->parse_special,
                "Tokenize special-token text such as <s> or <|im_end|> as those tokens (off: as "
                "plain text, like llama.cpp's perplexity)");
  cmd->callback([o] { RunPerplexity(*o); });
}

}  // namespace kvserve::cli
