// RedisTestServer: a real redis-server for tests, on a free loopback port, in a temporary
// directory, with no persistence. Start() launches it and waits until it answers PING; Kill()
// and Stop() end it (SIGKILL / SIGTERM), Restart() starts it again on the same port; the
// destructor stops it and removes the directory, so no server outlives the test.
#pragma once

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

namespace kvserve::testing_util {

class RedisTestServer {
 public:
  RedisTestServer() {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvserve-redis-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::create_directories(dir_);
    port_ = FreePort();
  }
  ~RedisTestServer() {
    Stop();
    std::filesystem::remove_all(dir_);
  }
  RedisTestServer(const RedisTestServer&) = delete;
  RedisTestServer& operator=(const RedisTestServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  // Launches redis-server and waits (up to ~10 s) for PING. False with a test failure otherwise.
  bool Start() {
    const std::string bin = Binary();
    if (bin.empty()) {
      ADD_FAILURE() << "redis-server not found; scripts/setup.sh installs it (Debian redis-server)";
      return false;
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string port = std::to_string(port_);
      const std::string log = (dir_ / "redis.log").string();
      std::freopen(log.c_str(), "a", stdout);
      std::freopen(log.c_str(), "a", stderr);
      ::execl(bin.c_str(), bin.c_str(), "--port", port.c_str(), "--bind", "127.0.0.1", "--save",
              "", "--appendonly", "no", "--daemonize", "no", "--dir", dir_.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 400; ++i) {
      if (Ping()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ADD_FAILURE() << "redis-server on port " << port_ << " did not answer PING";
    Kill();
    return false;
  }
  void Stop() { End(SIGTERM); }
  void Kill() { End(SIGKILL); }
  bool Restart() {
    Stop();
    return Start();
  }

  // A raw command on a fresh connection (for tests that poke at the data); nullptr on failure.
  redisReply* Command(const char* format, ...) {
    redisContext* c = redisConnect("127.0.0.1", port_);
    if (c == nullptr || c->err) {
      if (c) redisFree(c);
      return nullptr;
    }
    va_list ap;
    va_start(ap, format);
    void* r = redisvCommand(c, format, ap);
    va_end(ap);
    redisFree(c);
    return static_cast<redisReply*>(r);
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  static std::string Binary() {
    for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"}) {
      if (::access(p, X_OK) == 0) return p;
    }
    return {};
  }
  static int FreePort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
  }
  bool Ping() {
    redisReply* r = Command("PING");
    const bool ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    return ok;
  }
  void End(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  std::filesystem::path dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvserve::testing_util
