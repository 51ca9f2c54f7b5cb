// A process that dies of a fatal signal says so in its log, with a backtrace, before it dies
// of it: the launcher's "worker stopped (signal Segmentation fault)" alone leaves an operator
// (and us) nothing to go on. Async-signal-safe: write(2) and backtrace_symbols_fd only
// (backtrace() is primed at install time so that its lazy loading of libgcc never runs in
// the handler).
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "cli/command.h"

namespace brl::cli {

namespace {
void put(const char* s) { (void)!write(2, s, strlen(s)); }

void on_fatal(int sig) {
  char num[16];
  int n = 0, v = sig;
  char rev[16];
  do rev[n++] = static_cast<char>('0' + v % 10);
  while ((v /= 10) > 0 && n < 15);
  for (int i = 0; i < n; ++i) num[i] = rev[n - 1 - i];
  num[n] = 0;
  put("\nbucketrl: fatal signal ");
  put(num);
  put(" (");
  put(sigdescr_np(sig) ? sigdescr_np(sig) : "?");
  put("); backtrace:\n");
  void* frames[64];
  int k = backtrace(frames, 64);
  backtrace_symbols_fd(frames, k, 2);
  // SA_RESETHAND restored the default action: re-raise so the parent sees the real signal.
  raise(sig);
}
}  // namespace

void install_crash_report() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return;  // the sanitizer's own report is better
#endif
  void* prime[1];
  (void)backtrace(prime, 1);
  static char alt[64 * 1024];  // a stack overflow still gets its report
  stack_t ss{};
  ss.ss_sp = alt;
  ss.ss_size = sizeof alt;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_fatal;
  sa.sa_flags = SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(s, &sa, nullptr);
}

}  // namespace brl::cli
