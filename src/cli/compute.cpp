// Compute set-up shared by the tensor commands: thread count and a BLAS sanity check.
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>
#include <link.h>

#include <cstring>
#include <string>
#include <thread>

#include "cli/command.h"
#include "util/log.h"

namespace brl::cli {

namespace {
// Which libblas.so.3 did the dynamic loader pick? Debian's alternatives point it at
// OpenBLAS when installed, else at the reference BLAS (40x slower matrix products).
std::string blas_path() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        if (info->dlpi_name && std::strstr(info->dlpi_name, "libblas.so"))
          *static_cast<std::string*>(out) = info->dlpi_name;
        return 0;
      },
      &found);
  return found;
}
}  // namespace

void init_compute(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0) threads = 1;
  at::set_num_threads(threads);
  static bool checked = false;
  if (checked) return;
  checked = true;
  // A symbol only OpenBLAS exports.
  bool openblas = dlsym(RTLD_DEFAULT, "openblas_get_config") != nullptr;
  if (!openblas) {
    LOG_WARN("the BLAS in use is not OpenBLAS ({}): matrix products run ~40x slower. "
             "Install it: apt-get install libopenblas0-pthread",
             blas_path().empty() ? "libblas.so.3" : blas_path());
  }
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
