#include "loadgen/runner.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "util/check.h"

namespace kvserve::loadgen {

using nlohmann::json;

json BuildRequestBody(const RunConfig& config, const std::vector<Segment>& prompt, int max_tokens,
                      bool conversational) {
  json body;
  if (!config.model.empty()) body["model"] = config.model;
  if (config.endpoint == Endpoint::kChat) {
    json messages = json::array();
    for (const ChatMessage& m : RenderChatMessages(prompt)) {
      messages.push_back({{"role", RoleName(m.role)}, {"content", m.content}});
    }
    body["messages"] = std::move(messages);
  } else {
    body["prompt"] = RenderCompletionPrompt(prompt, conversational);
  }
  body["max_tokens"] = max_tokens;
  body["temperature"] = config.temperature;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (config.ignore_eos) body["ignore_eos"] = true;
  return body;
}

namespace {

// Hands out requests in order, under the load shape (see runner.h).
class Dispatcher {
 public:
  Dispatcher(const Workload& w, const RunConfig& c, Clock::time_point t0)
      : workload_(w), arrivals_(c.arrival), t0_(t0), next_arrival_(t0) {
    const size_t n = w.requests.size();
    prompts_.resize(n);
    records_.resize(n);
    children_.resize(n);
    for (const RequestSpec& r : w.requests) {
      records_[static_cast<size_t>(r.id)].id = r.id;
      if (r.prev_id >= 0) {
        children_[static_cast<size_t>(r.prev_id)].push_back(r.id);
      } else {
        prompts_[static_cast<size_t>(r.id)] = r.segments;
        ready_.push_back(r.id);
      }
    }
    progress_.total = static_cast<int>(n);
  }

  struct Job {
    int id;
    Clock::time_point send_at;
  };

  // The next request and when to send it; nullopt when none is left.
  std::optional<Job> Next() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty() || released_ + skipped_ == Total(); });
    if (ready_.empty()) return std::nullopt;
    const int id = ready_.front();
    ready_.pop_front();
    RequestRecord& r = records_[static_cast<size_t>(id)];
    r.seq = seq_++;
    ++released_;
    ++progress_.in_flight;
    const Clock::time_point send_at = std::max(Clock::now(), next_arrival_);
    next_arrival_ += std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(arrivals_.NextGapSeconds()));
    return Job{id, send_at};
  }

  const std::vector<Segment>& Prompt(int id) {
    std::lock_guard lock(mu_);
    return prompts_[static_cast<size_t>(id)];
  }

  void Finish(int id, RequestRecord record,
              const std::function<void(const Progress&)>& on_progress) {
    Progress snapshot;
    {
      std::lock_guard lock(mu_);
      RequestRecord& r = records_[static_cast<size_t>(id)];
      record.id = r.id;
      record.seq = r.seq;
      r = std::move(record);
      --progress_.in_flight;
      ++progress_.finished;
      if (!r.ok) ++progress_.failed;
      if (r.ok) progress_.output_tokens += std::max(0, r.completion_tokens);
      for (int child : children_[static_cast<size_t>(id)]) {
        if (r.ok) {
          const RequestSpec& spec = workload_.requests[static_cast<size_t>(child)];
          prompts_[static_cast<size_t>(child)] =
              WithHistory(prompts_[static_cast<size_t>(id)], r.text, r.completion_tokens, spec);
          ready_.push_back(child);
        } else {
          SkipChain(child);
        }
      }
      progress_.elapsed_s = std::chrono::duration<double>(Clock::now() - t0_).count();
      snapshot = progress_;
    }
    cv_.notify_all();
    if (on_progress) {
      std::lock_guard lock(progress_mu_);
      on_progress(snapshot);
    }
  }

  RunOutput Take() {
    std::lock_guard lock(mu_);
    RunOutput out;
    out.records = std::move(records_);
    out.prompts = std::move(prompts_);
    return out;
  }

 private:
  int Total() const { return static_cast<int>(records_.size()); }

  // A round whose earlier round failed is never sent; nor are the rounds after it.
  void SkipChain(int id) {
    RequestRecord& r = records_[static_cast<size_t>(id)];
    r.sent = false;
    r.ok = false;
    r.error = "not sent: an earlier round of the conversation failed";
    ++skipped_;
    ++progress_.finished;
    ++progress_.failed;
    for (int child : children_[static_cast<size_t>(id)]) SkipChain(child);
  }

  const Workload& workload_;
  ArrivalProcess arrivals_;
  Clock::time_point t0_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::mutex progress_mu_;
  std::deque<int> ready_;
  std::vector<std::vector<Segment>> prompts_;
  std::vector<RequestRecord> records_;
  std::vector<std::vector<int>> children_;
  Clock::time_point next_arrival_;
  int seq_ = 0;
  int released_ = 0;
  int skipped_ = 0;
  Progress progress_;
};

}  // namespace

RunOutput RunWorkload(const Workload& workload, const RunConfig& config,
                      const std::function<void(const Progress&)>& on_progress) {
  KV_CHECK_GE(config.concurrency, 1);
  const Clock::time_point t0 = Clock::now();
  Dispatcher dispatcher(workload, config, t0);
  const std::string path =
      config.endpoint == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions";
  const int num_workers =
      std::min(config.concurrency, std::max(1, static_cast<int>(workload.requests.size())));
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(num_workers));
  for (int w = 0; w < num_workers; ++w) {
    workers.emplace_back([&] {
      ApiClient client(config.target);
      while (std::optional<Dispatcher::Job> job = dispatcher.Next()) {
        std::this_thread::sleep_until(job->send_at);
        const RequestSpec& spec = workload.requests[static_cast<size_t>(job->id)];
        const json body = BuildRequestBody(config, dispatcher.Prompt(job->id), spec.max_tokens,
                                           workload.conversational);
        RequestRecord record;
        client.StreamRequest(path, body, t0, record);
        dispatcher.Finish(job->id, std::move(record), on_progress);
      }
    });
  }
  for (std::thread& t : workers) t.join();
  RunOutput out = dispatcher.Take();
  double first = -1, last = 0;
  for (const RequestRecord& r : out.records) {
    if (!r.sent) continue;
    if (first < 0 || r.sent_s < first) first = r.sent_s;
    last = std::max(last, r.done_s);
  }
  out.duration_s = first < 0 ? 0 : last - first;
  return out;
}

}  // namespace kvserve::loadgen
