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
// Prints each run, the medians, the on/off ratio and the events published.
//
//   kvserve_kv_events_bench [--model M.gguf] [--batch 4] [--prompt 96] [--n 256] [--runs 7]
//       [--threads 1] [--block-size 16] [--no-subscriber]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
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

double DecodeTokensPerSecond(EngineCore& core, const std::vector<EngineRequest>& reqs,
                             int64_t* next_id) {
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
  const Clock::time_point t0 = *std::min_element(first.begin(), first.end());
  const Clock::time_point t1 = *std::max_element(last.begin(), last.end());
  size_t tokens = 0;
  for (size_t c : count) tokens += c > 0 ? c - 1 : 0;
  return static_cast<double>(tokens) /
         std::max(std::chrono::duration<double>(t1 - t0).count(), 1e-9);
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
  auto off = EngineCore::Create(LoadModel(o.model, 512), c);
  if (!off.ok()) throw std::runtime_error(off.status().ToString());
  auto on = EngineCore::Create(LoadModel(o.model, 512), con);
  if (!on.ok()) throw std::runtime_error(on.status().ToString());
  KvEventPublisher* pub = (*on)->kv_event_publisher();

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> received{0};
  zmq::context_t ctx{1};
  std::thread subscriber;
  if (!o.no_subscriber) {
    subscriber = std::thread([&] {
      zmq::socket_t sub(ctx, zmq::socket_type::sub);
      sub.set(zmq::sockopt::subscribe, "");
      sub.set(zmq::sockopt::rcvtimeo, 100);
      sub.connect(pub->endpoint());
      while (!stop.load()) {
        zmq::message_t m;
        if (sub.recv(m) && !m.more()) received.fetch_add(1);
      }
    });
  }

  const int vocab = (*on)->model().config().vocab;
  std::printf(
      "model %s, batch %d, prompt %d, %d generated, %d threads, block size %d, "
      "%d blocks, subscriber %s\n",
      o.model.empty() ? "embedded" : o.model.c_str(), o.batch, o.prompt, o.n, o.threads,
      o.block_size, c.num_blocks, o.no_subscriber ? "none" : "in process");
  std::vector<double> t_off, t_on;
  int64_t next_id = 1;
  for (int r = 0; r < o.runs; ++r) {
    // Alternate which side goes first, so drift in the machine's speed hits both alike.
    const auto reqs = Requests(o, r, vocab);
    for (int side = 0; side < 2; ++side) {
      const bool events = (side + r) % 2 == 1;
      const double tps = DecodeTokensPerSecond(events ? **on : **off, reqs, &next_id);
      (events ? t_on : t_off).push_back(tps);
      std::printf("run %d events %-3s %8.1f decode tokens/s\n", r, events ? "on" : "off", tps);
    }
  }
  pub->Flush();
  const KvEventStats st = pub->stats();
  const double m_off = Median(t_off), m_on = Median(t_on);
  std::printf("median decode tokens/s: off %.1f, on %.1f, on/off %.4f (cost %.2f%%)\n", m_off, m_on,
              m_on / m_off, 100.0 * (1.0 - m_on / m_off));
  std::printf("events: %llu batches, %llu blocks stored, %llu removed; subscriber got %llu\n",
              static_cast<unsigned long long>(st.batches),
              static_cast<unsigned long long>(st.stored_blocks),
              static_cast<unsigned long long>(st.removed_blocks),
              static_cast<unsigned long long>(received.load()));
  stop = true;
  if (subscriber.joinable()) subscriber.join();
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
  CLI11_PARSE(app, argc, argv);
  try {
    return kvserve::Run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
