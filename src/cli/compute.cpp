// Compute set-up shared by the tensor commands: the thread count, and stopping on signals.
#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "cli/command.h"
#include "cli/model_load.h"
#include "model/device.h"
#include "model/loader.h"
#include "model/threads.h"
#include "util/log.h"

namespace brl::cli {

void init_compute(int threads) {
  int n = model::set_compute_threads(threads);
  LOG_DEBUG("compute: {} threads, OpenMP wait policy {}", n, model::omp_wait_policy());
}

model::Model load_model_on(const std::string& dir, const std::string& device, const std::string& dtype) {
  const auto dev = model::resolve_device(device);
  model::LoadOptions lo;
  lo.dtype = model::resolve_dtype(dtype, dev);
  auto m = model::load_model(dir, lo);
  m.to(dev);
  LOG_INFO("model on {} in {}", dev.str(), c10::toString(m.dtype()));
  return m;
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
