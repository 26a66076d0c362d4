// kvserve bench: a serving benchmark for prefix-cache workloads against any OpenAI-compatible
// server (see docs/bench.md). The work is in src/loadgen/; this file is flags and printing.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "loadgen/compare.h"
#include "loadgen/ideal_cache.h"
#include "loadgen/report_html.h"
#include "loadgen/result.h"
#include "loadgen/runner.h"
#include "loadgen/server_metrics.h"
#include "loadgen/workload.h"

namespace kvserve::cli {
namespace {

using nlohmann::json;
namespace lg = kvserve::loadgen;

struct BenchOptions {
  std::string base_url;
  std::string model;
  std::string api_key;
  std::string workload = "shared-prefix";
  std::string endpoint = "auto";
  std::string order;  // long-doc: tile; repeat-prefix: random
  std::string tokenizer = "auto";
  lg::WorkloadConfig w;
  int concurrency = 16;
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  bool ignore_eos = false;
  double temperature = 0.0;
  std::string slo;
  int block_size = 16;
  double timeout_s = 600;
  std::string out;
  std::string report;
  bool no_progress = false;
  std::vector<std::string> compare;
};

json ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) Fail("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) Fail(path + " is not valid JSON");
  return j;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) Fail("cannot write " + path);
}

void RunCompare(const BenchOptions& o) {
  const json a = ReadJsonFile(o.compare[0]);
  const json b = ReadJsonFile(o.compare[1]);
  auto rows = lg::CompareResults(a, b);
  if (!rows.ok()) Fail(rows.status().message());
  std::fputs(lg::FormatComparison(*rows, o.compare[0], o.compare[1]).c_str(), stdout);
}

// A progress bar on standard error, redrawn in place; only when it is a terminal.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO)) {}
  void Update(const lg::Progress& p) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (p.finished < p.total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr int kWidth = 30;
    const int filled = p.total > 0 ? kWidth * p.finished / p.total : kWidth;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r[%s] %d/%d requests  %d in flight  %d failed  %.1f s  %.0f tok/s   ",
                 bar.c_str(), p.finished, p.total, p.in_flight, p.failed, p.elapsed_s,
                 p.elapsed_s > 0 ? p.output_tokens / p.elapsed_s : 0.0);
    if (p.finished == p.total) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  std::chrono::steady_clock::time_point last_{};
};

json WorkloadParams(const lg::WorkloadConfig& w) {
  json p = {{"output_len", w.output_len}};
  switch (w.kind) {
    case lg::WorkloadKind::kSharedPrefix:
      p.update({{"groups", w.groups}, {"prompts_per_group", w.prompts_per_group},
                {"system_prompt_len", w.system_prompt_len}, {"question_len", w.question_len}});
      break;
    case lg::WorkloadKind::kRepeatPrefix:
      p.update({{"num_prompts", w.num_prompts}, {"num_prefixes", w.num_prefixes},
                {"prefix_len", w.prefix_len}, {"suffix_len", w.suffix_len},
                {"order", lg::DocOrderName(w.repeat_order)}});
      break;
    case lg::WorkloadKind::kMultiTurn:
      p.update({{"conversations", w.conversations}, {"rounds", w.rounds}, {"user_len", w.user_len}});
      break;
    case lg::WorkloadKind::kLongDoc:
      p.update({{"docs", w.num_docs}, {"doc_len", w.doc_len},
                {"questions_per_doc", w.questions_per_doc}, {"question_len", w.question_len},
                {"order", lg::DocOrderName(w.order)}});
      break;
    case lg::WorkloadKind::kRandom:
      p.update({{"num_prompts", w.num_prompts}, {"input_len", w.input_len},
                {"range_ratio", w.range_ratio}});
      break;
  }
  return p;
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void RunBench(BenchOptions& o) {
  if (!o.compare.empty()) return RunCompare(o);
  if (o.base_url.empty()) Fail("--base-url is required (e.g. http://127.0.0.1:8080)");

  // Flags.
  auto kind = lg::ParseWorkloadKind(o.workload);
  if (!kind.ok()) Fail(kind.status().message());
  o.w.kind = *kind;
  if (!o.order.empty()) {
    auto order = lg::ParseDocOrder(o.order);
    if (!order.ok()) Fail(order.status().message());
    o.w.order = o.w.repeat_order = *order;
    if (o.w.kind == lg::WorkloadKind::kLongDoc && o.w.order == lg::DocOrder::kRandom) {
      Fail("long-doc takes --order tile or interleave");
    }
  }
  if (Status s = lg::ValidateWorkloadConfig(o.w); !s.ok()) Fail(s.message());
  lg::RunConfig run;
  auto target = lg::ParseBaseUrl(o.base_url);
  if (!target.ok()) Fail(target.status().message());
  run.target = *target;
  run.target.timeout_s = o.timeout_s;
  if (!(o.timeout_s > 0)) Fail("--timeout must be > 0 seconds");
  if (o.api_key.empty()) {
    for (const char* env : {"KVSERVE_API_KEY", "OPENAI_API_KEY"}) {
      if (const char* key = std::getenv(env); key && *key) {
        o.api_key = key;
        break;
      }
    }
  }
  run.target.api_key = o.api_key;
  if (o.endpoint == "auto") {
    run.endpoint = o.w.kind == lg::WorkloadKind::kMultiTurn ? lg::Endpoint::kChat
                                                            : lg::Endpoint::kCompletions;
  } else if (o.endpoint == "chat") {
    run.endpoint = lg::Endpoint::kChat;
  } else if (o.endpoint == "completions") {
    run.endpoint = lg::Endpoint::kCompletions;
  } else {
    Fail("--endpoint must be auto, completions or chat (got '" + o.endpoint + "')");
  }
  if (o.concurrency < 1 || o.concurrency > 4096) Fail("--concurrency must be in [1, 4096]");
  run.concurrency = o.concurrency;
  run.arrival = {o.request_rate, o.burstiness, o.w.seed};
  if (Status s = lg::ValidateArrivalConfig(run.arrival); !s.ok()) Fail(s.message());
  run.ignore_eos = o.ignore_eos;
  if (!(o.temperature >= 0)) Fail("--temperature must be >= 0");
  run.temperature = o.temperature;
  lg::Slo slo;
  if (!o.slo.empty()) {
    auto parsed = lg::ParseSlo(o.slo);
    if (!parsed.ok()) Fail(parsed.status().message());
    slo = *parsed;
  }
  if (o.block_size < 1) Fail("--block-size must be >= 1");
  if (o.tokenizer != "auto" && o.tokenizer != "server" && o.tokenizer != "estimate") {
    Fail("--tokenizer must be auto, server or estimate");
  }

  // The server: model name and token counter.
  lg::ApiClient probe(run.target);
  run.model = o.model;
  if (run.model.empty()) {
    auto id = probe.FirstModelId();
    if (!id.ok()) {
      if (id.status().code() == StatusCode::kIoError) Fail(id.status().message());
      std::fprintf(stderr, "kvserve bench: %s; sending no model name\n", id.status().message().c_str());
    } else {
      run.model = *id;
    }
  }
  std::string counter_name = "estimate";
  lg::TokenCounter counter = [](std::string_view text) -> Result<int> {
    return lg::EstimateTokens(text);
  };
  if (o.tokenizer != "estimate") {
    auto probe_count = probe.CountTokens("hello world", run.model);
    if (probe_count.ok()) {
      counter_name = "server";
      counter = [&probe, &run](std::string_view text) { return probe.CountTokens(text, run.model); };
    } else if (o.tokenizer == "server" || probe_count.status().code() == StatusCode::kIoError) {
      Fail(probe_count.status().message());
    } else {
      std::fprintf(stderr, "kvserve bench: no usable /tokenize (%s); estimating 4 bytes per token\n",
                   probe_count.status().message().c_str());
    }
  }

  // The workload.
  lg::TextBuilder builder(counter);
  auto workload = lg::BuildWorkload(o.w, builder);
  if (!workload.ok()) Fail("building the prompts: " + workload.status().message());
  std::fprintf(stderr, "kvserve bench: %s, %zu requests (%d /tokenize calls), %s to %s\n",
               lg::WorkloadKindName(o.w.kind), workload->requests.size(),
               workload->num_counter_calls,
               run.endpoint == lg::Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions",
               run.target.origin.c_str());

  // The run, between two scrapes of the server's own metrics (where it has them).
  auto scrape = [&probe] {
    auto text = probe.Metrics();
    return text.ok() ? lg::ParsePrometheusText(*text) : std::vector<lg::MetricSample>{};
  };
  const std::vector<lg::MetricSample> metrics_before = scrape();
  const std::string started_at = UtcNow();
  ProgressBar bar(!o.no_progress);
  lg::RunOutput output =
      lg::RunWorkload(*workload, run, [&](const lg::Progress& p) { bar.Update(p); });
  const std::vector<lg::MetricSample> metrics_after = scrape();

  // Ideal cached tokens, in send order.
  std::vector<int> order_ids;
  for (const lg::RequestRecord& r : output.records) {
    if (r.sent) order_ids.push_back(r.id);
  }
  std::sort(order_ids.begin(), order_ids.end(), [&](int a, int b) {
    return output.records[static_cast<size_t>(a)].seq < output.records[static_cast<size_t>(b)].seq;
  });
  std::vector<int> position(output.records.size(), -1);
  std::vector<lg::SentPrompt> sent;
  for (int id : order_ids) {
    const lg::RequestRecord& r = output.records[static_cast<size_t>(id)];
    const lg::RequestSpec& spec = workload->requests[static_cast<size_t>(id)];
    position[static_cast<size_t>(id)] = static_cast<int>(sent.size());
    lg::SentPrompt p;
    p.segments = &output.prompts[static_cast<size_t>(id)];
    p.prompt_tokens = r.ok ? r.prompt_tokens : -1;
    p.completion_tokens = r.ok ? r.completion_tokens : -1;
    p.prev = spec.prev_id >= 0 ? position[static_cast<size_t>(spec.prev_id)] : -1;
    sent.push_back(p);
  }
  const std::vector<int> ideal = lg::IdealCachedTokens(sent);
  for (size_t i = 0; i < order_ids.size(); ++i) {
    output.records[static_cast<size_t>(order_ids[i])].ideal_cached_tokens = ideal[i];
  }

  // Results.
  lg::BenchSummary summary = lg::SummarizeRun(output.records, output.duration_s, slo, o.block_size);
  summary.server = lg::ServerLatencyBetween(metrics_before, metrics_after);
  json config = {
      {"base_url", o.base_url},
      {"model", run.model},
      {"endpoint", run.endpoint == lg::Endpoint::kChat ? "chat" : "completions"},
      {"workload", lg::WorkloadKindName(o.w.kind)},
      {"workload_params", WorkloadParams(o.w)},
      {"concurrency", o.concurrency},
      {"request_rate", std::isinf(o.request_rate) ? json(nullptr) : json(o.request_rate)},
      {"burstiness", o.burstiness},
      {"arrival", std::isinf(o.request_rate) ? "none" : o.burstiness == 1.0 ? "poisson" : "gamma"},
      {"seed", o.w.seed},
      {"ignore_eos", o.ignore_eos},
      {"temperature", o.temperature},
      {"slo", slo.any() ? json{{"ttft_ms", slo.ttft_ms}, {"tpot_ms", slo.tpot_ms}, {"e2e_ms", slo.e2e_ms}}
                        : json(nullptr)},
      {"token_counter", counter_name},
      {"started_at", started_at},
      {"tool", "kvserve 0.1.0"}};
  const json result = lg::ResultToJson(config, summary, output.records);
  std::fputs(lg::FormatSummaryTable(summary).c_str(), stdout);
  std::fflush(stdout);
  if (!o.out.empty()) WriteFile(o.out, result.dump(2) + "\n");
  if (!o.report.empty()) WriteFile(o.report, lg::RenderHtmlReport(result));
  if (summary.completed == 0) Fail("no request completed", 2);
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  lg::WorkloadConfig& w = o->w;
  CLI::App* cmd = app.add_subcommand(
      "bench", "Benchmark an OpenAI-compatible server (kvserve, llama.cpp, vLLM) on prefix-cache "
               "workloads");
  cmd->add_option("--base-url", o->base_url, "Server URL, e.g. http://127.0.0.1:8080");
  cmd->add_option("--model", o->model, "Model name to send (default: the first of /v1/models)");
  cmd->add_option("--api-key", o->api_key, "Bearer key (default: env KVSERVE_API_KEY or OPENAI_API_KEY)");
  cmd->add_option("--workload", o->workload,
                  "shared-prefix, repeat-prefix, multi-turn, long-doc or random");
  cmd->add_option("--endpoint", o->endpoint,
                  "auto (chat for multi-turn, else completions), completions or chat");
  cmd->add_option("--seed", w.seed, "Seed of prompts and arrivals (default 0)");
  cmd->add_option("--output-len,--answer-len", w.output_len, "max_tokens of every request (default 32)");
  // shared-prefix
  cmd->add_option("--groups", w.groups, "shared-prefix: groups with one system prompt (default 4)");
  cmd->add_option("--prompts-per-group", w.prompts_per_group, "shared-prefix: prompts per group (default 8)");
  cmd->add_option("--system-prompt-len", w.system_prompt_len, "shared-prefix: system prompt tokens (default 1024)");
  cmd->add_option("--question-len", w.question_len, "shared-prefix, long-doc: question tokens (default 32)");
  // repeat-prefix, random
  cmd->add_option("--num-prompts", w.num_prompts, "repeat-prefix, random: requests (default 32)");
  cmd->add_option("--num-prefixes", w.num_prefixes, "repeat-prefix: distinct prefixes (default 4)");
  cmd->add_option("--prefix-len", w.prefix_len, "repeat-prefix: prefix tokens (default 512)");
  cmd->add_option("--suffix-len", w.suffix_len, "repeat-prefix: suffix tokens (default 64)");
  cmd->add_option("--input-len", w.input_len, "random: prompt tokens (default 256)");
  cmd->add_option("--range-ratio", w.range_ratio,
                  "random: prompt lengths uniform in input-len * [1-r, 1+r] (default 0)");
  // multi-turn
  cmd->add_option("--conversations", w.conversations, "multi-turn: conversations (default 8)");
  cmd->add_option("--rounds", w.rounds, "multi-turn: rounds per conversation (default 4)");
  cmd->add_option("--user-len", w.user_len, "multi-turn: tokens of each user turn (default 64)");
  // long-doc
  cmd->add_option("--docs", w.num_docs, "long-doc: documents (default 2)");
  cmd->add_option("--doc-len", w.doc_len, "long-doc: document tokens (default 2048)");
  cmd->add_option("--questions-per-doc", w.questions_per_doc, "long-doc: questions per document (default 4)");
  cmd->add_option("--order", o->order,
                  "long-doc: tile (default; one document's questions together) or interleave; "
                  "repeat-prefix: random (default), interleave (prefixes in turn: defeats LRU) "
                  "or tile");
  // load shape
  cmd->add_option("--concurrency,--max-concurrency", o->concurrency,
                  "Most requests in flight at once (default 16)");
  cmd->add_option("--request-rate", o->request_rate,
                  "Requests per second with random arrivals (default: inf, no gaps)");
  cmd->add_option("--burstiness", o->burstiness,
                  "Gamma shape of the arrival gaps: 1 = Poisson, < 1 burstier (default 1)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Ask for exactly output-len tokens (ignore_eos)");
  cmd->add_option("--temperature", o->temperature, "Sampling temperature (default 0)");
  // measures and output
  cmd->add_option("--slo", o->slo, "Goodput objectives in ms, e.g. ttft:500,tpot:50 (also e2e)");
  cmd->add_option("--block-size", o->block_size,
                  "Block size for the block-granular ideal cached count (default 16)");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "Token counts for prompt lengths: auto (the server's /tokenize if any), server or "
                  "estimate");
  cmd->add_option("--timeout", o->timeout_s, "Seconds to wait on one request (default 600)");
  cmd->add_option("--out", o->out, "Write the full result as JSON");
  cmd->add_option("--report", o->report, "Write an HTML report with plots");
  cmd->add_flag("--no-progress", o->no_progress, "No progress bar");
  cmd->add_option("--compare", o->compare, "Compare two result files: --compare a.json b.json")
      ->expected(2);
  cmd->callback([o] { RunBench(*o); });
}

}  // namespace kvserve::cli
