#include "model/threads.h"

#include <ATen/Parallel.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <thread>

namespace brl::model {

namespace {
constexpr char kPolicy[] = "OMP_WAIT_POLICY=PASSIVE";
constexpr char kMarker[] = "BRL_OMP_DEFAULTED=1";  // tells omp_wait_policy() the value is ours

bool has_var(char** envp, const char* name) {
  size_t n = std::strlen(name);
  for (char** e = envp; e && *e; ++e)
    if (std::strncmp(*e, name, n) == 0 && (*e)[n] == '=') return true;
  return false;
}

// Runs before libgomp's constructor reads the environment (see threads.h), and before libc's
// own constructor has set up getenv/setenv: so it reads envp as given and, when neither
// OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, executes this program again with the policy
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
  env[n++] = const_cast<char*>(kPolicy);
  env[n++] = const_cast<char*>(kMarker);
  env[n] = nullptr;
  execve("/proc/self/exe", argv, env);
}
}  // namespace

// Only an executable's .preinit_array runs; a shared library ignores it. This object is linked
// into every executable that sets threads through set_compute_threads.
__attribute__((section(".preinit_array"), used)) void (*const brl_omp_policy_preinit)(int, char**, char**) = omp_policy_preinit;

int set_compute_threads(int n) {
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  at::set_num_threads(n);
  return n;
}

const char* omp_wait_policy() {
  const char* p = std::getenv("OMP_WAIT_POLICY");
  if (p && std::getenv("BRL_OMP_DEFAULTED")) return "PASSIVE (default)";
  return p ? p : std::getenv("GOMP_SPINCOUNT") ? "GOMP_SPINCOUNT from the environment" : "libgomp's default (not set)";
}

}  // namespace brl::model
