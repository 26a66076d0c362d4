// Engine: the serving engine. One step-loop thread owns an EngineCore (model, KV cache, prefix
// cache, scheduler); any thread may add requests, cancel them and read their output streams.
//
// Contract: AddRequest validates what it can at once (a malformed or too long request is an
// error result, nothing is queued) and returns the request's RequestStream; the step thread
// admits it at the start of its next step. Cancel takes effect at the start of the next step:
// the request leaves, releases every block, and its stream ends with a "cancelled" event.
// Destroying the Engine cancels every request still live and joins the thread.
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine_core.h"

namespace kvserve {

// The output events of one request, in order. Thread-safe.
class RequestStream {
 public:
  explicit RequestStream(RequestId id) : id_(id) {}
  RequestId id() const { return id_; }
  // Blocks for the next event; false once the request's last event has been read.
  bool Next(RequestOutput* out);
  std::optional<RequestOutput> TryNext();
  enum class Wait { kEvent, kTimeout, kEnded };
  // Waits up to `timeout` for the next event: kEvent (*out set), kTimeout, or kEnded once the
  // request's last event has been read.
  Wait NextFor(RequestOutput* out, std::chrono::milliseconds timeout);
  // Called by the engine thread.
  void Push(RequestOutput event);

 private:
  const RequestId id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> events_;
  bool ended_ = false;  // the request_finished event was pushed
};

class Engine {
 public:
  // See EngineCore::Create. Starts the step thread.
  static Result<std::unique_ptr<Engine>> Create(std::unique_ptr<Model> model,
                                                const EngineConfig& config,
                                                const Tokenizer* tokenizer = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Result<std::shared_ptr<RequestStream>> AddRequest(EngineRequest request);
  void Cancel(RequestId id);
  // Runs fn on the step thread before its next step and waits for it to return (retention's
  // explicit caches: holds that no request carries). Returns at once once the engine stops.
  void RunOnStepThread(const std::function<void(EngineCore&)>& fn);
  // A snapshot taken after the latest step.
  EngineStats stats() const;
  const EngineConfig& config() const { return core_->config(); }
  // One line per configured lower KV tier (EngineCore::TierDescriptions).
  std::vector<std::string> TierDescriptions() const { return core_->TierDescriptions(); }

 private:
  struct Pending {
    RequestId id;
    EngineRequest request;
    EngineCore::Clock::time_point arrival;
    std::shared_ptr<RequestStream> stream;
  };
  explicit Engine(std::unique_ptr<EngineCore> core);
  void Loop();
  void TakeInbox(std::vector<Pending>* adds, std::vector<RequestId>* cancels,
                 std::vector<std::function<void(EngineCore&)>>* tasks);
  void Route(std::vector<RequestOutput>* events);

  std::unique_ptr<EngineCore> core_;
  std::atomic<int64_t> next_id_{1};
  mutable std::mutex mu_;  // guards the inbox, stop_ and stats_
  std::condition_variable cv_;
  std::vector<Pending> adds_;
  std::vector<RequestId> cancels_;
  std::vector<std::function<void(EngineCore&)>> tasks_;
  bool stop_ = false;
  EngineStats stats_;
  // Engine thread only:
  std::unordered_map<RequestId, std::shared_ptr<RequestStream>> streams_;
  std::thread thread_;
};

}  // namespace kvserve
