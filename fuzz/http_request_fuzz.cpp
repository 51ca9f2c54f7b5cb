// Fuzzes the proxy's HTTP request path up to the auth decision (src/obs/http_server.h): what
// a client that can reach the port sends, cut at the first blank line as the server does.
// Invariants: a parsed request is well-formed (token-char method, target from '/', lower-case
// header names, trimmed values, Host on HTTP/1.1) and re-serializes to bytes that parse to the
// same request; the server (token set, bound beyond loopback, one private and one public
// route) answers 200 on the private route only to a request whose Authorization header, by
// an independent check (OpenSSL's base64), carries the token; its response bytes carry a
// Content-Length equal to the body.
#include <openssl/evp.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "obs/http_server.h"

using namespace brl;

namespace {
const std::string kToken = "s3cr3t-T0ken";

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}
std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Whether `header` is "Bearer <token>" or "Basic base64(user:token)" (scheme case-insensitive).
bool carries_token(const std::string& header) {
  std::string h = trim(header);
  size_t sp = h.find(' ');
  if (sp == std::string::npos) return false;
  std::string scheme = lower(h.substr(0, sp)), cred = trim(h.substr(sp + 1));
  if (scheme == "bearer") return cred == kToken;
  if (scheme != "basic" || cred.size() % 4 != 0) return false;
  // Canonical base64 only ('=' as the last one or two characters): EVP decodes laxer forms
  // (padding inside) that the server may refuse, and refusing is not a hole.
  const size_t body = cred.find_last_not_of('=') + 1;
  if (cred.size() - body > 2) return false;
  for (size_t i = 0; i < body; ++i)
    if (!std::isalnum(static_cast<unsigned char>(cred[i])) && cred[i] != '+' && cred[i] != '/') return false;
  std::string plain(cred.size(), '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(plain.data()),
                          reinterpret_cast<const unsigned char*>(cred.data()), static_cast<int>(cred.size()));
  if (n < 0) return false;
  plain.resize(static_cast<size_t>(n));
  for (size_t i = cred.size(); i > 0 && cred[i - 1] == '='; --i) plain.pop_back();  // EVP keeps padding's zero bytes
  size_t colon = plain.find(':');
  return colon != std::string::npos && plain.substr(colon + 1) == kToken;
}

bool is_tchar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

const obs::HttpServer& server() {
  static obs::HttpServer* s = [] {
    auto* srv = new obs::HttpServer(obs::ListenAddress{"0.0.0.0", 0, false}, kToken);  // never started
    srv->route("/status", [](const obs::HttpRequest&) {
      return obs::HttpResponse{200, "text/plain", "private\n", {}};
    });
    srv->route(
        "/health",
        [](const obs::HttpRequest&) {
          return obs::HttpResponse{200, "text/plain", "ok\n", {}};
        },
        true);
    return srv;
  }();
  return *s;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t end = in.find("\r\n\r\n");
  std::string_view head = end == std::string_view::npos ? in : in.substr(0, end + 4);
  auto r = obs::parse_request(head);
  if (!r.is_ok()) {
    if (r.status().code() != StatusCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  const obs::HttpRequest& q = r.value();
  if (q.method.empty() || q.target.empty() || q.target[0] != '/') __builtin_trap();
  for (char c : q.method)
    if (!is_tchar(c)) __builtin_trap();
  if (q.target != q.path + (q.target.find('?') != std::string::npos ? "?" + q.query : "")) __builtin_trap();
  if (q.version != "HTTP/1.1" && q.version != "HTTP/1.0") __builtin_trap();
  if (q.version == "HTTP/1.1" && !q.headers.count("host")) __builtin_trap();
  std::string again = q.method + " " + q.target + " " + q.version + "\r\n";
  for (auto& [name, value] : q.headers) {
    if (name.empty() || name != lower(name) || value != trim(value)) __builtin_trap();
    for (char c : name)
      if (!is_tchar(c)) __builtin_trap();
    if (value.find("\r\n") != std::string::npos) __builtin_trap();
    again += name + ": " + value + "\r\n";
  }
  again += "\r\n";
  auto r2 = obs::parse_request(again);
  if (!r2.is_ok()) __builtin_trap();
  const obs::HttpRequest& q2 = r2.value();
  if (q2.method != q.method || q2.target != q.target || q2.path != q.path || q2.query != q.query ||
      q2.version != q.version || q2.headers != q.headers)
    __builtin_trap();

  obs::HttpResponse resp = server().respond(q);
  const bool get = q.method == "GET" || q.method == "HEAD";
  if (q.path == "/status" && resp.status == 200 && !carries_token(q.header("authorization"))) __builtin_trap();
  if (q.path == "/status" && get && carries_token(q.header("authorization")) && resp.status != 200) __builtin_trap();
  if (q.path == "/health" && get && resp.status != 200) __builtin_trap();
  if (q.path != "/status" && q.path != "/health" && resp.status != 404) __builtin_trap();
  const std::string wire = obs::format_response(resp, q.method == "HEAD");
  const std::string cl = "Content-Length: " + std::to_string(resp.body.size()) + "\r\n";
  if (wire.rfind("HTTP/1.1 " + std::to_string(resp.status) + " ", 0) != 0 || wire.find(cl) == std::string::npos)
    __builtin_trap();
  return 0;
}
