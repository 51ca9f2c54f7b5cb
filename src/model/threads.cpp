#include "model/threads.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>

namespace brl::model {

namespace {
// The marker tells omp_wait_policy() the value is ours, not the user's.
constexpr char kPassive[] = "OMP_WAIT_POLICY=PASSIVE";
constexpr char kPassiveMarker[] = "BRL_OMP_DEFAULTED=passive";
constexpr char kSpin[] = "GOMP_SPINCOUNT=10000";
constexpr char kSpinMarker[] = "BRL_OMP_DEFAULTED=spin";

bool has_var(char** envp, const char* name) {
  size_t n = std::strlen(name);
  for (char** e = envp; e && *e; ++e)
    if (std::strncmp(*e, name, n) == 0 && (*e)[n] == '=') return true;
  return false;
}

// Is anything else runnable right now? /proc/loadavg's fourth field, "running/total", counts
// the tasks on a CPU or waiting for one at this instant, this process included.
bool others_running() {
  int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;  // unknown: the safe policy
  char buf[128];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return true;
  buf[n] = 0;
  const char* p = buf;
  for (int field = 0; field < 3 && p; ++field) p = std::strchr(p + 1, ' ');
  return !p || std::atoi(p + 1) > 1;
}

// Runs before libgomp's constructor reads the environment (see threads.h), and before libc's
// own constructor has set up getenv/setenv: so it reads envp as given and, when neither
// OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, executes this program again with a policy
// added. Only the mapping of the libraries is paid twice, not their constructors (libtorch's
// operator registration). Where the exec fails (no /proc), the program runs on unchanged.
void omp_policy_preinit(int, char** argv, char** envp) {
  if (has_var(envp, "OMP_WAIT_POLICY") || has_var(envp, "GOMP_SPINCOUNT")) return;
  static char* env[4096];
  size_t n = 0;
  for (char** e = envp; e && *e; ++e) {
    if (n + 3 >= std::size(env)) return;
    env[n++] = *e;
  }
  bool busy = others_running();
  env[n++] = const_cast<char*>(busy ? kPassive : kSpin);
  env[n++] = const_cast<char*>(busy ? kPassiveMarker : kSpinMarker);
  env[n] = nullptr;
  execve("/proc/self/exe", argv, env);
}
}  // namespace

// Only an executable's .preinit_array runs; a shared library ignores it. This object is linked
// into every executable that sets threads through set_compute_threads.
__attribute__((section(".preinit_array"), used)) void (*const brl_omp_policy_preinit)(int, char**,
                                                                                      char**) = omp_policy_preinit;

int set_compute_threads(int n) {
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  at::set_num_threads(n);
  // The mode is per thread: set here and in each thread of the pool (libgomp reuses a team's
  // threads for the next region from this thread); threads made later copy it from this one.
  const char* keep = std::getenv("BRL_KEEP_DENORMALS");
  const bool flush = !(keep && std::strcmp(keep, "1") == 0);
#pragma omp parallel num_threads(n)
  at::globalContext().setFlushDenormal(flush);
  return n;
}

const char* omp_wait_policy() {
  const char* ours = std::getenv("BRL_OMP_DEFAULTED");
  if (ours && std::strcmp(ours, "passive") == 0) return "PASSIVE (default: other tasks were running at start)";
  if (ours && std::strcmp(ours, "spin") == 0) {
    static const std::string s = std::string(kSpin) + " (default: the machine was idle at start)";
    return s.c_str();
  }
  if (const char* p = std::getenv("OMP_WAIT_POLICY")) return p;
  return std::getenv("GOMP_SPINCOUNT") ? "GOMP_SPINCOUNT from the environment" : "libgomp's default (not set)";
}

const char* malloc_in_use() {
  // tc_version: one of gperftools' own entry points, there whether linked or preloaded.
  return dlsym(RTLD_DEFAULT, "tc_version") ? "tcmalloc" : "glibc";
}

}  // namespace brl::model
