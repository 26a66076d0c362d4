// kvserve_structured_bench: what a JSON Schema constraint costs, per vocabulary.
//
// For each --vocab GGUF (any file with a tokenizer) and three schemas built in (flat: a
// 7-property object of scalars; nested: objects, an array of objects with enums and
// minItems/maxItems; recursive: a tree node whose children are nodes, via $defs/$ref):
//   - compile: median over --compile-runs fresh ConstraintCompilers of Compile(spec), which
//     builds the grammar AND computes the start state's mask (the first mask is part of
//     compilation, off the engine thread); the grammar alone is shown beside it;
//   - per token: --walks simulated outputs of up to --max-tokens tokens. Each step times
//     ConstraintProcessor::Process exactly as the Sampler runs it (advance the parse over the
//     token sampled last, then look up or compute the new state's mask and write -inf over the
//     refused logits), then picks the next token at random among the allowed ones (seeded; the
//     walk prefers closing tokens once a string or number or the whole output is long, and the
//     deeper it is nested, so walks finish). "cold": a fresh compiler per walk, so each walk starts
//     with an empty mask cache (only the start mask); "warm": one compiled masker shared by every
//     walk, as the server shares it across requests with the same constraint. The same seeds give
//     the same outputs in both, so the two differ only by caching.
// Finished outputs are checked: valid JSON that the grammar fully matches (exit 2 if not).
// docs/structured.md ("Benchmark") shows how to make vocabularies from tokenizer.json files.
//
//   build/kvserve_structured_bench --vocab build/vocab-qwen3.gguf --vocab build/vocab-llama2.gguf
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_stats.h"
#include "gguf/gguf_file.h"
#include "maskbench.h"
#include "sample/token_history.h"
#include "structured/constraint.h"
#include "structured/matcher.h"
#include "structured/token_masker.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

using structured::ConstraintCompiler;
using structured::ConstraintCompilerOptions;
using structured::ConstraintKind;
using structured::ConstraintProcessor;
using structured::ConstraintSpec;
using structured::TokenMasker;
using structured::TokenVocab;

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Schema {
  const char* name;
  const char* text;
};

// (a) flat: 7 required scalar properties.
constexpr const char* kFlat = R"({
  "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "name": {"type": "string"},
    "email": {"type": "string"},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "score": {"type": "number"},
    "active": {"type": "boolean"},
    "city": {"type": "string"}
  },
  "required": ["id", "name", "email", "age", "score", "active", "city"],
  "additionalProperties": false
})";

// (b) nested: a nested object, an array of objects with enum fields, minItems/maxItems.
constexpr const char* kNested = R"({
  "type": "object",
  "properties": {
    "order_id": {"type": "string"},
    "priority": {"enum": ["low", "medium", "high", "urgent"]},
    "customer": {
      "type": "object",
      "properties": {
        "name": {"type": "string"},
        "tier": {"enum": ["free", "pro", "enterprise"]},
        "address": {
          "type": "object",
          "properties": {
            "street": {"type": "string"},
            "city": {"type": "string"},
            "country": {"enum": ["DE", "FR", "US", "JP", "BR"]}
          },
          "required": ["street", "city", "country"],
          "additionalProperties": false
        }
      },
      "required": ["name", "tier", "address"],
      "additionalProperties": false
    },
    "items": {
      "type": "array",
      "minItems": 1,
      "maxItems": 5,
      "items": {
        "type": "object",
        "properties": {
          "sku": {"type": "string"},
          "quantity": {"type": "integer", "minimum": 1, "maximum": 100},
          "price": {"type": "number"},
          "status": {"enum": ["pending", "shipped", "delivered", "cancelled"]},
          "tags": {
            "type": "array",
            "items": {"enum": ["gift", "fragile", "express", "bulk"]},
            "maxItems": 3
          }
        },
        "required": ["sku", "quantity", "price", "status"],
        "additionalProperties": false
      }
    }
  },
  "required": ["order_id", "priority", "customer", "items"],
  "additionalProperties": false
})";

// (c) recursive: a tree node whose children are nodes ($defs/$ref).
constexpr const char* kRecursive = R"({
  "$defs": {
    "node": {
      "type": "object",
      "properties": {
        "name": {"type": "string"},
        "kind": {"enum": ["file", "dir", "link"]},
        "size": {"type": "integer", "minimum": 0},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 4}
      },
      "required": ["name", "kind", "children"],
      "additionalProperties": false
    }
  },
  "$ref": "#/$defs/node"
})";

constexpr Schema kSchemas[] = {{"flat", kFlat}, {"nested", kNested}, {"recursive", kRecursive}};

// Token ids by first byte of their piece, for the walk's "prefer closing" choices.
struct VocabLists {
  std::vector<TokenId> quote;  // piece starts with '"'
  std::vector<TokenId> comma;  // ','
  std::vector<TokenId> close;  // only '}' and ']' (not "},{", which opens a sibling)
};

VocabLists MakeLists(const TokenVocab& vocab) {
  VocabLists l;
  for (TokenId t = 0; t < vocab.size(); ++t) {
    const std::string& p = vocab.piece(t);
    if (p.empty()) continue;
    if (p[0] == '"') l.quote.push_back(t);
    if (p[0] == ',') l.comma.push_back(t);
    if (p.find_first_not_of("}]") == std::string::npos) l.close.push_back(t);
  }
  return l;
}

// Chooses the walk's next token among those the mask left finite.
class Chooser {
 public:
  Chooser(const TokenVocab& vocab, const VocabLists& lists, uint64_t seed, int target_len)
      : vocab_(vocab), lists_(lists), rng_(seed), target_len_(target_len) {
    NewSegment();
  }

  TokenId Pick(std::span<const float> logits, int step) {
    auto ok = [&](TokenId t) { return std::isfinite(logits[static_cast<size_t>(t)]); };
    for (TokenId t : vocab_.eog()) {
      if (ok(t)) {
        // Where the structure may end, end (the top value of a compact JSON output is complete).
        return t;
      }
    }
    const bool long_output = step >= target_len_;
    const bool long_segment = seg_tokens_ >= seg_budget_;
    // Deep inside arrays and objects, close more often (a recursive schema's tree stays finite).
    const bool deep = !in_string_ && std::bernoulli_distribution(std::min(1.0, 0.1 * depth_))(rng_);
    if (deep && !long_output) {
      cand_.clear();
      for (TokenId t : lists_.close) {
        if (ok(t)) cand_.push_back(t);
      }
      if (!cand_.empty()) return Uniform(cand_);
    }
    if (long_output || long_segment) {
      std::vector<const std::vector<TokenId>*> tiers;
      if (in_string_) {
        tiers = {&lists_.quote};
      } else if (long_output) {
        tiers = {&lists_.close, &lists_.comma, &lists_.quote};
      } else {
        tiers = {&lists_.comma, &lists_.close};
      }
      for (const auto* tier : tiers) {
        cand_.clear();
        for (TokenId t : *tier) {
          if (ok(t)) cand_.push_back(t);
        }
        if (!cand_.empty()) return Uniform(cand_);
      }
    }
    // Uniform among the allowed: rejection first (most steps inside a string allow most of the
    // vocabulary), a scan where few are allowed.
    std::uniform_int_distribution<int> any(0, static_cast<int>(logits.size()) - 1);
    for (int i = 0; i < 64; ++i) {
      const TokenId t = any(rng_);
      if (ok(t)) return t;
    }
    cand_.clear();
    for (TokenId t = 0; t < static_cast<TokenId>(logits.size()); ++t) {
      if (ok(t)) cand_.push_back(t);
    }
    return cand_.empty() ? TokenId(-1) : Uniform(cand_);
  }

  int max_depth() const { return max_depth_; }

  // Tracks whether the output is inside a JSON string and how long the current string/number
  // (a segment) has run.
  void Observe(TokenId t) {
    if (vocab_.is_eog(t)) return;
    bool boundary = false;
    for (char c : vocab_.piece(t)) {
      if (escape_) {
        escape_ = false;
      } else if (in_string_ && c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        in_string_ = !in_string_;
        boundary = true;
      } else if (!in_string_ &&
                 (c == ',' || c == ':' || c == '{' || c == '}' || c == '[' || c == ']')) {
        boundary = true;
        if (c == '{' || c == '[') max_depth_ = std::max(max_depth_, ++depth_);
        if (c == '}' || c == ']') --depth_;
      }
    }
    if (boundary) {
      NewSegment();
    } else {
      ++seg_tokens_;
    }
  }

 private:
  TokenId Uniform(const std::vector<TokenId>& v) {
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng_)];
  }
  void NewSegment() {
    seg_tokens_ = 0;
    seg_budget_ = std::uniform_int_distribution<int>(1, 8)(rng_);
  }

  const TokenVocab& vocab_;
  const VocabLists& lists_;
  std::mt19937_64 rng_;
  int target_len_;
  bool in_string_ = false, escape_ = false;
  int depth_ = 0, max_depth_ = 0;  // open objects and arrays
  int seg_tokens_ = 0, seg_budget_ = 0;
  std::vector<TokenId> cand_;
};

struct WalkTotals {
  std::vector<double> step_us;  // every timed step
  std::vector<double> miss_us;  // the steps that computed a mask
  int finished = 0, invalid = 0;
  std::vector<double> wide_us;  // the misses that walked at least half the trie
  int64_t wide_nodes = 0;       // trie nodes those visited
  int64_t tokens = 0, misses = 0;
  int longest = 0, deepest = 0;  // tokens, nesting of objects and arrays
};

// One simulated output, its steps timed into *totals.
void Walk(const std::shared_ptr<TokenMasker>& masker, const VocabLists& lists, uint64_t seed,
          int max_tokens, bool show_unfinished, WalkTotals* totals) {
  const TokenVocab& vocab = masker->vocab();
  std::mt19937_64 len_rng(seed ^ 0x5bd1e995u);
  const int target = std::uniform_int_distribution<int>(max_tokens / 8, max_tokens / 2)(len_rng);
  Chooser chooser(vocab, lists, seed, target);
  ConstraintProcessor proc(masker);
  TokenHistory history(vocab.size());
  std::vector<float> logits(static_cast<size_t>(vocab.size()));
  std::string text;
  bool ended = false;
  int steps = 0;
  for (int step = 0; step < max_tokens; ++step) {
    ++steps;
    std::fill(logits.begin(), logits.end(), 0.0f);
    const structured::MaskStats before = masker->stats();
    const auto t0 = Clock::now();
    proc.Process(logits, history);
    const double us = Us(Clock::now() - t0);
    totals->step_us.push_back(us);
    const structured::MaskStats after = masker->stats();
    if (after.misses != before.misses) {
      totals->miss_us.push_back(us);
      ++totals->misses;
      const int64_t visited = after.trie_nodes_visited - before.trie_nodes_visited;
      if (2 * visited >= static_cast<int64_t>(vocab.nodes().size())) {
        // A wide miss: most of the trie walked (a state that allows most tokens, e.g. in a string).
        totals->wide_us.push_back(us);
        totals->wide_nodes += visited;
      }
    }
    ++totals->tokens;
    const TokenId t = chooser.Pick(logits, step);
    if (t < 0) break;  // nothing allowed: cannot happen for a valid grammar
    if (vocab.is_eog(t)) {
      ended = true;
      break;
    }
    chooser.Observe(t);
    history.Append(t);
    text += vocab.piece(t);
  }
  totals->longest = std::max(totals->longest, steps);
  totals->deepest = std::max(totals->deepest, chooser.max_depth());
  if (!ended) {
    if (show_unfinished) std::fprintf(stderr, "unfinished: %s\n", text.c_str());
    return;
  }
  ++totals->finished;
  const bool json_ok = nlohmann::json::accept(text);
  if (!json_ok || !structured::FullMatch(masker->grammar(), text)) {
    ++totals->invalid;
    std::fprintf(stderr, "invalid output (seed %llu): %s\n", static_cast<unsigned long long>(seed),
                 text.c_str());
  }
}

struct Row {
  std::string vocab, schema;
  int vocab_size = 0;
  double grammar_ms = 0, compile_ms = 0;
  WalkTotals cold, warm;
  int64_t warm_cached = 0;
};

void PrintDist(const char* label, WalkTotals& w) {
  std::sort(w.step_us.begin(), w.step_us.end());
  std::sort(w.miss_us.begin(), w.miss_us.end());
  std::printf(
      "    %-5s p50 %7.1f us  p99 %8.1f us  max %8.1f us  | %6lld tokens, %5lld misses "
      "(median miss %7.1f us), %d finished, %d invalid, longest %d tokens, "
      "nesting %d\n",
      label, bench::Percentile(w.step_us, 50), bench::Percentile(w.step_us, 99),
      w.step_us.empty() ? 0 : w.step_us.back(), static_cast<long long>(w.tokens),
      static_cast<long long>(w.misses), bench::Percentile(w.miss_us, 50), w.finished, w.invalid,
      w.longest, w.deepest);
  if (!w.wide_us.empty()) {
    double sum = 0;
    for (double us : w.wide_us) sum += us;
    std::sort(w.wide_us.begin(), w.wide_us.end());
    std::printf(
        "          %lld of the misses walked over half the trie: median %.1f us, "
        "%.1f ns per trie node\n",
        static_cast<long long>(w.wide_us.size()), bench::Percentile(w.wide_us, 50),
        sum * 1000.0 / static_cast<double>(w.wide_nodes));
  }
}

int Main(int argc, char** argv) {
  CLI::App app("structured output: compile time and mask cost per decoded token");
  std::vector<std::string> vocabs;
  int walks = 50, max_tokens = 300, compile_runs = 7;
  uint64_t seed = 1;
  std::string only;
  bool show_unfinished = false;
  bench::MaskBenchOptions mb;
  app.add_option("--vocab", vocabs, "GGUF with a tokenizer (repeatable)")->required();
  app.add_option("--maskbench", mb.dir,
                 "run MaskBench's data folder (maskbench/data) with the first --vocab instead");
  app.add_option("--maskbench-only", mb.only, "only MaskBench files whose name contains this");
  app.add_option("--maskbench-limit", mb.limit, "at most this many MaskBench files");
  app.add_option("--maskbench-out", mb.out, "write one JSON line per MaskBench schema here");
  app.add_option("--compile-timeout-ms", mb.compile_timeout_ms, "MaskBench: compile time limit");
  app.add_flag("--json", mb.json, "MaskBench: end with the totals as one JSON object");
  app.add_option("--walks", walks, "simulated outputs per schema, cold and warm each");
  app.add_option("--max-tokens", max_tokens, "longest output");
  app.add_option("--compile-runs", compile_runs, "fresh compilers per schema (median)");
  app.add_option("--seed", seed);
  app.add_option("--schema", only, "only this schema (flat, nested, recursive)");
  app.add_flag("--show-unfinished", show_unfinished, "print the outputs cut at --max-tokens");
  CLI11_PARSE(app, argc, argv);

  if (!mb.dir.empty()) {
    auto file = GgufFile::Open(vocabs.front());
    if (!file.ok()) return std::fprintf(stderr, "%s\n", file.status().ToString().c_str()), 1;
    auto tok = Tokenizer::FromGguf(*file);
    if (!tok.ok()) return std::fprintf(stderr, "%s\n", tok.status().ToString().c_str()), 1;
    return bench::RunMaskBench(mb, TokenVocab::FromTokenizer(*tok), *tok);
  }

  std::vector<Row> rows;
  for (const std::string& path : vocabs) {
    auto file = GgufFile::Open(path);
    if (!file.ok()) return std::fprintf(stderr, "%s\n", file.status().ToString().c_str()), 1;
    auto tok = Tokenizer::FromGguf(*file);
    if (!tok.ok()) return std::fprintf(stderr, "%s\n", tok.status().ToString().c_str()), 1;
    const auto tv0 = Clock::now();
    const std::shared_ptr<const TokenVocab> vocab = TokenVocab::FromTokenizer(*tok);
    const double trie_ms = Ms(Clock::now() - tv0);
    const VocabLists lists = MakeLists(*vocab);
    const std::string vname = path.substr(path.find_last_of('/') + 1);
    std::printf(
        "%s: %d tokens, %zu trie nodes, vocabulary trie built in %.1f ms (once per "
        "compiler)\n",
        vname.c_str(), vocab->size(), vocab->nodes().size(), trie_ms);
    for (const Schema& schema : kSchemas) {
      if (!only.empty() && only != schema.name) continue;
      ConstraintSpec spec;
      spec.kind = ConstraintKind::kJsonSchema;
      spec.text = schema.text;
      Row row;
      row.vocab = vname;
      row.schema = schema.name;
      row.vocab_size = vocab->size();
      std::vector<double> grammar_ms, compile_ms;
      for (int i = 0; i < compile_runs; ++i) {
        const auto g0 = Clock::now();
        auto g = structured::BuildGrammar(spec);
        grammar_ms.push_back(Ms(Clock::now() - g0));
        if (!g.ok()) return std::fprintf(stderr, "%s\n", g.status().ToString().c_str()), 1;
        ConstraintCompiler compiler(vocab, ConstraintCompilerOptions{});
        const auto c0 = Clock::now();
        auto m = compiler.Compile(spec);
        compile_ms.push_back(Ms(Clock::now() - c0));
        if (!m.ok()) return std::fprintf(stderr, "%s\n", m.status().ToString().c_str()), 1;
      }
      row.grammar_ms = bench::Median(grammar_ms);
      row.compile_ms = bench::Median(compile_ms);
      // Cold: a fresh compiler (and so a fresh mask cache) per walk.
      for (int w = 0; w < walks; ++w) {
        ConstraintCompiler compiler(vocab, ConstraintCompilerOptions{});
        auto m = compiler.Compile(spec);
        if (!m.ok()) return 1;
        Walk(*m, lists, seed + static_cast<uint64_t>(w), max_tokens, show_unfinished, &row.cold);
      }
      // Warm: one masker for every walk, as the server's compiler cache shares it.
      {
        ConstraintCompiler compiler(vocab, ConstraintCompilerOptions{});
        auto m = compiler.Compile(spec);
        if (!m.ok()) return 1;
        for (int w = 0; w < walks; ++w) {
          Walk(*m, lists, seed + static_cast<uint64_t>(w), max_tokens, show_unfinished, &row.warm);
        }
        row.warm_cached = (*m)->cached_masks();
      }
      std::printf(
          "  %-9s grammar %6.2f ms, compile (grammar + first mask) %7.2f ms (median of "
          "%d fresh compilers)\n",
          schema.name, row.grammar_ms, row.compile_ms, compile_runs);
      PrintDist("cold", row.cold);
      PrintDist("warm", row.warm);
      std::printf("    warm cache holds %lld masks after %d walks\n",
                  static_cast<long long>(row.warm_cached), walks);
      std::fflush(stdout);
      rows.push_back(std::move(row));
    }
  }

  std::printf(
      "\n| vocab | tokens | schema | compile ms (grammar ms) | cold p50 / p99 / max us | "
      "warm p50 / p99 / max us | tokens timed (cold, warm) | walks finished |\n");
  std::printf("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
  for (Row& r : rows) {
    auto dist = [](const WalkTotals& w) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.1f / %.1f / %.1f", bench::Percentile(w.step_us, 50),
                    bench::Percentile(w.step_us, 99), w.step_us.empty() ? 0 : w.step_us.back());
      return std::string(buf);
    };
    std::printf("| %s | %d | %s | %.2f (%.2f) | %s | %s | %lld, %lld | %d/%d |\n", r.vocab.c_str(),
                r.vocab_size, r.schema.c_str(), r.compile_ms, r.grammar_ms, dist(r.cold).c_str(),
                dist(r.warm).c_str(), static_cast<long long>(r.cold.tokens),
                static_cast<long long>(r.warm.tokens), r.cold.finished, walks);
  }
  for (const Row& r : rows) {
    if (r.cold.invalid + r.warm.invalid > 0) return 2;
  }
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) { return kvserve::Main(argc, argv); }
