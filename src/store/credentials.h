// Where the S3 client's settings come from, in the standard AWS order: credentials from the
// environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), else the profile
// (AWS_PROFILE, default "default") in ~/.aws/credentials (AWS_SHARED_CREDENTIALS_FILE) and
// ~/.aws/config (AWS_CONFIG_FILE, sections "[profile name]" or "[default]"); region from
// AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`, else us-east-1; endpoint from
// AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's `endpoint_url`, else AWS.
// Addressing: BRL_S3_ADDRESSING=path|virtual|auto (auto: path-style for an IP or localhost
// endpoint or a bucket name that is not a DNS label, virtual-hosted otherwise).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "store/sigv4.h"

namespace brl::store {

// Reads an environment variable; tests pass their own map.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup process_env();

struct S3Config {
  sigv4::Credentials creds;
  std::string creds_source;  // for messages: "environment" or "profile 'x' in /path" (no secrets)
  std::string region;
  std::string scheme;         // "http" or "https"
  std::string endpoint_host;  // "127.0.0.1:7480", "s3.eu-west-1.amazonaws.com"
  bool custom_endpoint = false;
  bool path_style = false;
};

// Sections of an INI file: {"default": {"aws_access_key_id": "..."}, "profile x": {...}}.
// Missing file: empty map. Keys lowercased, values trimmed; '#' and ';' start comments.
// The same from the file's text (what the fuzzer feeds).
std::map<std::string, std::map<std::string, std::string>> parse_ini(const std::string& text);
std::map<std::string, std::map<std::string, std::string>> parse_ini_file(const std::string& path);

// Throws UserError (naming the variable or file and what to set) when no credentials are
// found or a setting is malformed.
S3Config resolve_s3_config(const std::string& bucket, const EnvLookup& env = process_env());

// "127.0.0.1", "localhost", "[::1]" and other IP literals: no DNS names to put a bucket in.
bool host_is_ip_or_localhost(const std::string& host_port);

}  // namespace brl::store
