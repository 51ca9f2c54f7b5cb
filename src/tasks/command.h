// An external command as a filter: `sh -c command` with the input on its stdin, its stdout
// returned. The reward and tool commands run through it.
#pragma once

#include <string>

namespace brl::tasks {

// Runs `command` once with `input` on stdin and returns what it printed. A command that cannot
// start, is killed or exits non-zero throws UserError naming `what` ("reward command 'x'"),
// how it ended, and `fix`.
std::string run_filter(const std::string& command, const std::string& input, const std::string& what,
                       const std::string& fix);

}  // namespace brl::tasks
