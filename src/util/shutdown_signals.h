// How the long-running commands (kvserve serve, kvserve route) stop: SIGINT or SIGTERM, waited
// for by one thread, asks the service to stop; SIGPIPE is ignored (a client that went away is a
// failed write, not the end of the process).
#pragma once

#include <csignal>
#include <functional>

#include "kvserve/status.h"

namespace kvserve {

// Blocks SIGINT and SIGTERM in this thread, so that every thread started after it inherits the
// mask and only the waiter of RunUntilShutdownSignal receives them; ignores SIGPIPE. Call it
// before starting any thread.
sigset_t BlockShutdownSignals();

// Runs `run` (which blocks until the service stops) while a thread waits for one of `signals`
// and then calls `stop`. When `run` returns first (a listen error), the waiter is woken with a
// signal of our own and joined.
Status RunUntilShutdownSignal(const sigset_t& signals, const std::function<Status()>& run,
                              const std::function<void()>& stop);

}  // namespace kvserve
