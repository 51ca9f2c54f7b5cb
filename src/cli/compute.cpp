// Compute set-up shared by the tensor commands: the thread count, and stopping on signals.
#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "cli/command.h"
#include "model/threads.h"
#include "util/log.h"

namespace brl::cli {

void init_compute(int threads) {
  int n = model::set_compute_threads(threads);
  LOG_DEBUG("compute: {} threads, OpenMP wait policy {}, malloc {}", n, model::omp_wait_policy(),
            model::malloc_in_use());
}

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) {
  if (g_stop.exchange(true)) _exit(130);
}
}  // namespace

const std::atomic<bool>& stop_on_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return g_stop;
}

}  // namespace brl::cli
