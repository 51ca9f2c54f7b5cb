// S3 settings resolution (see credentials.h for the order). Secrets are read here and never
// copied into a message: errors name the variable or file only.
#include "store/credentials.h"

#include <arpa/inet.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace brl::store {

namespace {

// Whitespace as Python's str.strip() (the AWS CLI's reader): form feed and vertical tab too.
std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n\f\v");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n\f\v");
  return s.substr(b, e - b + 1);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string get_or(const EnvLookup& env, const std::string& name, const std::string& fallback = "") {
  auto v = env(name);
  return v && !v->empty() ? *v : fallback;
}

std::string home_file(const EnvLookup& env, const std::string& var, const std::string& rel) {
  std::string p = get_or(env, var);
  if (!p.empty()) return p;
  std::string home = get_or(env, "HOME");
  return home.empty() ? "" : home + "/" + rel;
}

// A bucket usable as a DNS label for virtual-hosted addressing (and TLS wildcard certs: no dots).
bool dns_compatible_bucket(const std::string& b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  return b.front() != '-' && b.back() != '-';
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

std::map<std::string, std::map<std::string, std::string>> parse_ini_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::stringstream text;
  text << f.rdbuf();
  return parse_ini(text.str());
}

std::map<std::string, std::map<std::string, std::string>> parse_ini(const std::string& text) {
  std::map<std::string, std::map<std::string, std::string>> out;
  std::istringstream f(text);
  std::string line, section;
  while (std::getline(f, line)) {
    std::string t = trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      section = trim(t.substr(1, t.size() - 2));
      // "[profile  x]" -> "profile x"
      if (section.rfind("profile", 0) == 0 && section.size() > 7 &&
          std::isspace(static_cast<unsigned char>(section[7])))
        section = "profile " + trim(section.substr(7));
      out[section];
      continue;
    }
    size_t eq = t.find('=');
    if (eq == std::string::npos || section.empty()) continue;  // nested (s3 = ...) blocks etc.
    out[section][lower(trim(t.substr(0, eq)))] = trim(t.substr(eq + 1));
  }
  return out;
}

bool host_is_ip_or_localhost(const std::string& host_port) {
  std::string h = host_port;
  if (!h.empty() && h[0] == '[') return true;  // [::1]:port
  size_t colon = h.rfind(':');
  if (colon != std::string::npos) h = h.substr(0, colon);
  if (h == "localhost" || h.ends_with(".localhost")) return true;
  unsigned char buf[16];
  return inet_pton(AF_INET, h.c_str(), buf) == 1;
}

S3Config resolve_s3_config(const std::string& bucket, const EnvLookup& env) {
  S3Config c;
  const std::string profile = get_or(env, "AWS_PROFILE", "default");
  const std::string creds_path = home_file(env, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  const std::string config_path = home_file(env, "AWS_CONFIG_FILE", ".aws/config");
  auto creds_ini = creds_path.empty() ? decltype(parse_ini_file("")){} : parse_ini_file(creds_path);
  auto config_ini = config_path.empty() ? decltype(parse_ini_file("")){} : parse_ini_file(config_path);
  const std::string config_section = profile == "default" ? "default" : "profile " + profile;
  auto config_get = [&](const std::string& key) -> std::string {
    auto s = config_ini.find(config_section);
    if (s == config_ini.end()) return "";
    auto v = s->second.find(key);
    return v == s->second.end() ? "" : v->second;
  };

  std::string ak = get_or(env, "AWS_ACCESS_KEY_ID"), sk = get_or(env, "AWS_SECRET_ACCESS_KEY");
  if (!ak.empty() && !sk.empty()) {
    c.creds = {ak, sk, get_or(env, "AWS_SESSION_TOKEN")};
    c.creds_source = "environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)";
  } else if (!ak.empty() || !sk.empty()) {
    throw UserError(std::string("only one of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY is set (") +
                        (ak.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID") + " is)",
                    "set both, or neither to use the profile in ~/.aws/credentials");
  } else {
    // The credentials file wins over the config file for the same profile (AWS CLI order).
    auto pick = [&](const std::map<std::string, std::map<std::string, std::string>>& ini, const std::string& sec,
                    const std::string& path) {
      auto s = ini.find(sec);
      if (s == ini.end()) return false;
      auto& kv = s->second;
      auto a = kv.find("aws_access_key_id"), b = kv.find("aws_secret_access_key");
      if (a == kv.end() || b == kv.end()) return false;
      auto t = kv.find("aws_session_token");
      c.creds = {a->second, b->second, t == kv.end() ? "" : t->second};
      c.creds_source = "profile '" + profile + "' in " + path;
      return true;
    };
    if (!pick(creds_ini, profile, creds_path) && !pick(config_ini, config_section, config_path)) {
      throw UserError(
          "no S3 credentials for bucket '" + bucket +
              "': AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are not set and profile '" + profile +
              "' has no aws_access_key_id/aws_secret_access_key in " +
              (creds_path.empty() ? "~/.aws/credentials" : creds_path) + " or " +
              (config_path.empty() ? "~/.aws/config" : config_path),
          "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or set AWS_PROFILE to a profile that has them "
          "(for the local test server: scripts/s3-server.sh start && source .cache/s3/env.sh)");
    }
  }

  c.region = get_or(env, "AWS_REGION", get_or(env, "AWS_DEFAULT_REGION", config_get("region")));
  if (c.region.empty()) c.region = "us-east-1";

  std::string endpoint =
      get_or(env, "AWS_ENDPOINT_URL_S3", get_or(env, "AWS_ENDPOINT_URL", config_get("endpoint_url")));
  if (endpoint.empty()) {
    c.scheme = "https";
    c.endpoint_host = "s3." + c.region + ".amazonaws.com";
  } else {
    size_t sep = endpoint.find("://");
    if (sep == std::string::npos)
      throw UserError("S3 endpoint '" + endpoint + "' (AWS_ENDPOINT_URL) has no scheme",
                      "write it as http://host:port or https://host");
    c.scheme = lower(endpoint.substr(0, sep));
    if (c.scheme != "http" && c.scheme != "https")
      throw UserError("S3 endpoint '" + endpoint + "' has scheme '" + c.scheme + "'", "use http:// or https://");
    std::string rest = endpoint.substr(sep + 3);
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    if (rest.empty() || rest.find('/') != std::string::npos)
      throw UserError("S3 endpoint '" + endpoint + "' must be scheme://host[:port] without a path",
                      "put the bucket and prefix in the s3:// URL instead");
    c.endpoint_host = lower(rest);
    c.custom_endpoint = true;
  }

  std::string mode = lower(get_or(env, "BRL_S3_ADDRESSING", "auto"));
  if (mode == "path") {
    c.path_style = true;
  } else if (mode == "virtual") {
    if (!dns_compatible_bucket(bucket))
      throw UserError("bucket '" + bucket + "' cannot be addressed virtual-hosted (BRL_S3_ADDRESSING=virtual)",
                      "use BRL_S3_ADDRESSING=path or auto for bucket names with dots or capitals");
    c.path_style = false;
  } else if (mode == "auto") {
    c.path_style = !dns_compatible_bucket(bucket) || (c.custom_endpoint && host_is_ip_or_localhost(c.endpoint_host));
  } else {
    throw UserError("BRL_S3_ADDRESSING='" + mode + "' is not one of path, virtual, auto");
  }
  return c;
}

}  // namespace brl::store
