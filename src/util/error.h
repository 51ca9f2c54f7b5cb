// Error tiers (STYLE.md §6):
//  - caller mistakes (bad file, bad config value) -> throw UserError with what was wrong,
//    which input, and a hint on how to fix it;
//  - expected I/O failures on storage/network paths -> a Status value (util/status.h);
//  - bugs -> BRL_ASSERT (aborts with file:line).
#pragma once

#include <stdexcept>
#include <string>

namespace brl {

// An error the user can fix: the message names the input and, where possible, the fix.
class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& what, const std::string& hint = "")
      : std::runtime_error(hint.empty() ? what : what + "\n  hint: " + hint), hint_(hint) {}
  const std::string& hint() const { return hint_; }

 private:
  std::string hint_;
};

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace brl

#define BRL_ASSERT(cond, ...)                                                             \
  do {                                                                                    \
    if (!(cond)) ::brl::assert_fail(#cond, __FILE__, __LINE__, std::string{__VA_ARGS__}); \
  } while (0)
