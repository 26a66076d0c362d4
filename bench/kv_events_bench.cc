// kvserve_kv_events_bench: the cost of the KV event stream on decode speed, in process (no HTTP).
//
// The same requests run on two EngineCores of the same model, one without events and one
// publishing them (--kv-events-config semantics: a PUB socket on a loopback port, with a
// subscriber thread in this process that receives and decodes nothing but counts the batches,
// as a router would read them). --runs rounds alternate the sides. Each round sends --batch new
// prompts (no prefix shared with earlier rounds), so every round inserts blocks as prompts and
// generated tokens fill them, and evicts the earlier rounds' blocks once the cache is full:
// the stream carries BlockStored and BlockRemoved events all along. Decode tokens/s = tokens
// after each request's first / time from the first token to the last, summed over the batch.
// Prints each run, the medians, the median of the rounds' on/off ratios (a round's two runs are
// adjacent in time, so drift in a shared machine's speed mostly cancels) and the events
// published.
//
// The engine thread's own share is then timed alone: a second publisher gets the same number of
// steps with the same blocks stored and evicted (OnBlockInserted, OnBlockEvicted, EndStep: what
// the engine thread calls; its publisher thread hashes and sends beside it), against the mean
// step time of the "on" runs.
//
//   kvserve_kv_events_bench [--model M.gguf] [--batch 4] [--prompt 96] [--n 256] [--runs 7]
//       [--threads 1] [--block-size 16] [--no-subscriber]
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "bench_stats.h"
#include "engine/engine_core.h"
#include "engine/synthetic_model.h"

namespace kvserve {
namespace {

using Clock = std::chrono::steady_clock;
using bench::Median;

struct Options {
  std::string model;
  int batch = 4, prompt = 96, n = 256, runs = 7, threads = 1, block_size = 16;
  bool no_subscriber = false;
  std::string only;   // "on" or "off": one engine only
  bool same = false;  // both engines without events: their own difference (an A/A run)
};

std::unique_ptr<Model> LoadModel(const std::string& path, int max_batch) {
  auto file = OpenModelOrDefault(path);
  if (!file.ok()) throw std::runtime_error(file.status().ToString());
  auto model = Model::Load(std::move(file).value(), ModelOptions{max_batch, 0});
  if (!model.ok()) throw std::runtime_error(model.status().ToString());
  return std::move(model).value();
}

// Round r's prompts: distinct token runs (within the vocabulary), no prefix shared across rounds.
std::vector<EngineRequest> Requests(const Options& o, int round, int vocab) {
  std::vector<EngineRequest> reqs;
  for (int b = 0; b < o.batch; ++b) {
    EngineRequest r;
    for (int i = 0; i < o.prompt; ++i) {
      r.prompt.push_back(1 + (round * 7919 + b * 104729 + i * 31) % (vocab - 1));
    }
    r.max_tokens = o.n;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

// The process's CPU seconds so far, every thread (the publisher's and ZeroMQ's included).
double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct RunStats {
  double tokens_per_s = 0;
  double cpu_us_per_token = 0;  // process CPU time over the run / tokens generated
};

// Adds the run's wall time to *seconds.
RunStats DecodeRun(EngineCore& core, const std::vector<EngineRequest>& reqs, int64_t* next_id,
                   double* seconds) {
  const Clock::time_point start = Clock::now();
  const double cpu_start = CpuSeconds();
  std::vector<Clock::time_point> first(reqs.size()), last(reqs.size());
  std::vector<size_t> count(reqs.size(), 0);
  const int64_t base = *next_id;
  for (const EngineRequest& r : reqs) {
    const Status st = core.Add(RequestId((*next_id)++), r);
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
      if (count[i] == 0) first[i] = now;
      last[i] = now;
      count[i] += e.new_tokens.size();
    }
    events.clear();
  }
  *seconds += std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = CpuSeconds() - cpu_start;
  const Clock::time_point t0 = *std::min_element(first.begin(), first.end());
  const Clock::time_point t1 = *std::max_element(last.begin(), last.end());
  size_t tokens = 0;
  size_t generated = 0;
  for (size_t c : count) {
    tokens += c > 0 ? c - 1 : 0;
    generated += c;
  }
  RunStats r;
  r.tokens_per_s =
      static_cast<double>(tokens) / std::max(std::chrono::duration<double>(t1 - t0).count(), 1e-9);
  r.cpu_us_per_token = 1e6 * cpu / static_cast<double>(std::max<size_t>(generated, 1));
  return r;
}

// CPU seconds of each thread of the process so far, by name (the publisher's is "kv-events",
// ZeroMQ's I/O threads "ZMQbg/...").
void PrintThreadCpu() {
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  std::map<std::string, double> by_name;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(e.path() / "stat");
    std::string line;
    std::getline(in, line);
    const size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    std::vector<std::string> f;
    while (rest >> field) f.push_back(field);
    if (f.size() < 13) continue;  // utime and stime are fields 14 and 15 of the line
    by_name[line.substr(open + 1, close - open - 1)] +=
        (std::stod(f[11]) + std::stod(f[12])) / tick;
  }
  std::printf("CPU seconds by thread:");
  for (const auto& [name, s] : by_name) std::printf(" %s %.2f;", name.c_str(), s);
  std::printf("\n");
}

// Engine-thread seconds of the publisher calls for `steps` steps carrying `stored` inserts and
// `removed` evictions, spread evenly.
double EngineThreadSeconds(const Options& o, int64_t steps, uint64_t stored, uint64_t removed) {
  KvEventsConfig ec;
  ec.enabled = true;
  ec.endpoint = "tcp://127.0.0.1:*";
  auto pub = KvEventPublisher::Create(ec, o.block_size);
  if (!pub.ok()) throw std::runtime_error(pub.status().ToString());
  const BlockKey root{};
  std::vector<BlockKey> keys(stored);
  for (size_t i = 0; i < keys.size(); ++i) {
    for (int b = 0; b < 4; ++b)
      keys[i].bytes[static_cast<size_t>(b)] = static_cast<uint8_t>(i >> (8 * b));
    keys[i].bytes[4] = 1;
  }
  const std::vector<TokenId> tokens(static_cast<size_t>(o.block_size), 7);
  const Clock::time_point t0 = Clock::now();
  uint64_t done_stored = 0, done_removed = 0;
  for (int64_t s = 1; s <= steps; ++s) {
    for (; done_stored < stored * static_cast<uint64_t>(s) / static_cast<uint64_t>(steps);
         ++done_stored) {
      (*pub)->OnBlockInserted(TreeBlock{keys[done_stored], root, root, tokens, BlockId(0)});
    }
    for (; done_removed < removed * static_cast<uint64_t>(s) / static_cast<uint64_t>(steps) &&
           done_removed < done_stored;
         ++done_removed) {
      (*pub)->OnBlockEvicted(TreeBlock{keys[done_removed], root, root, tokens, BlockId(0)});
    }
    (*pub)->EndStep();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  (*pub)->Flush();
  return seconds;
}

// An in-process subscriber on `endpoint` that counts the batches it receives, until Stop().
class Subscriber {
 public:
  explicit Subscriber(const std::string& endpoint)
      : thread_([this, endpoint] {
          zmq::socket_t sub(ctx_, zmq::socket_type::sub);
          sub.set(zmq::sockopt::subscribe, "");
          sub.set(zmq::sockopt::rcvtimeo, 100);
          sub.connect(endpoint);
          while (!stop_.load()) {
            zmq::message_t m;
            if (sub.recv(m) && !m.more()) received_.fetch_add(1);
          }
        }) {}
  ~Subscriber() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t received() const { return received_.load(); }

 private:
  zmq::context_t ctx_{1};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> received_{0};
  std::thread thread_;  // last: starts once the members it uses exist
};

// One engine (events as `c` says) for --runs rounds: its median decode speed and CPU per token.
// Alternating whole processes of each side, as scripted in docs/kv_events.md, averages out what
// two engines in one process differ by (where their buffers landed), which an A/A run (--same)
// shows to be several percent on a small shared machine.
int RunOne(const Options& o, const EngineConfig& c) {
  auto core = EngineCore::Create(LoadModel(o.model, 512), c);
  if (!core.ok()) throw std::runtime_error(core.status().ToString());
  std::optional<Subscriber> subscriber;
  if (KvEventPublisher* pub = (*core)->kv_event_publisher(); pub && !o.no_subscriber) {
    subscriber.emplace(pub->endpoint());
  }
  const int vocab = (*core)->model().config().vocab;
  std::vector<double> tps, cpu;
  double seconds = 0;
  int64_t next_id = 1;
  for (int r = 0; r < o.runs; ++r) {
    const RunStats rs = DecodeRun(**core, Requests(o, r, vocab), &next_id, &seconds);
    tps.push_back(rs.tokens_per_s);
    cpu.push_back(rs.cpu_us_per_token);
  }
  std::printf("events %s: median decode tokens/s %.1f, median CPU per generated token %.1f us\n",
              c.kv_events.enabled ? "on" : "off", Median(tps), Median(cpu));
  return 0;
}

int Run(const Options& o) {
  EngineConfig c;
  c.num_threads = o.threads;
  c.block_size = o.block_size;
  c.max_num_seqs = o.batch;
  c.max_num_batched_tokens = 512;
  c.max_model_len = o.prompt + o.n + 16;
  // Room for two rounds: the third round evicts the first one's blocks.
  c.num_blocks = 2 * o.batch * ((c.max_model_len + o.block_size - 1) / o.block_size + 1);
  EngineConfig con = c;
  con.kv_events.enabled = true;
  con.kv_events.endpoint = "tcp://127.0.0.1:*";
  if (o.same) c = con;  // both publish
  if (o.only == "on" || o.only == "off") return RunOne(o, o.only == "on" ? con : c);
  auto off = EngineCore::Create(LoadModel(o.model, 512), c);
  if (!off.ok()) throw std::runtime_error(off.status().ToString());
  auto on = EngineCore::Create(LoadModel(o.model, 512), con);
  if (!on.ok()) throw std::runtime_error(on.status().ToString());
  KvEventPublisher* pub = (*on)->kv_event_publisher();

  std::optional<Subscriber> subscriber;
  if (!o.no_subscriber) subscriber.emplace(pub->endpoint());

  const int vocab = (*on)->model().config().vocab;
  std::printf(
      "model %s, batch %d, prompt %d, %d generated, %d threads, block size %d, "
      "%d blocks, subscriber %s\n",
      o.model.empty() ? "embedded" : o.model.c_str(), o.batch, o.prompt, o.n, o.threads,
      o.block_size, c.num_blocks, o.no_subscriber ? "none" : "in process");
  std::vector<double> t_off, t_on, ratios, cpu_off, cpu_on;
  double seconds_off = 0, seconds_on = 0;
  int64_t next_id = 1;
  for (int r = 0; r < o.runs; ++r) {
    // Alternate which side goes first, so drift in the machine's speed hits both alike.
    const auto reqs = Requests(o, r, vocab);
    for (int side = 0; side < 2; ++side) {
      const bool events = (side + r) % 2 == 1;
      const RunStats rs =
          DecodeRun(events ? **on : **off, reqs, &next_id, events ? &seconds_on : &seconds_off);
      (events ? t_on : t_off).push_back(rs.tokens_per_s);
      (events ? cpu_on : cpu_off).push_back(rs.cpu_us_per_token);
      std::printf("run %d events %-3s %8.1f decode tokens/s, %7.1f us CPU per token\n", r,
                  events ? "on" : "off", rs.tokens_per_s, rs.cpu_us_per_token);
    }
    ratios.push_back(t_on.back() / t_off.back());
  }
  pub->Flush();
  const KvEventStats st = pub->stats();
  const double m_off = Median(t_off), m_on = Median(t_on);
  const double ratio = Median(ratios);
  std::printf(
      "median decode tokens/s: off %.1f, on %.1f; median of the rounds' on/off ratios "
      "%.4f (cost %.2f%%)\n",
      m_off, m_on, ratio, 100.0 * (1.0 - ratio));
  std::printf("median CPU per generated token (all threads): off %.1f us, on %.1f us\n",
              Median(cpu_off), Median(cpu_on));
  std::printf("events: %llu batches, %llu blocks stored, %llu removed; subscriber got %llu\n",
              static_cast<unsigned long long>(st.batches),
              static_cast<unsigned long long>(st.stored_blocks),
              static_cast<unsigned long long>(st.removed_blocks),
              static_cast<unsigned long long>(subscriber ? subscriber->received() : 0));
  subscriber.reset();
  PrintThreadCpu();
  const int64_t steps = (*on)->stats().num_steps;
  const double engine_s = EngineThreadSeconds(o, steps, st.stored_blocks, st.removed_blocks);
  std::printf(
      "engine thread: %.2f us of publisher calls per step (%lld steps), %.3f%% of the "
      "mean step of the \"on\" runs (%.1f us)\n",
      1e6 * engine_s / static_cast<double>(steps), static_cast<long long>(steps),
      100.0 * engine_s / seconds_on, 1e6 * seconds_on / static_cast<double>(steps));
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  kvserve::Options o;
  CLI::App app("kvserve_kv_events_bench: decode speed with the KV event stream off and on");
  app.add_option("--model", o.model, "GGUF model (default: the embedded model)");
  app.add_option("--batch", o.batch, "Requests decoding together");
  app.add_option("--prompt", o.prompt, "Prompt tokens per request");
  app.add_option("--n", o.n, "Tokens generated per request");
  app.add_option("--runs", o.runs, "Rounds (each runs both sides)");
  app.add_option("--threads", o.threads, "Compute threads");
  app.add_option("--block-size", o.block_size, "Tokens per KV block");
  app.add_flag("--no-subscriber", o.no_subscriber, "Publish with nobody listening");
  app.add_option("--only", o.only, "on or off: run one engine only (alternate processes)");
  app.add_flag("--same", o.same,
               "Both engines publish (an A/A run: what the two engines differ by anyway)");
  CLI11_PARSE(app, argc, argv);
  try {
    return kvserve::Run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
