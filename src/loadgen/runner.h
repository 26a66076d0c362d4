// Runs a Workload against a server: `concurrency` worker threads, each with its own ApiClient,
// take requests in order from one dispatcher.
//
// NOTE: the dispatcher is the only place where the load shape lives. A request is released
// when (a) it is ready (a multi-turn round once the previous round answered), (b) its arrival
// time has come (arrival times t_k = t_{k-1} + gap_k from the ArrivalProcess, kept even when a
// request goes out late, so the offered rate stays the configured one) and (c) a worker is
// free (at most `concurrency` requests in flight). An infinite rate leaves only (a) and (c):
// fixed concurrency. Send order is recorded (RequestRecord::seq) because the ideal cached
// count depends on it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvserve/status.h"
#include "loadgen/arrival.h"
#include "loadgen/client.h"
#include "loadgen/workload.h"

namespace kvserve::loadgen {

enum class Endpoint { kCompletions, kChat };

struct RunConfig {
  ServerTarget target;
  std::string model;        // sent as "model" when not empty
  Endpoint endpoint = Endpoint::kCompletions;
  int concurrency = 16;
  ArrivalConfig arrival;
  bool ignore_eos = false;  // sends "ignore_eos": true
  double temperature = 0.0;
};

struct Progress {
  int total = 0;
  int finished = 0;  // ok + failed
  int failed = 0;
  int in_flight = 0;
  double elapsed_s = 0;
  int output_tokens = 0;
};

struct RunOutput {
  std::vector<RequestRecord> records;            // by RequestSpec::id
  std::vector<std::vector<Segment>> prompts;     // full prompt segments, by id
  double duration_s = 0;   // first send to last response
};

// The JSON body of one streaming request.
nlohmann::json BuildRequestBody(const RunConfig& config, const std::vector<Segment>& prompt,
                                int max_tokens, bool conversational);

// REQUIRES: config.concurrency >= 1, ValidateArrivalConfig(config.arrival).ok().
// on_progress is called after every finished request, from worker threads, one call at a time.
RunOutput RunWorkload(const Workload& workload, const RunConfig& config,
                      const std::function<void(const Progress&)>& on_progress);

}  // namespace kvserve::loadgen
