#include "protocol/verify.h"

#include <map>

#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "util/hash.h"

namespace brl::protocol {

std::string VerifyReport::summary() const {
  std::string s = "versions 0.." + std::to_string(newest) + " (LATEST " + std::to_string(latest) + "), " +
                  std::to_string(updates_folded) + " updates folded, " + std::to_string(updates_rejected) +
                  " rejected, " + std::to_string(updates_present) + " present (" + std::to_string(updates_pending) +
                  " pending), " + std::to_string(payloads_verified) + " payloads verified, " +
                  std::to_string(payloads_collected) +
                  " collected: " + (ok() ? "OK" : std::to_string(errors.size()) + " errors");
  for (auto& e : errors) s += "\n  " + e;
  return s;
}

VerifyReport verify_run(store::ObjectStore& s, bool check_payloads) {
  VerifyReport r;
  if (auto run = read_run(s); !run) r.errors.push_back(run.status().to_string());
  auto objs = s.list_all(global_prefix());
  if (!objs) {
    r.errors.push_back(objs.status().to_string());
    return r;
  }
  std::set<int64_t> manifests;
  std::set<std::string> keys;
  for (auto& o : *objs) {
    keys.insert(o.key);
    if (auto v = parse_manifest_key(o.key)) manifests.insert(*v);
  }
  if (manifests.empty()) {
    r.errors.push_back("no published version in " + s.describe());
    return r;
  }
  r.newest = *manifests.rbegin();
  for (int64_t v = 0; v <= r.newest; ++v)
    if (!manifests.count(v)) r.errors.push_back("version " + std::to_string(v) + " is missing (the chain has a gap)");
  if (auto l = read_latest(s); !l) {
    r.errors.push_back("LATEST: " + l.status().to_string());
  } else {
    r.latest = *l;
    if (!manifests.count(*l))
      r.errors.push_back("LATEST names version " + std::to_string(*l) + ", which has no manifest");
  }
  std::map<std::string, int64_t> by_id, by_sha;
  std::map<std::string, std::vector<int64_t>> recorded;  // "worker/id" -> manifests naming it, folded or rejected
  std::map<std::string, std::string> cursors;            // of the newest manifest that parses
  for (int64_t v : manifests) {
    auto m = read_manifest(s, v);
    if (!m) {
      r.errors.push_back(m.status().to_string());
      continue;
    }
    ++r.versions;
    cursors = m->cursors;
    if (m->payload_key.rfind(version_dir(v), 0) != 0)
      r.errors.push_back("version " + std::to_string(v) + ": payload key " + m->payload_key + " is outside its folder");
    if (!keys.count(m->payload_key)) {
      ++r.payloads_collected;
    } else if (check_payloads) {
      if (auto p = read_payload(s, *m); !p) r.errors.push_back(p.status().to_string());
      else ++r.payloads_verified;
      // The proxy's own state for this version (server momentum, the bf16 run's master copy).
      if (const auto& o = m->outer_state; o && keys.count(o->key)) {
        auto body = s.get(o->key);
        if (!body || sha256_hex(*body) != o->sha256)
          r.errors.push_back("version " + std::to_string(v) + ": outer state " + o->key +
                             (body ? " does not match its sha256" : ": " + body.status().to_string()));
      }
    }
    for (auto& u : m->updates) {
      std::string id = u.worker + "/" + u.id;
      if (auto [it, fresh] = by_id.emplace(id, v); !fresh)
        r.errors.push_back("update " + id + " is folded into v" + std::to_string(it->second) + " and v" +
                           std::to_string(v));
      // Zero deltas (norm 0; or unknown in old manifests) may legitimately repeat.
      if (auto [it, fresh] = u.norm > 0 ? by_sha.emplace(u.payload_sha256, v) : std::pair{by_sha.end(), true}; !fresh)
        r.errors.push_back("update content " + u.payload_sha256.substr(0, 16) + " (" + id + ") is folded twice (v" +
                           std::to_string(it->second) + ", v" + std::to_string(v) + ")");
      r.folded.insert(id);
      recorded[id].push_back(v);
      ++r.updates_folded;
    }
    for (auto& x : m->rejected) {
      if (x.reason.empty())
        r.errors.push_back("update " + x.worker + "/" + x.id + " is rejected in v" + std::to_string(v) +
                           " without a reason");
      recorded[x.worker + "/" + x.id].push_back(v);
    }
    r.updates_rejected += static_cast<int64_t>(m->rejected.size());
  }
  for (auto& [id, vs] : recorded)
    if (vs.size() > 1) {
      std::string where;
      for (int64_t v : vs) where += (where.empty() ? "v" : ", v") + std::to_string(v);
      r.errors.push_back("update " + id + " is recorded (folded or rejected) in " + std::to_string(vs.size()) +
                         " manifests: " + where);
    }
  // Listed after the manifests were read: an update considered since then is still after the
  // cursor read here, so it counts as pending, never as lost.
  auto updates = s.list_all(updates_prefix());
  if (!updates) {
    r.errors.push_back(updates.status().to_string());
    return r;
  }
  for (auto& o : *updates) {
    ++r.updates_present;
    auto k = parse_update_key(o.key);
    if (!k) {  // the proxy rejects it as malformed, with the whole key as its id
      bool named = false;
      for (auto& [id, vs] : recorded)
        named = named || (id.size() > o.key.size() && id.compare(id.size() - o.key.size(), o.key.npos, o.key) == 0);
      r.updates_pending += !named;
      continue;
    }
    if (recorded.count(k->first + "/" + k->second)) continue;
    auto c = cursors.find(k->first);
    if (c == cursors.end() || c->second.empty() || o.key > update_key(k->first, c->second)) ++r.updates_pending;
    else
      r.errors.push_back("update " + o.key + " is neither folded nor rejected, and its worker's cursor (" + c->second +
                         ") is past it: it was skipped");
  }
  return r;
}

}  // namespace brl::protocol
