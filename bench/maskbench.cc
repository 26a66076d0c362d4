#include "maskbench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench_stats.h"
#include "sample/token_history.h"
#include "structured/constraint.h"

namespace kvserve::bench {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using structured::ConstraintCompiler;
using structured::ConstraintCompilerOptions;
using structured::ConstraintKind;
using structured::ConstraintProcessor;
using structured::ConstraintSpec;
using Clock = std::chrono::steady_clock;

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// Python's json.dumps(v, indent=None, ensure_ascii=False): ", " and ": " between items; strings
// escape '"', '\\' and the controls below U+0020 (as nlohmann's dump does with ensure_ascii off).
void PyDump(const json& v, std::string* out) {
  if (v.is_object()) {
    *out += '{';
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) *out += ", ";
      first = false;
      *out += json(k).dump();
      *out += ": ";
      PyDump(x, out);
    }
    *out += '}';
  } else if (v.is_array()) {
    *out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) *out += ", ";
      PyDump(v[i], out);
    }
    *out += ']';
  } else {
    *out += v.dump();
  }
}

// The data set's split: the name before "---", or before the trailing "_<n>" (BFCL_simple_12).
std::string Split(const std::string& file) {
  std::string stem = file.substr(0, file.size() - 5);  // ".json"
  if (auto p = stem.find("---"); p != std::string::npos) return stem.substr(0, p);
  const auto p = stem.find_last_of('_');
  if (p != std::string::npos && p + 1 < stem.size() &&
      stem.find_first_not_of("0123456789", p + 1) == std::string::npos) {
    return stem.substr(0, p);
  }
  return stem;
}

enum class Outcome { kPassing, kCompileError, kTimeout, kValidationError, kInvalidationError };

struct Tally {
  int schemas = 0, passing = 0, compile_error = 0, timeout = 0, validation_error = 0,
      invalidation_error = 0;
  std::vector<double> mask_us, compile_ms;
  int64_t tests = 0, tokens = 0;

  void Add(Outcome o) {
    ++schemas;
    switch (o) {
      case Outcome::kPassing:
        ++passing;
        break;
      case Outcome::kCompileError:
        ++compile_error;
        break;
      case Outcome::kTimeout:
        ++timeout;
        break;
      case Outcome::kValidationError:
        ++validation_error;
        break;
      case Outcome::kInvalidationError:
        ++invalidation_error;
        break;
    }
  }
};

std::string Row(const std::string& name, Tally& t) {
  std::sort(t.mask_us.begin(), t.mask_us.end());
  std::sort(t.compile_ms.begin(), t.compile_ms.end());
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "| %s | %d | %d | %d | %d | %d | %d | %.1f / %.1f / %.0f | %.2f / %.1f |",
                name.c_str(), t.schemas, t.passing, t.compile_error, t.timeout, t.validation_error,
                t.invalidation_error, Percentile(t.mask_us, 50), Percentile(t.mask_us, 99),
                t.mask_us.empty() ? 0 : t.mask_us.back(), Percentile(t.compile_ms, 50),
                Percentile(t.compile_ms, 99));
  return buf;
}

json Percentiles(const std::vector<double>& sorted) {
  json p = json::object();
  for (int q : {50, 75, 90, 99}) p[fmt::format("p{}", q)] = Percentile(sorted, q);
  p["p100"] = sorted.empty() ? 0 : sorted.back();
  return p;
}

}  // namespace

int RunMaskBench(const MaskBenchOptions& options,
                 const std::shared_ptr<const structured::TokenVocab>& vocab,
                 const Tokenizer& tokenizer) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.ends_with(".json")) continue;
    if (!options.only.empty() && name.find(options.only) == std::string::npos) continue;
    files.push_back(name);
  }
  if (ec) {
    std::fprintf(stderr, "cannot read %s: %s\n", options.dir.c_str(), ec.message().c_str());
    return 1;
  }
  std::sort(files.begin(), files.end());
  if (options.limit > 0 && files.size() > static_cast<size_t>(options.limit)) {
    files.resize(static_cast<size_t>(options.limit));
  }
  std::ofstream out;
  if (!options.out.empty()) out.open(options.out);

  std::map<std::string, Tally> splits;
  Tally total;
  std::vector<float> logits(static_cast<size_t>(vocab->size()));
  int done = 0;
  for (const std::string& name : files) {
    std::ifstream in(fs::path(options.dir) / name);
    std::stringstream ss;
    ss << in.rdbuf();
    json doc = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded() || !doc.contains("schema")) {
      std::fprintf(stderr, "%s: not a MaskBench file, skipped\n", name.c_str());
      continue;
    }
    Tally& split = splits[Split(name)];
    json record = {{"file", name}};
    ConstraintSpec spec;
    spec.kind = ConstraintKind::kJsonSchema;
    spec.text = doc["schema"].dump();
    spec.json.flexible_whitespace = true;
    ConstraintCompiler compiler(
        vocab, ConstraintCompilerOptions{std::chrono::milliseconds(options.compile_timeout_ms)});
    const auto c0 = Clock::now();
    auto masker = compiler.Compile(spec);
    const double compile_ms = Us(Clock::now() - c0) / 1000.0;
    Outcome outcome = Outcome::kPassing;
    double mask_max_us = 0;  // the slowest mask of this schema
    double mask_sum_us = 0;  // all of this schema's masks
    int64_t mask_count = 0;
    if (!masker.ok()) {
      const std::string msg = masker.status().message();
      outcome =
          msg.find("time limit") != std::string::npos ? Outcome::kTimeout : Outcome::kCompileError;
      record["compile_error"] = msg;
    } else {
      split.compile_ms.push_back(compile_ms);
      total.compile_ms.push_back(compile_ms);
      record["compile_ms"] = compile_ms;
      const json& tests = doc.value("tests", json::array());
      for (size_t i = 0; i < tests.size(); ++i) {
        const json& test = tests[i];
        std::string text;
        try {
          PyDump(test.value("data", json()), &text);
        } catch (const json::exception&) {
          continue;  // not UTF-8: Python could not have written it either
        }
        const bool valid = test.value("valid", true);
        const std::vector<TokenId> ids = tokenizer.Encode(text, false, false);
        ConstraintProcessor proc(*masker);
        TokenHistory history(vocab->size());
        bool accepted = true;
        size_t prefix_bytes = 0;  // of the tokens allowed before the first refused one
        for (TokenId t : ids) {
          std::fill(logits.begin(), logits.end(), 0.0f);
          const auto t0 = Clock::now();
          proc.Process(logits, history);
          const double us = Us(Clock::now() - t0);
          split.mask_us.push_back(us);
          total.mask_us.push_back(us);
          mask_max_us = std::max(mask_max_us, us);
          mask_sum_us += us;
          ++mask_count;
          ++split.tokens;
          ++total.tokens;
          if (t < 0 || t >= vocab->size() || !std::isfinite(logits[static_cast<size_t>(t)])) {
            accepted = false;
            break;
          }
          history.Append(t);
          prefix_bytes += vocab->piece(t).size();
        }
        ++split.tests;
        ++total.tests;
        if (accepted != valid) {
          outcome = valid ? Outcome::kValidationError : Outcome::kInvalidationError;
          record["error"] = {{"test", i}, {"valid", valid}, {"text", text}};
          if (!accepted) record["error"]["allowed_prefix"] = text.substr(0, prefix_bytes);
        }
      }
    }
    if (masker.ok()) {
      record["mask_max_us"] = mask_max_us;
      record["mask_sum_us"] = mask_sum_us;
      record["masks"] = mask_count;
      const structured::MaskStats stats = (*masker)->stats();  // deterministic, unlike times
      record["mask_misses"] = stats.misses;
      record["trie_nodes"] = stats.trie_nodes_visited;
    }
    split.Add(outcome);
    total.Add(outcome);
    static const char* kNames[] = {"passing", "compile_error", "timeout", "validation_error",
                                   "invalidation_error"};
    record["outcome"] = kNames[static_cast<int>(outcome)];
    if (out.is_open())
      out << record.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
    if (++done % 500 == 0) {
      std::fprintf(stderr, "%d/%zu schemas, %d passing\n", done, files.size(), total.passing);
    }
  }

  std::printf(
      "\n| split | schemas | passing | compile error | timeout | validation error | "
      "invalidation error | mask p50 / p99 / max us | compile p50 / p99 ms |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (auto& [name, t] : splits) std::printf("%s\n", Row(name, t).c_str());
  std::printf("%s\n", Row("**all**", total).c_str());
  std::printf("%lld tests, %lld tokens timed\n", static_cast<long long>(total.tests),
              static_cast<long long>(total.tokens));
  if (options.json) {
    json j = {{"schemas", total.schemas},
              {"passing", total.passing},
              {"compile_error", total.compile_error},
              {"timeout", total.timeout},
              {"validation_error", total.validation_error},
              {"invalidation_error", total.invalidation_error},
              {"tests", total.tests},
              {"tokens", total.tokens},
              {"mask_us", Percentiles(total.mask_us)},
              {"compile_ms", Percentiles(total.compile_ms)}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace kvserve::bench
