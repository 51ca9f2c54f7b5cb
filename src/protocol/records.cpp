#include "protocol/records.h"

#include <algorithm>
#include <chrono>

#include "config/async_config.h"
#include "protocol/layout.h"
#include "util/json_int.h"

namespace brl::protocol {

namespace {

Status bad(const std::string& label, const std::string& what) { return {StatusCode::kCorrupt, label + ": " + what}; }

// Parses text as a JSON object, then runs fill(j); json type errors become kCorrupt naming label.
template <class T, class F>
Result<T> parse_with(std::string_view text, const std::string& label, F fill) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return bad(label, "not a JSON object");
  T out;
  try {
    Status st = fill(j, out);
    if (!st) return st;
  } catch (const nlohmann::json::exception& e) {
    return bad(label, std::string("field missing or of the wrong type: ") + e.what());
  }
  return out;
}

}  // namespace

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string base_digest(const std::vector<BaseFile>& files) {
  std::vector<BaseFile> f = files;
  std::sort(f.begin(), f.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::string s;
  for (auto& x : f) s += x.name + "\t" + x.sha256 + "\n";
  return s;
}

nlohmann::json RunDescription::to_json() const {
  nlohmann::json files = nlohmann::json::array(), data = nlohmann::json::array();
  for (auto& f : base_files) files.push_back({{"name", f.name}, {"sha256", f.sha256}, {"size", f.size}});
  for (auto& f : data_files) data.push_back({{"name", f.name}, {"sha256", f.sha256}, {"size", f.size}});
  return {{"protocol_version", protocol_version},
          {"run_id", run_id},
          {"created_ms", created_ms},
          {"base", {{"sha256", base_sha256}, {"files", files}}},
          {"data", data},
          {"config", config}};
}

Result<RunDescription> RunDescription::parse(std::string_view text, const std::string& label) {
  return parse_with<RunDescription>(text, label, [&](const nlohmann::json& j, RunDescription& r) -> Status {
    r.protocol_version = json_int<int>(j.at("protocol_version"));
    if (r.protocol_version != 1)
      return bad(label,
                 "protocol_version " + std::to_string(r.protocol_version) + " is not supported by this build (1)");
    r.run_id = j.at("run_id").get<std::string>();
    r.created_ms = json_int<int64_t>(j.at("created_ms"));
    r.base_sha256 = j.at("base").at("sha256").get<std::string>();
    for (auto& f : j.at("base").at("files")) {
      BaseFile b{f.at("name").get<std::string>(), f.at("sha256").get<std::string>(), json_int<uint64_t>(f.at("size"))};
      if (b.name.empty() || b.name.find('/') != std::string::npos || b.name[0] == '.')
        return bad(label, "base file name '" + b.name + "' is not a plain file name");
      r.base_files.push_back(b);
    }
    for (auto& f : j.value("data", nlohmann::json::array())) {
      BaseFile b{f.at("name").get<std::string>(), f.at("sha256").get<std::string>(), json_int<uint64_t>(f.at("size"))};
      if (b.name.empty() || b.name.find('/') != std::string::npos || b.name[0] == '.')
        return bad(label, "data file name '" + b.name + "' is not a plain file name");
      r.data_files.push_back(b);
    }
    r.config = j.at("config");
    if (!r.config.is_object()) return bad(label, "config is not an object");
    return {};
  });
}

nlohmann::json Manifest::to_json() const {
  nlohmann::json ups = nlohmann::json::array(), rej = nlohmann::json::array();
  for (auto& u : updates) {
    ups.push_back({{"worker", u.worker},
                   {"id", u.id},
                   {"sha256", u.sha256},
                   {"payload_sha256", u.payload_sha256},
                   {"size", u.size},
                   {"base_version", u.base_version},
                   {"staleness", u.staleness},
                   {"steps", u.steps},
                   {"samples", u.samples},
                   {"weight", u.weight},
                   {"discount", u.discount},
                   {"reward_mean", u.reward_mean},
                   {"accuracy", u.accuracy},
                   {"norm", u.norm}});
    if (!u.signer.empty()) ups.back()["signer"] = u.signer;
    if (u.frac_reward_zero_std >= 0) ups.back()["frac_reward_zero_std"] = u.frac_reward_zero_std;
  }
  for (auto& r : rejected) rej.push_back({{"worker", r.worker}, {"id", r.id}, {"reason", r.reason}});
  return {{"version", version},
          {"parent", parent},
          {"created_ms", created_ms},
          {"proxy", proxy},
          {"payload", {{"key", payload_key}, {"sha256", payload_sha256}, {"size", payload_size}}},
          {"updates", ups},
          {"rejected", rej},
          {"cursors", cursors},
          {"stats", stats_json()}};
}

nlohmann::json Manifest::stats_json() const {
  nlohmann::json s = stats;
  if (!payload_dtype.empty()) s["payload_dtype"] = payload_dtype;
  if (outer_state)
    s["outer_state"] = {{"key", outer_state->key}, {"sha256", outer_state->sha256}, {"size", outer_state->size}};
  return s;
}

Result<Manifest> Manifest::parse(std::string_view text, const std::string& label) {
  return parse_with<Manifest>(text, label, [&](const nlohmann::json& j, Manifest& m) -> Status {
    m.version = json_int<int64_t>(j.at("version"));
    m.parent = json_int<int64_t>(j.at("parent"));
    if (m.version < 0 || m.parent != m.version - 1)
      return bad(label, "version " + std::to_string(m.version) + " with parent " + std::to_string(m.parent) +
                            " (a version's parent must be the one before it)");
    m.created_ms = json_int<int64_t>(j.at("created_ms"));
    m.proxy = j.at("proxy").get<std::string>();
    auto& p = j.at("payload");
    m.payload_key = p.at("key").get<std::string>();
    m.payload_sha256 = p.at("sha256").get<std::string>();
    m.payload_size = json_int<uint64_t>(p.at("size"));
    for (auto& u : j.at("updates"))
      m.updates.push_back({u.at("worker").get<std::string>(), u.at("id").get<std::string>(),
                           u.at("sha256").get<std::string>(), u.at("payload_sha256").get<std::string>(),
                           json_int<uint64_t>(u.at("size")), json_int<int64_t>(u.at("base_version")),
                           json_int<int64_t>(u.at("staleness")), json_int<int64_t>(u.at("steps")),
                           json_int<int64_t>(u.at("samples")), u.at("weight").get<double>(), u.value("discount", 1.0),
                           u.at("reward_mean").get<double>(), u.at("accuracy").get<double>(), u.value("norm", 0.0),
                           u.value("signer", ""), u.value("frac_reward_zero_std", -1.0)});
    for (auto& r : j.at("rejected"))
      m.rejected.push_back(
          {r.at("worker").get<std::string>(), r.at("id").get<std::string>(), r.at("reason").get<std::string>()});
    m.cursors = j.at("cursors").get<std::map<std::string, std::string>>();
    m.stats = j.value("stats", nlohmann::json::object());
    if (!m.stats.is_object()) return bad(label, "stats is not an object");
    if (auto d = m.stats.find("payload_dtype"); d != m.stats.end()) {
      m.payload_dtype = d->get<std::string>();
      if (!kPublishDtypes.parse(m.payload_dtype))
        return bad(label, "stats.payload_dtype '" + m.payload_dtype + "' is neither float32 nor bfloat16");
      m.stats.erase(d);
    }
    if (auto o = m.stats.find("outer_state"); o != m.stats.end()) {
      OuterStateRef r{o->at("key").get<std::string>(), o->at("sha256").get<std::string>(),
                      json_int(*o, "size", uint64_t{0})};
      auto k = parse_version_key(r.key);
      if (!k || k->object != VersionObject::outer_state || k->version != m.version)
        return bad(label, "stats.outer_state.key '" + r.key + "' is not an outer state of version " +
                              std::to_string(m.version));
      m.outer_state = std::move(r);
      m.stats.erase(o);
    }
    return {};
  });
}

nlohmann::json Heartbeat::to_json() const {
  return {{"worker", worker},
          {"host", host},
          {"state", state},
          {"pid", pid},
          {"time_ms", time_ms},
          {"step", step},
          {"version", version},
          {"updates", updates},
          {"updates_rejected", updates_rejected},
          {"samples_per_s", samples_per_s},
          {"reward_mean", reward_mean},
          {"accuracy", accuracy},
          {"bytes_uploaded", bytes_uploaded},
          {"device", device},
          {"device_memory_bytes", device_memory_bytes},
          {"last_error", last_error}};
}

Result<Heartbeat> Heartbeat::parse(std::string_view text, const std::string& label) {
  return parse_with<Heartbeat>(text, label, [&](const nlohmann::json& j, Heartbeat& h) -> Status {
    h.worker = j.at("worker").get<std::string>();
    h.host = j.value("host", "");
    h.state = j.at("state").get<std::string>();
    h.pid = json_int(j, "pid", int64_t{0});
    h.time_ms = json_int<int64_t>(j.at("time_ms"));
    h.step = json_int(j, "step", int64_t{0});
    h.version = json_int(j, "version", int64_t{0});
    h.updates = json_int(j, "updates", int64_t{0});
    h.updates_rejected = json_int(j, "updates_rejected", int64_t{0});
    h.samples_per_s = j.value("samples_per_s", 0.0);
    h.reward_mean = j.value("reward_mean", 0.0);
    h.accuracy = j.value("accuracy", 0.0);
    h.bytes_uploaded = json_int(j, "bytes_uploaded", uint64_t{0});
    h.device = j.value("device", "");
    h.device_memory_bytes = json_int(j, "device_memory_bytes", uint64_t{0});
    h.last_error = j.value("last_error", "");
    return {};
  });
}

nlohmann::json EvalRecord::to_json() const {
  nlohmann::json j{
      {"version", version}, {"n", n}, {"time_ms", time_ms}, {"accuracy", accuracy}, {"reward_mean", reward_mean}};
  if (k > 0) j["k"] = k, j["pass_at_1"] = pass_at_1, j["pass_at_k"] = pass_at_k;
  return j;
}

Result<EvalRecord> EvalRecord::parse(std::string_view text, const std::string& label) {
  return parse_with<EvalRecord>(text, label, [&](const nlohmann::json& j, EvalRecord& e) -> Status {
    e.version = json_int<int64_t>(j.at("version"));
    e.n = json_int<int64_t>(j.at("n"));
    e.time_ms = json_int<int64_t>(j.at("time_ms"));
    e.accuracy = j.at("accuracy").get<double>();
    e.reward_mean = j.at("reward_mean").get<double>();
    if (j.contains("k")) {
      e.k = json_int<int64_t>(j.at("k"));
      e.pass_at_1 = j.at("pass_at_1").get<double>();
      e.pass_at_k = j.at("pass_at_k").get<double>();
    }
    return {};
  });
}

}  // namespace brl::protocol
