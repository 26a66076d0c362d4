#include "util/shutdown_signals.h"

#include <pthread.h>

#include <thread>

#include "util/log.h"

namespace kvserve {

sigset_t BlockShutdownSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return signals;
}

Status RunUntilShutdownSignal(const sigset_t& signals, const std::function<Status()>& run,
                              const std::function<void()>& stop) {
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig != 0) KV_LOG(Info, "signal {}: shutting down", sig);
    stop();
  });
  const Status served = run();
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  return served;
}

}  // namespace kvserve
