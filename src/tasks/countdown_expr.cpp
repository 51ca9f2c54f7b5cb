// A recursive-descent evaluator for Countdown answers: integers, + - * /, parentheses.
// Exact rational arithmetic (numerator/denominator) so 7/2*2 == 7 is judged exactly.
#include <cstdlib>
#include <numeric>

#include "tasks/task.h"

namespace brl::tasks {

namespace {
struct Q {
  int64_t n = 0, d = 1;
};
Q norm(Q q) {
  if (q.d < 0) q.n = -q.n, q.d = -q.d;
  int64_t g = std::gcd(q.n < 0 ? -q.n : q.n, q.d);
  if (g > 1) q.n /= g, q.d /= g;
  return q;
}
struct Parser {
  const std::string& s;
  size_t i = 0;
  std::vector<int64_t>* used;
  bool ok = true;
  void ws() {
    while (i < s.size() && s[i] == ' ') ++i;
  }
  Q atom() {
    ws();
    if (i < s.size() && s[i] == '(') {
      ++i;
      Q v = expr();
      ws();
      if (i >= s.size() || s[i] != ')') ok = false;
      else ++i;
      return v;
    }
    if (i >= s.size() || s[i] < '0' || s[i] > '9') {
      ok = false;
      return {};
    }
    int64_t v = 0;
    for (int k = 0; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++k) {
      if (k > 9) ok = false;
      v = v * 10 + (s[i] - '0');
    }
    used->push_back(v);
    return {v, 1};
  }
  Q term() {
    Q v = atom();
    for (;;) {
      ws();
      if (!ok || i >= s.size() || (s[i] != '*' && s[i] != '/')) return v;
      char op = s[i++];
      Q r = atom();
      if (op == '*') v = norm({v.n * r.n, v.d * r.d});
      else if (r.n == 0) ok = false;
      else v = norm({v.n * r.d, v.d * r.n});
    }
  }
  Q expr() {
    Q v = term();
    for (;;) {
      ws();
      if (!ok || i >= s.size() || (s[i] != '+' && s[i] != '-')) return v;
      char op = s[i++];
      Q r = term();
      v = norm({op == '+' ? v.n * r.d + r.n * v.d : v.n * r.d - r.n * v.d, v.d * r.d});
    }
  }
};
}  // namespace

bool eval_countdown(const std::string& e, double* value, std::vector<int64_t>* used) {
  std::vector<int64_t> u;
  Parser p{e, 0, &u};
  Q v = p.expr();
  p.ws();
  if (!p.ok || p.i != e.size() || u.empty()) return false;
  *value = static_cast<double>(v.n) / static_cast<double>(v.d);
  if (used) *used = u;
  return true;
}

}  // namespace brl::tasks
