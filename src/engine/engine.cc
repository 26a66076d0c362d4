#include "engine/engine.h"

#include <future>

#include "util/check.h"
#include "util/log.h"

namespace kvserve {

bool RequestStream::Next(RequestOutput* out) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !events_.empty() || ended_; });
  if (events_.empty()) return false;
  *out = std::move(events_.front());
  events_.pop_front();
  return true;
}

RequestStream::Wait RequestStream::NextFor(RequestOutput* out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty() || ended_; })) {
    return Wait::kTimeout;
  }
  if (events_.empty()) return Wait::kEnded;
  *out = std::move(events_.front());
  events_.pop_front();
  return Wait::kEvent;
}

std::optional<RequestOutput> RequestStream::TryNext() {
  std::lock_guard lock(mu_);
  if (events_.empty()) return std::nullopt;
  RequestOutput e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void RequestStream::Push(RequestOutput event) {
  {
    std::lock_guard lock(mu_);
    if (event.request_finished) ended_ = true;
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

Engine::Engine(std::unique_ptr<EngineCore> core) : core_(std::move(core)) {
  stats_ = core_->stats();
  core_->SetTierLoadCallback([this] {
    { std::lock_guard lock(mu_); }  // a waiter checks HasWork() under mu_: no lost wake-up
    cv_.notify_all();
  });
  thread_ = std::thread([this] { Loop(); });
}

Result<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<Model> model,
                                               const EngineConfig& config,
                                               const Tokenizer* tokenizer) {
  KV_ASSIGN_OR_RETURN(auto core, EngineCore::Create(std::move(model), config, tokenizer));
  return std::unique_ptr<Engine>(new Engine(std::move(core)));
}

Engine::~Engine() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  core_->SetTierLoadCallback(nullptr);  // mu_ and cv_ die before core_
}

Result<std::shared_ptr<RequestStream>> Engine::AddRequest(EngineRequest request) {
  KV_RETURN_IF_ERROR(core_->Validate(request));  // reads fixed settings only
  const RequestId id(next_id_.fetch_add(1));
  auto stream = std::make_shared<RequestStream>(id);
  {
    std::lock_guard lock(mu_);
    adds_.push_back(Pending{id, std::move(request), EngineCore::Clock::now(), stream});
  }
  cv_.notify_all();
  return stream;
}

void Engine::Cancel(RequestId id) {
  {
    std::lock_guard lock(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

EngineStats Engine::stats() const {
  EngineStats st;
  {
    std::lock_guard lock(mu_);
    st = stats_;
  }
  // The snapshot is as of the last step; the tier writer and reader go on after it (a
  // write-through lands while the step thread sleeps), so their counters are read now.
  st.tiers = core_->TierStatsNow();
  return st;
}

void Engine::Route(std::vector<RequestOutput>* events) {
  for (RequestOutput& e : *events) {
    auto it = streams_.find(e.id);
    if (it == streams_.end()) continue;
    const bool last = e.request_finished;
    it->second->Push(std::move(e));
    if (last) streams_.erase(it);
  }
  events->clear();
}

void Engine::TakeInbox(std::vector<Pending>* adds, std::vector<RequestId>* cancels,
                       std::vector<std::function<void(EngineCore&)>>* tasks) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] {
    return stop_ || !adds_.empty() || !cancels_.empty() || !tasks_.empty() || core_->HasWork();
  });
  adds->swap(adds_);
  cancels->swap(cancels_);
  tasks->swap(tasks_);
}

void Engine::RunOnStepThread(const std::function<void(EngineCore&)>& fn) {
  std::promise<void> done;
  std::future<void> finished = done.get_future();
  {
    std::lock_guard lock(mu_);
    if (stop_) return;  // the step thread may be gone
    tasks_.push_back([this, &fn, &done](EngineCore& core) {
      fn(core);
      {
        std::lock_guard stats_lock(mu_);
        stats_ = core.stats();  // the caller sees the task's effect in stats()
      }
      done.set_value();
    });
  }
  cv_.notify_one();
  finished.wait();
}

// NOTE: everything mutable in the core is touched only here, on the step thread; other threads
// meet it only through the inbox (under mu_) and the streams (their own locks).
void Engine::Loop() {
  std::vector<Pending> adds;
  std::vector<RequestId> cancels;
  std::vector<RequestOutput> events;
  std::vector<std::function<void(EngineCore&)>> tasks;
  for (;;) {
    adds.clear();
    cancels.clear();
    tasks.clear();
    TakeInbox(&adds, &cancels, &tasks);
    for (const auto& task : tasks) task(*core_);
    bool stopping;
    {
      std::lock_guard lock(mu_);
      stopping = stop_;
    }
    for (Pending& p : adds) {
      Status st = stopping ? Status(StatusCode::kFailedPrecondition, "the engine is shutting down")
                           : core_->Add(p.id, std::move(p.request), p.arrival);
      if (st.ok()) {
        streams_.emplace(p.id, p.stream);
        continue;
      }
      RequestOutput e;
      e.id = p.id;
      e.finished = e.request_finished = true;
      e.finish_reason = FinishReason::kError;
      e.error = std::move(st);
      p.stream->Push(std::move(e));
    }
    for (RequestId id : cancels) core_->Cancel(id, &events);
    if (stopping) {
      std::vector<RequestId> live;
      for (const auto& [id, s] : streams_) live.push_back(id);
      for (RequestId id : live) core_->Cancel(id, &events);
      core_->FlushKvEvents();
      Route(&events);
      return;
    }
    if (core_->HasWork()) {
      Status st = core_->Step(&events);
      if (!st.ok()) KV_LOG(Error, "engine step failed: {}", st.ToString());
    }
    core_->FlushKvEvents();  // what tasks and cancels did outside the step
    {
      std::lock_guard lock(mu_);
      stats_ = core_->stats();  // before routing: a reader of a final event sees its effect
    }
    Route(&events);
  }
}

}  // namespace kvserve
