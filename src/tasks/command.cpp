#include "tasks/command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "util/error.h"

namespace brl::tasks {

std::string run_filter(const std::string& command, const std::string& input, const std::string& what,
                       const std::string& fix) {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) throw UserError(what + ": pipe failed: " + std::strerror(errno));
  pid_t pid = fork();
  if (pid < 0) throw UserError(what + ": fork failed: " + std::strerror(errno));
  if (pid == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    close(to_child[0]), close(to_child[1]), close(from_child[0]), close(from_child[1]);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  // A forked writer feeds stdin while we drain stdout: no deadlock on large inputs.
  signal(SIGPIPE, SIG_IGN);
  pid_t writer = fork();
  if (writer == 0) {
    close(from_child[0]);
    size_t off = 0;
    while (off < input.size()) {
      ssize_t n = write(to_child[1], input.data() + off, input.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(to_child[1]);
  std::string output;
  char buf[4096];
  for (ssize_t n; (n = read(from_child[0], buf, sizeof buf)) > 0;) output.append(buf, static_cast<size_t>(n));
  close(from_child[0]);
  int st = 0, wst = 0;
  waitpid(pid, &st, 0);
  if (writer > 0) waitpid(writer, &wst, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    std::string how = WIFSIGNALED(st) ? "was killed by signal " + std::to_string(WTERMSIG(st))
                                      : "exited with status " + std::to_string(WEXITSTATUS(st));
    throw UserError(what + " " + how, fix);
  }
  return output;
}

}  // namespace brl::tasks
