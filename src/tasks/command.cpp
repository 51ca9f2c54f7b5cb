#include "tasks/command.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <thread>

#include "util/error.h"

extern char** environ;

namespace brl::tasks {

std::string run_filter(const std::string& command, const std::string& input, const std::string& what,
                       const std::string& fix) {
  // Close-on-exec, so that a command started meanwhile by another thread does not hold them open.
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0) throw UserError(what + ": pipe failed: " + std::strerror(errno));
  if (pipe2(from_child, O_CLOEXEC) != 0) {
    close(to_child[0]), close(to_child[1]);
    throw UserError(what + ": pipe failed: " + std::strerror(errno));
  }
  // posix_spawn, not fork: the parent holds libtorch and the model, whose page tables a fork
  // copies (tens of ms a call, every step for a reward command).
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
  // The command gets SIGPIPE's default back (this process ignores it, below).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t dflt;
  sigemptyset(&dflt);
  sigaddset(&dflt, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &dflt);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/bin/sh", &fa, &attr, const_cast<char* const*>(argv), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  close(to_child[0]);
  close(from_child[1]);
  if (rc != 0) {
    close(to_child[1]), close(from_child[0]);
    throw UserError(what + ": could not start /bin/sh: " + std::strerror(rc));
  }
  // A writer thread feeds stdin while this one drains stdout: no deadlock on large inputs. A
  // command that stops reading ends the writes (EPIPE; SIGPIPE ignored).
  signal(SIGPIPE, SIG_IGN);
  std::thread writer([fd = to_child[1], &input] {
    size_t off = 0;
    while (off < input.size()) {
      const ssize_t n = write(fd, input.data() + off, input.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    close(fd);
  });
  std::string output;
  char buf[4096];
  for (ssize_t n;;) {
    n = read(from_child[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    output.append(buf, static_cast<size_t>(n));
  }
  close(from_child[0]);
  writer.join();
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    std::string how = WIFSIGNALED(st) ? "was killed by signal " + std::to_string(WTERMSIG(st))
                                      : "exited with status " + std::to_string(WEXITSTATUS(st));
    throw UserError(what + " " + how, fix);
  }
  return output;
}

}  // namespace brl::tasks
