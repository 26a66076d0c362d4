#include "prefix/redis_tier.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

#include <fmt/format.h>

#include "util/byte_size.h"
#include "util/log.h"

namespace kvserve {
namespace {

constexpr std::chrono::milliseconds kFirstBackoff{100};
constexpr std::chrono::milliseconds kMaxBackoff{5000};
constexpr size_t kBatch = 32;      // GETs per pipelined round trip
constexpr size_t kMaxPooled = 4;   // idle connections kept

struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

timeval ToTimeval(int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

bool IsTimeout(const redisContext* c) {
  if (c->err != REDIS_ERR_IO) return false;
  const std::string_view why = c->errstr;
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT ||
         why.find("temporarily unavailable") != std::string_view::npos ||
         why.find("timed out") != std::string_view::npos;
}

bool ParseInt(std::string_view s, int* out) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

Result<RedisTierConfig> ParseRedisUrl(std::string_view url) {
  const auto bad = [&](std::string_view why) {
    return InvalidArgument(fmt::format("bad Redis URL '{}' ({}): use redis://HOST:PORT[/DB]",
                                       url, why));
  };
  constexpr std::string_view kScheme = "redis://";
  if (url.substr(0, kScheme.size()) != kScheme) return bad("it must start with redis://");
  std::string_view rest = url.substr(kScheme.size());
  RedisTierConfig c;
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && (!ParseInt(db, &c.db) || c.db < 0)) return bad("the database is not a number");
    rest = rest.substr(0, slash);
  }
  std::string_view host = rest, port;
  if (!rest.empty() && rest.front() == '[') {  // [IPv6]:port
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("unclosed [");
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return bad("expected : after ]");
      port = rest.substr(close + 2);
    }
  } else if (const size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty()) return bad("no host");
  c.host = std::string(host);
  if (!port.empty() && (!ParseInt(port, &c.port) || c.port <= 0 || c.port > 65535)) {
    return bad("the port is not in 1..65535");
  }
  return c;
}

RedisTier::RedisTier(const RedisTierConfig& config) : config_(config) {}

RedisTier::~RedisTier() {
  for (redisContext* c : pool_) redisFree(c);
}

Result<std::unique_ptr<RedisTier>> RedisTier::Open(const RedisTierConfig& config_in) {
  RedisTierConfig config = config_in;
  if (!config.now) config.now = [] { return Clock::now(); };
  if (config.timeout_ms < 1) return InvalidArgument("the Redis timeout must be at least 1 ms");
  if (config.ttl_seconds < 0) return InvalidArgument("the Redis TTL must be >= 0");
  std::unique_ptr<RedisTier> tier(new RedisTier(config));
  if (redisContext* c = tier->Take()) {  // connect once now, so Describe can say what it holds
    tier->RefreshSizes(c);
    tier->Give(c);
  }
  return tier;
}

std::string RedisTier::KeyOf(const BlockKey& key) { return "kvserve:blk:" + key.Hex(); }

bool RedisTier::in_backoff() {
  std::lock_guard lock(mu_);
  return backoff_.count() > 0 && config_.now() < down_until_;
}

redisContext* RedisTier::Take() {
  {
    std::lock_guard lock(mu_);
    if (backoff_.count() > 0 && config_.now() < down_until_) return nullptr;
    if (!pool_.empty()) {
      redisContext* c = pool_.back();
      pool_.pop_back();
      return c;
    }
  }
  redisContext* c =
      redisConnectWithTimeout(config_.host.c_str(), config_.port, ToTimeval(config_.timeout_ms));
  if (c == nullptr || c->err) {
    Failed(c);
    return nullptr;
  }
  redisSetTimeout(c, ToTimeval(config_.timeout_ms));
  // Keep the reader's buffer between replies: by default hiredis frees it whenever it empties,
  // and a fresh multi-hundred-KB buffer per block costs page faults.
  c->reader->maxbuf = 0;
  if (config_.db != 0) {
    Reply r(static_cast<redisReply*>(redisCommand(c, "SELECT %d", config_.db)));
    if (!r || r->type == REDIS_REPLY_ERROR) {
      Failed(c);
      return nullptr;
    }
  }
  return c;
}

void RedisTier::Give(redisContext* c) {
  if (c->err) {  // a command on it failed after all (e.g. the size refresh timed out)
    Failed(c);
    return;
  }
  Succeeded();
  std::lock_guard lock(mu_);
  if (pool_.size() < kMaxPooled) {
    pool_.push_back(c);
  } else {
    redisFree(c);
  }
}

void RedisTier::Failed(redisContext* c) {
  const bool timeout = c != nullptr && IsTimeout(c);
  const std::string why = c == nullptr ? "cannot allocate a connection" : c->errstr;
  if (c) redisFree(c);
  counters_.Error(timeout ? TierError::kTimeout : TierError::kConnection);
  std::lock_guard lock(mu_);
  backoff_ = backoff_.count() == 0 ? kFirstBackoff : std::min(kMaxBackoff, backoff_ * 2);
  down_until_ = config_.now() + backoff_;
  last_error_ = why;
  for (redisContext* p : pool_) redisFree(p);  // their server is likely gone too
  pool_.clear();
  if (!down_logged_) {
    down_logged_ = true;
    KV_LOG(Warning, "kv redis tier {}:{}: {}; bypassed with back-off until it answers",
           config_.host, config_.port, why);
  }
}

void RedisTier::Succeeded() {
  std::lock_guard lock(mu_);
  if (backoff_.count() == 0) return;
  backoff_ = std::chrono::milliseconds(0);
  if (down_logged_) {
    down_logged_ = false;
    KV_LOG(Info, "kv redis tier {}:{}: answering again", config_.host, config_.port);
  }
}

bool RedisTier::MayContain(const BlockKey&) { return !in_backoff(); }

// NOTE (a run): GETs go out in pipelined batches of kBatch (one round trip each); every reply of
// a batch is read, even after a miss, so the connection stays in step. The next batch is sent
// only when the whole batch hit.
int RedisTier::GetRun(std::span<const BlockKey> keys, std::vector<std::vector<uint8_t>>* values) {
  if (values->size() < keys.size()) values->resize(keys.size());
  redisContext* c = Take();
  if (c == nullptr) return 0;
  int got = 0;
  for (size_t start = 0; start < keys.size(); start += kBatch) {
    const size_t n = std::min(kBatch, keys.size() - start);
    std::vector<std::string> names(n);
    for (size_t i = 0; i < n; ++i) {
      names[i] = KeyOf(keys[start + i]);
      const char* argv[2] = {"GET", names[i].c_str()};
      const size_t len[2] = {3, names[i].size()};
      redisAppendCommandArgv(c, 2, argv, len);
    }
    bool run = true;
    for (size_t i = 0; i < n; ++i) {
      void* raw = nullptr;
      if (redisGetReply(c, &raw) != REDIS_OK) {
        Failed(c);
        return got;
      }
      Reply r(static_cast<redisReply*>(raw));
      if (!run) continue;
      if (r->type != REDIS_REPLY_STRING) {
        run = false;
        continue;
      }
      std::vector<uint8_t>& v = (*values)[static_cast<size_t>(got)];
      v.assign(reinterpret_cast<const uint8_t*>(r->str),
               reinterpret_cast<const uint8_t*>(r->str) + r->len);
      counters_.blocks_read.fetch_add(1);
      counters_.bytes_read.fetch_add(static_cast<int64_t>(r->len));
      ++got;
    }
    if (!run) break;
  }
  RefreshSizes(c);
  Give(c);
  return got;
}

Status RedisTier::Put(const BlockKey& key, std::span<const uint8_t> value) {
  redisContext* c = Take();
  if (c == nullptr) {
    counters_.dropped_writes.fetch_add(1);
    return IoError("the Redis tier is in back-off");
  }
  const std::string name = KeyOf(key);
  const std::string ttl = std::to_string(config_.ttl_seconds);
  const char* argv[5] = {"SET", name.c_str(), reinterpret_cast<const char*>(value.data()), "EX",
                         ttl.c_str()};
  const size_t len[5] = {3, name.size(), value.size(), 2, ttl.size()};
  Reply r(static_cast<redisReply*>(
      redisCommandArgv(c, config_.ttl_seconds > 0 ? 5 : 3, argv, len)));
  if (!r) {
    Failed(c);
    counters_.dropped_writes.fetch_add(1);
    return IoError("the Redis tier did not answer a write");
  }
  if (r->type == REDIS_REPLY_ERROR) {  // e.g. OOM at maxmemory without an eviction policy
    const std::string why(r->str, r->len);
    counters_.dropped_writes.fetch_add(1);
    Give(c);
    return IoError("Redis refused a write: " + why);
  }
  counters_.blocks_written.fetch_add(1);
  counters_.bytes_written.fetch_add(static_cast<int64_t>(value.size()));
  RefreshSizes(c);
  Give(c);
  NotifyStored(key);
  return Status::Ok();
}

void RedisTier::Remove(const BlockKey& key) {
  redisContext* c = Take();
  if (c == nullptr) {
    NotifyRemoved(key);
    return;
  }
  const std::string name = KeyOf(key);
  const char* argv[2] = {"DEL", name.c_str()};
  const size_t len[2] = {3, name.size()};
  Reply r(static_cast<redisReply*>(redisCommandArgv(c, 2, argv, len)));
  if (!r) {
    Failed(c);
  } else {
    Give(c);
  }
  NotifyRemoved(key);  // a record that failed verification is gone for this replica either way
}

void RedisTier::RefreshSizes(redisContext* c) {
  {
    std::lock_guard lock(mu_);
    const Clock::time_point now = config_.now();
    if (sizes_at_ != Clock::time_point{} && now - sizes_at_ < std::chrono::seconds(2)) return;
    sizes_at_ = now;
  }
  Reply n(static_cast<redisReply*>(redisCommand(c, "DBSIZE")));
  if (n && n->type == REDIS_REPLY_INTEGER) counters_.entries.store(n->integer);
  Reply info(static_cast<redisReply*>(redisCommand(c, "INFO memory")));
  if (info && info->type == REDIS_REPLY_STRING) {
    const std::string_view text(info->str, info->len);
    constexpr std::string_view kField = "used_memory:";
    if (const size_t at = text.find(kField); at != std::string_view::npos) {
      int64_t bytes = 0;
      const char* begin = text.data() + at + kField.size();
      std::from_chars(begin, text.data() + text.size(), bytes);
      counters_.bytes_held.store(bytes);
    }
  }
}

std::string RedisTier::Describe() {
  if (redisContext* c = Take()) {
    {
      std::lock_guard lock(mu_);
      sizes_at_ = {};
    }
    RefreshSizes(c);
    Give(c);
  }
  const std::string where = fmt::format("redis tier {}:{}/{}", config_.host, config_.port,
                                        config_.db);
  std::lock_guard lock(mu_);
  if (backoff_.count() > 0) {
    return fmt::format("{}: unreachable ({}); retrying with back-off", where, last_error_);
  }
  const int64_t bytes = counters_.bytes_held.load();
  return fmt::format("{}: {} keys, {} used, {}", where, counters_.entries.load(),
                     FormatByteSize(static_cast<uint64_t>(std::max<int64_t>(bytes, 0))),
                     config_.ttl_seconds > 0 ? fmt::format("ttl {} s", config_.ttl_seconds)
                                             : std::string("no ttl"));
}

}  // namespace kvserve
