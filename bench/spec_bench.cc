// kvserve_spec_bench: speculative decoding on against off, in process (no HTTP), and the verify
// cost table behind adaptive draft lengths.
//
// Decode mode: the same requests run on two EngineCores of the same target, one without
// speculation and one with --spec (a --speculative-config JSON); --runs rounds alternate the
// sides. Decode tokens/s = tokens after the first / time from the first token to the last,
// summed over the batch. Prints each run, then medians, the on/off ratio, the acceptance rate
// and the mean acceptance length (1 + accepted drafts per verification) of the "on" side, and
// whether the outputs were identical (greedy: they must be).
//
// Verify mode (--verify-table): for the model alone, the time of one Forward of k + 1 tokens of
// one sequence after a --context-token prefix against one token (k = 1..8), medians of --reps.
//
//   kvserve_spec_bench --model T.gguf --spec '{"method":"ngram"}' --prompt-file P.txt [--n 256]
//       [--batch 1] [--runs 5] [--threads 2] [--temp 0]
//   kvserve_spec_bench --model T.gguf --verify-table [--context 256] [--reps 15]
//
// Batch mode (--batch-table): B sequences decoding one token against the same B verifying one
// draft each, B = 1..32, and the acceptance above which that draft pays (t(2B) / t(B) - 1): where
// drafting stops paying as a batch grows, for the model's weight type.
//   kvserve_spec_bench --model T.gguf --batch-table [--context 256] [--reps 5]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fmt/format.h>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_stats.h"
#include "engine/engine_core.h"
#include "engine/synthetic_model.h"
#include "kv/block_pool.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

using Clock = std::chrono::steady_clock;

using bench::Median;

struct Options {
  std::string model, spec, prompt_file, prompt;
  int n = 256, batch = 1, runs = 5, threads = 2, context = 256, reps = 15;
  float temp = 0.f;
  bool verify_table = false, batch_table = false;
};

std::unique_ptr<Model> LoadModel(const std::string& path, int max_batch) {
  auto file = OpenModelOrDefault(path);
  if (!file.ok()) throw std::runtime_error(file.status().ToString());
  auto model = Model::Load(std::move(file).value(), ModelOptions{max_batch, 0});
  if (!model.ok()) throw std::runtime_error(model.status().ToString());
  return std::move(model).value();
}

struct RunResult {
  double tokens_per_s = 0;
  std::vector<std::vector<TokenId>> ids;
  int64_t drafts = 0, draft_tokens = 0, accepted = 0;
};

RunResult RunOnce(EngineCore& core, const std::vector<EngineRequest>& reqs, int64_t* next_id) {
  const SpecStats before = core.stats().spec;
  RunResult r;
  r.ids.resize(reqs.size());
  std::vector<Clock::time_point> first(reqs.size()), last(reqs.size());
  const int64_t base = *next_id;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Status st = core.Add(RequestId((*next_id)++), reqs[i]);
    if (!st.ok()) throw std::runtime_error(st.ToString());
  }
  std::vector<RequestOutput> events;
  while (core.HasWork()) {
    const Status st = core.Step(&events);
    if (!st.ok()) throw std::runtime_error(st.ToString());
    const Clock::time_point now = Clock::now();
    for (const RequestOutput& e : events) {
      const size_t i = static_cast<size_t>(e.id.value() - base);
      if (e.new_tokens.empty()) continue;
      if (r.ids[i].empty()) first[i] = now;
      last[i] = now;
      r.ids[i].insert(r.ids[i].end(), e.new_tokens.begin(), e.new_tokens.end());
    }
    events.clear();
  }
  // The batch's decode phase: from the earliest first token to the latest last token, counting
  // every token after each request's first.
  const Clock::time_point t0 = *std::min_element(first.begin(), first.end());
  const Clock::time_point t1 = *std::max_element(last.begin(), last.end());
  size_t tokens = 0;
  for (const auto& ids : r.ids) tokens += ids.empty() ? 0 : ids.size() - 1;
  r.tokens_per_s = tokens / std::max(std::chrono::duration<double>(t1 - t0).count(), 1e-9);
  const SpecStats after = core.stats().spec;
  r.drafts = after.num_drafts - before.num_drafts;
  r.draft_tokens = after.num_draft_tokens - before.num_draft_tokens;
  r.accepted = after.num_accepted_tokens - before.num_accepted_tokens;
  return r;
}

std::string ReadPrompt(const Options& o) {
  if (o.prompt_file.empty()) return o.prompt;
  std::ifstream in(o.prompt_file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + o.prompt_file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int Decode(const Options& o) {
  auto spec = ParseSpecConfig(o.spec);
  if (!spec.ok()) throw std::runtime_error(spec.status().ToString());
  auto file = OpenModelOrDefault(o.model);
  if (!file.ok()) throw std::runtime_error(file.status().ToString());
  auto tok = Tokenizer::FromGguf(*file);
  if (!tok.ok()) throw std::runtime_error(tok.status().ToString());
  // Prompts: the text (each request of the batch starts at a different paragraph boundary, so
  // they do not share a whole prompt).
  const std::string text = ReadPrompt(o);
  std::vector<EngineRequest> reqs;
  for (int b = 0; b < o.batch; ++b) {
    std::string p = text;
    if (b > 0) p = fmt::format("Request {}.\n{}", b, text);
    EngineRequest r;
    r.prompt = tok->Encode(p, true, false);
    r.max_tokens = o.n;
    r.ignore_eos = true;
    r.sampling.temperature = o.temp;
    r.sampling.seed = 1234 + static_cast<uint64_t>(b);
    r.sampling.has_seed = true;
    reqs.push_back(std::move(r));
  }
  EngineConfig c;
  c.num_threads = o.threads;
  c.max_num_seqs = std::max(o.batch, 1);
  c.max_num_batched_tokens = 512;
  c.max_model_len = static_cast<int>(reqs[0].prompt.size()) + o.n + 64;
  const int per_seq = (c.max_model_len + 15) / 16 + 1;
  c.num_blocks = per_seq * (o.batch + 1) * 2;
  EngineConfig con = c;
  con.spec = *spec;
  auto off = EngineCore::Create(LoadModel(o.model, 512), c, &*tok);
  if (!off.ok()) throw std::runtime_error(off.status().ToString());
  auto on = EngineCore::Create(LoadModel(o.model, 512), con, &*tok);
  if (!on.ok()) throw std::runtime_error(on.status().ToString());
  std::printf("prompt %zu tokens, %d generated per request, batch %d, %d threads, spec %s\n",
              reqs[0].prompt.size(), o.n, o.batch, o.threads, o.spec.c_str());
  std::vector<double> r_off, r_on, rates, lens;
  int64_t next_id = 0;
  bool identical = true;
  // A warm-up of each side (page cache, the cost model), not counted.
  RunOnce(**off, reqs, &next_id);
  RunOnce(**on, reqs, &next_id);
  for (int run = 0; run < o.runs; ++run) {
    const bool on_first = run % 2 == 1;
    RunResult a, b;
    if (on_first) {
      b = RunOnce(**on, reqs, &next_id);
      a = RunOnce(**off, reqs, &next_id);
    } else {
      a = RunOnce(**off, reqs, &next_id);
      b = RunOnce(**on, reqs, &next_id);
    }
    identical = identical && a.ids == b.ids;
    const double rate = b.draft_tokens ? static_cast<double>(b.accepted) / b.draft_tokens : 0;
    const double len = b.drafts ? 1.0 + static_cast<double>(b.accepted) / b.drafts : 1.0;
    r_off.push_back(a.tokens_per_s);
    r_on.push_back(b.tokens_per_s);
    rates.push_back(rate);
    lens.push_back(len);
    std::printf("run %d: off %.1f tok/s, on %.1f tok/s (%.2fx); %lld drafts in %lld verifications, "
                "%.1f%% accepted, mean acceptance length %.2f\n",
                run, a.tokens_per_s, b.tokens_per_s, b.tokens_per_s / a.tokens_per_s,
                static_cast<long long>(b.draft_tokens), static_cast<long long>(b.drafts),
                100 * rate, len);
    std::fflush(stdout);
  }
  std::printf("median: off %.1f tok/s, on %.1f tok/s, on/off %.2fx, acceptance %.1f%%, mean "
              "acceptance length %.2f, outputs %s\n",
              Median(r_off), Median(r_on), Median(r_on) / Median(r_off), 100 * Median(rates),
              Median(lens), identical ? "identical" : "DIFFER");
  // What the adaptive policy priced its decisions with, at the end.
  const EngineStats st = (*on)->stats();
  if (!st.spec.step_seconds_by_rows.empty()) {
    std::string ms;
    for (double s : st.spec.step_seconds_by_rows) ms += fmt::format(" {:.3f}", 1e3 * s);
    std::printf("verification cost table, ms for 1..%zu rows:%s\n",
                st.spec.step_seconds_by_rows.size(), ms.c_str());
  }
  if (const DraftRunner* d = (*on)->draft_runner(); d != nullptr) {
    std::printf("draft depth %.3f ms\n", 1e3 * d->depth_seconds());
  }
  return identical || o.temp > 0 ? 0 : 2;
}

// Sequences whose --context-token prompts (each its own text) are computed; TimeRows times one
// Forward of `per` new tokens on each of the first `b` of them (the median of --reps), writing
// past the prompts only, so every timing starts from the same state.
class Contexts {
 public:
  Contexts(const Options& o, int num_seqs, int max_new)
      : o_(o),
        model_(LoadModel(o.model, std::max(512, num_seqs * max_new))),
        kv_(model_->MakeKvLayout(kBlock, KvDtype::kF16, KvDtype::kF16),
            num_seqs * BlocksPerSeq(o, max_new)),
        pool_(num_seqs * BlocksPerSeq(o, max_new)),
        tables_(static_cast<size_t>(num_seqs)),
        threads_(o.threads) {
    const int vocab = model_->config().vocab;
    logits_.resize(static_cast<size_t>(std::max(num_seqs * max_new, 1)) * static_cast<size_t>(vocab));
    std::vector<TokenId> prompt(static_cast<size_t>(o.context));
    for (int s = 0; s < num_seqs; ++s) {
      std::vector<BlockId>& table = tables_[static_cast<size_t>(s)];
      if (!pool_.AllocateN(BlocksPerSeq(o, max_new), &table)) throw std::runtime_error("no blocks");
      for (int i = 0; i < o.context; ++i) {
        prompt[static_cast<size_t>(i)] = 3 + (i * 7919 + s * 104729) % (vocab - 3);
      }
      for (int done = 0; done < o.context; done += 512) {
        ForwardBatch fb;
        const int n = std::min(512, o.context - done);
        fb.AddSequence(table, done,
                       std::span<const TokenId>(prompt).subspan(static_cast<size_t>(done),
                                                                static_cast<size_t>(n)),
                       true);
        Forward(fb);
      }
    }
    TimeRows(1, 1);  // warm-up
  }

  double TimeRows(int b, int per) {
    const std::vector<TokenId> toks(static_cast<size_t>(per), 5);
    std::vector<double> t;
    for (int r = 0; r < o_.reps; ++r) {
      ForwardBatch fb;
      for (int s = 0; s < b; ++s) fb.AddSequence(tables_[static_cast<size_t>(s)], o_.context, toks, per);
      const Clock::time_point t0 = Clock::now();
      Forward(fb);
      t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return Median(t);
  }

  void PrintHeader(const char* what) const {
    std::printf("%s: %.2f GB of weights, context %d, %d threads%s\n", o_.model.c_str(),
                model_->weight_bytes() / 1e9, o_.context, o_.threads, what);
  }

 private:
  static constexpr int kBlock = 16;
  static int BlocksPerSeq(const Options& o, int max_new) {
    return (o.context + max_new + kBlock - 1) / kBlock;
  }
  void Forward(const ForwardBatch& fb) {
    if (Status st = model_->Forward(fb, kv_, threads_, logits_.data()); !st.ok()) {
      throw std::runtime_error(st.ToString());
    }
  }

  const Options& o_;
  std::unique_ptr<Model> model_;
  KvStorage kv_;
  BlockPool pool_;
  std::vector<std::vector<BlockId>> tables_;
  ThreadPool threads_;
  std::vector<float> logits_;
};

int VerifyTable(const Options& o) {
  Contexts c(o, 1, 9);
  c.PrintHeader("; step time of k+1 tokens / 1 token");
  // Alternate 1-token and (k+1)-token timings so drift hits both.
  std::printf("k  1-token ms  (k+1)-token ms  ratio\n");
  for (int k = 1; k <= 8; ++k) {
    std::vector<double> one, many;
    for (int i = 0; i < 3; ++i) {
      one.push_back(c.TimeRows(1, 1));
      many.push_back(c.TimeRows(1, k + 1));
    }
    std::printf("%d  %9.2f  %13.2f  %5.2f\n", k, 1e3 * Median(one), 1e3 * Median(many),
                Median(many) / Median(one));
    std::fflush(stdout);
  }
  return 0;
}

// Where a batch becomes compute-bound for drafting: B sequences decoding one token each against
// B sequences verifying one draft each (2B rows). One draft per sequence pays when its
// acceptance exceeds t(2B) / t(B) - 1, the break-even printed per B.
int BatchTable(const Options& o) {
  const std::vector<int> batches{1, 2, 4, 8, 16, 32};
  Contexts c(o, batches.back(), 2);
  c.PrintHeader("");
  std::printf("B  decode ms (B rows)  verify ms (2B rows)  ratio  break-even acceptance\n");
  for (int b : batches) {
    std::vector<double> one, two;
    for (int i = 0; i < 3; ++i) {  // alternated, so drift hits both
      one.push_back(c.TimeRows(b, 1));
      two.push_back(c.TimeRows(b, 2));
    }
    const double ratio = Median(two) / Median(one);
    std::printf("%-2d %18.2f %20.2f %6.2f %22.2f\n", b, 1e3 * Median(one), 1e3 * Median(two), ratio,
                std::min(ratio - 1.0, 1.0));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  kvserve::Options o;
  CLI::App app{"Speculative decoding on against off, and the verify cost table"};
  app.add_option("--model", o.model, "Target GGUF (default: the embedded model)");
  app.add_option("--spec", o.spec, "--speculative-config JSON of the 'on' side");
  app.add_option("--prompt-file", o.prompt_file, "Prompt text file");
  app.add_option("--prompt", o.prompt, "Prompt text");
  app.add_option("-n", o.n, "Tokens generated per request");
  app.add_option("--batch", o.batch, "Concurrent requests");
  app.add_option("--runs", o.runs, "Alternating on/off rounds");
  app.add_option("--threads", o.threads, "Compute threads");
  app.add_option("--temp", o.temp, "Temperature (0 = greedy: outputs must be identical)");
  app.add_flag("--verify-table", o.verify_table, "Time k+1-token verification against 1 token");
  app.add_flag("--batch-table", o.batch_table,
               "Time B decodes against B one-draft verifications (B = 1..32)");
  app.add_option("--context", o.context, "Context before the timed step (verify/batch table)");
  app.add_option("--reps", o.reps, "Repetitions per timing (verify/batch table)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (o.verify_table) return kvserve::VerifyTable(o);
    if (o.batch_table) return kvserve::BatchTable(o);
    if (o.spec.empty()) {
      std::fprintf(stderr, "error: --spec is required (or --verify-table)\n");
      return 1;
    }
    return kvserve::Decode(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
