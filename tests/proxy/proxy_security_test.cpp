// The real Proxy on a directory bucket against hostile updates: in a run with an allow-list
// unsigned, forged (bad signature; a header field changed after signing), unknown-key and
// replayed (same id under another key; same delta under a new id) updates are rejected with
// their reason, counted, listed in the manifest and never folded, also by a restarted proxy;
// a run without an allow-list takes unsigned updates and still refuses forged signed ones;
// the absolute and the relative norm bound (median of the last accepted norms, kept across a
// restart through the manifests).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>

#include "proxy/proxy.h"
#include "codec/codec.h"
#include "config/run_config.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "protocol/update.h"
#include "protocol/verify.h"
#include "store/local_store.h"
#include "util/ed25519.h"
#include "util/hash.h"
#include "proxy_util.h"

using namespace brl;
using namespace brl::proxy;
using codec::Tensor;
using test::TempDir;

namespace {

constexpr auto v0 = test::tiny_v0;
constexpr auto delta = test::tiny_delta;  // every element c: |delta| = sqrt(16) c = 4c

std::string key_line(const ed25519::SigningKey& k) { return ed25519::format_public_key(k.public_key()); }

// A signed (or unsigned, key null) update object.
std::string object(const std::string& worker, int64_t seq, const std::vector<Tensor>& d, const ed25519::SigningKey* key,
                   int64_t base = 0) {
  return protocol::encode_update(test::update_header(worker, seq, base, 64), test::fp32_payload(d), key);
}
// `obj` with its header edited and the signature left as it was.
std::string tampered(const std::string& obj, const std::function<void(protocol::UpdateHeader&)>& edit) {
  auto p = protocol::parse_update(obj, "t").value();
  edit(p.header);
  return protocol::encode_update(p.header, p.payload);
}
void put(store::ObjectStore& s, const std::string& worker, int64_t seq, const std::string& obj) {
  ASSERT_TRUE(s.put(protocol::update_key(worker, test::update_header(worker, seq, 0, 1).id), obj).is_ok());
}

std::map<std::string, std::string> reasons(const protocol::Manifest& m) {
  std::map<std::string, std::string> r;
  for (auto& x : m.rejected) r[x.worker] = x.reason.substr(0, x.reason.find(':'));
  return r;
}
std::vector<std::string> folded(const protocol::Manifest& m) {
  std::vector<std::string> r;
  for (auto& u : m.updates) r.push_back(u.worker);
  return r;
}

}  // namespace

TEST(ProxySecurity, AllowListRejectsEachAttackWithItsReason) {
  TempDir b;
  const std::string dir = b.str();
  auto alice = ed25519::SigningKey::generate(), bob = ed25519::SigningKey::generate(),
       mallory = ed25519::SigningKey::generate();
  RunConfig cfg;
  cfg.security.allowed_keys = {key_line(alice), key_line(bob)};
  auto s = protocol::open_bucket(dir);
  test::make_run(*s, cfg, v0());

  const std::string good = object("wa", 0, delta(0.01f), &alice);
  put(*s, "wa", 0, good);
  put(*s, "wa", 1, good);                                     // the same object under a new id
  put(*s, "wb", 2, object("wb", 2, delta(0.02f), nullptr));   // unsigned
  put(*s, "wc", 3, object("wc", 3, delta(0.03f), &mallory));  // a key not on the list
  put(*s, "wd", 4, tampered(object("wd", 4, delta(0.04f), &alice), [](protocol::UpdateHeader& h) {
    std::string sig = base64_decode(h.signature).value();
    sig[7] ^= 0x20;
    h.signature = base64_encode(sig);
  }));  // bad signature
  put(*s, "we", 5,
      tampered(object("we", 5, delta(0.05f), &alice), [](protocol::UpdateHeader& h) { h.samples = 100000; }));
  put(*s, "wf", 6, object("wf", 6, delta(0.01f), &alice));  // wa's delta again, freshly signed
  put(*s, "wg", 7, object("wg", 7, delta(0.07f), &bob));
  put(*s, "wh", 8, tampered(object("wh", 8, delta(0.08f), &mallory), [&](protocol::UpdateHeader& h) {
    h.signer = key_line(alice);
  }));  // claims alice's key

  Proxy p(test::proxy_options(dir, "p1"));
  ASSERT_TRUE(p.poll_once());
  store::LocalStore ls(dir);
  auto m1 = protocol::read_manifest(ls, 1).value();
  EXPECT_EQ(folded(m1), (std::vector<std::string>{"wa", "wg"}));
  EXPECT_EQ(m1.updates[0].signer, key_line(alice));
  EXPECT_EQ(m1.updates[1].signer, key_line(bob));
  EXPECT_EQ(reasons(m1), (std::map<std::string, std::string>{{"wa", "replay"},
                                                             {"wb", "unsigned"},
                                                             {"wc", "unknown_key"},
                                                             {"wd", "forged"},
                                                             {"we", "forged"},
                                                             {"wf", "replay"},
                                                             {"wh", "forged"}}));
  for (auto& r : m1.rejected) {
    if (r.worker == "wa") {
      EXPECT_NE(r.reason.find("was already considered"), std::string::npos) << r.reason;
    }
    if (r.worker == "wf") {
      EXPECT_NE(r.reason.find("the same delta as update wa/"), std::string::npos) << r.reason;
    }
  }
  EXPECT_EQ(p.counters().rejected_by_reason,
            (std::map<std::string, int64_t>{{"replay", 2}, {"unsigned", 1}, {"unknown_key", 1}, {"forged", 3}}));
  EXPECT_EQ(p.counters().accepted, 2);

  // A restarted proxy knows them from the manifests: the same replays are refused again.
  Proxy q(test::proxy_options(dir, "p2"));
  put(*s, "wa", 9, good);                                     // id replay
  put(*s, "wi", 10, object("wi", 10, delta(0.07f), &alice));  // wg's delta
  put(*s, "wj", 11, object("wj", 11, delta(0.09f), &alice, 1));
  ASSERT_TRUE(q.poll_once());
  auto m2 = protocol::read_manifest(ls, 2).value();
  EXPECT_EQ(folded(m2), (std::vector<std::string>{"wj"}));
  EXPECT_EQ(reasons(m2), (std::map<std::string, std::string>{{"wa", "replay"}, {"wi", "replay"}}));
}

// No allow-list: unsigned updates are folded (runs from before signing keep working); a
// signed one is verified against its own key, so a change after signing is still caught.
TEST(ProxySecurity, RunWithoutAllowList) {
  TempDir b;
  const std::string dir = b.str();
  auto k = ed25519::SigningKey::generate();
  auto s = protocol::open_bucket(dir);
  test::make_run(*s, RunConfig{}, v0());
  put(*s, "wa", 0, object("wa", 0, delta(0.01f), nullptr));
  put(*s, "wb", 1, object("wb", 1, delta(0.02f), &k));
  put(*s, "wc", 2,
      tampered(object("wc", 2, delta(0.03f), &k), [](protocol::UpdateHeader& h) { h.base_version = 0, h.steps = 9; }));
  Proxy p(test::proxy_options(dir, "p1"));
  ASSERT_TRUE(p.poll_once());
  auto m1 = protocol::read_manifest(*s, 1).value();
  EXPECT_EQ(folded(m1), (std::vector<std::string>{"wa", "wb"}));
  EXPECT_EQ(m1.updates[0].signer, "");
  EXPECT_EQ(m1.updates[1].signer, key_line(k));
  EXPECT_EQ(reasons(m1), (std::map<std::string, std::string>{{"wc", "forged"}}));
}

// Two workers whose groups all had equal rewards send the very same zero delta: not a replay
// (rejecting one stalled the sync-mode barrier), and the run still verifies.
TEST(ProxySecurity, IdenticalZeroDeltasAreNotReplays) {
  TempDir b;
  const std::string dir = b.str();
  auto s = protocol::open_bucket(dir);
  test::make_run(*s, RunConfig{}, v0());
  put(*s, "wa", 0, object("wa", 0, delta(0.0f), nullptr));
  put(*s, "wb", 1, object("wb", 1, delta(0.0f), nullptr));
  Proxy p(test::proxy_options(dir, "p1"));
  ASSERT_TRUE(p.poll_once());
  auto m1 = protocol::read_manifest(*s, 1).value();
  EXPECT_EQ(folded(m1), (std::vector<std::string>{"wa", "wb"}));
  EXPECT_TRUE(m1.rejected.empty());
  auto r = protocol::verify_run(*s);
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(ProxySecurity, AbsoluteNormBound) {
  TempDir b;
  const std::string dir = b.str();
  RunConfig cfg;
  cfg.aggregation.max_update_norm = 1.0;
  auto s = protocol::open_bucket(dir);
  test::make_run(*s, cfg, v0());
  put(*s, "wa", 0, object("wa", 0, delta(0.2f), nullptr));  // |delta| 0.8
  put(*s, "wb", 1, object("wb", 1, delta(0.3f), nullptr));  // |delta| 1.2
  Proxy p(test::proxy_options(dir, "p1"));
  ASSERT_TRUE(p.poll_once());
  auto m1 = protocol::read_manifest(*s, 1).value();
  EXPECT_EQ(folded(m1), (std::vector<std::string>{"wa"}));
  EXPECT_NEAR(m1.updates[0].norm, 4 * 0.2, 1e-6);
  ASSERT_EQ(m1.rejected.size(), 1u);
  EXPECT_EQ(m1.rejected[0].reason, "norm: |delta| = 1.2 exceeds max_update_norm = 1");
  EXPECT_EQ(p.counters().rejected_by_reason.at("norm"), 1);
}

// ratio 10 over the last 4 accepted norms, from the third accepted update on.
TEST(ProxySecurity, RelativeNormBoundKeepsItsWindowAcrossARestart) {
  TempDir b;
  const std::string dir = b.str();
  RunConfig cfg;
  cfg.aggregation.max_update_norm_ratio = 10;
  cfg.aggregation.update_norm_window = 4;
  auto s = protocol::open_bucket(dir);
  test::make_run(*s, cfg, v0());
  auto up = [&](const std::string& w, int64_t seq, float c, int64_t base) {
    put(*s, w, seq, object(w, seq, delta(c), nullptr, base));
  };
  // Norms 0.4, 0.48, then 8: accepted, two norms are too few to judge by.
  up("wa", 0, 0.1f, 0);
  up("wb", 1, 0.12f, 0);
  up("wc", 2, 2.0f, 0);
  {
    Proxy p(test::proxy_options(dir, "p1"));
    ASSERT_TRUE(p.poll_once());
    EXPECT_EQ(folded(protocol::read_manifest(*s, 1).value()), (std::vector<std::string>{"wa", "wb", "wc"}));
    // Median of {0.4, 0.48, 8} = 0.48: bound 4.8.
    up("wa", 3, 1.25f, 1);  // 5.0
    up("wb", 4, 1.0f, 1);   // 4.0
    ASSERT_TRUE(p.poll_once());
    auto m2 = protocol::read_manifest(*s, 2).value();
    EXPECT_EQ(folded(m2), (std::vector<std::string>{"wb"}));
    ASSERT_EQ(m2.rejected.size(), 1u);
    EXPECT_EQ(m2.rejected[0].reason,
              "norm: |delta| = 5 exceeds max_update_norm_ratio 10 x 0.48, the median of the last 3 accepted updates");
  }
  // The new proxy reads {0.4, 0.48, 8, 4} back from the manifests: median 2.24, bound 22.4.
  Proxy q(test::proxy_options(dir, "p2"));
  up("wa", 5, 5.75f, 2);  // 23
  up("wb", 6, 5.5f, 2);   // 22
  ASSERT_TRUE(q.poll_once());
  auto m3 = protocol::read_manifest(*s, 3).value();
  EXPECT_EQ(folded(m3), (std::vector<std::string>{"wb"}));
  ASSERT_EQ(m3.rejected.size(), 1u);
  EXPECT_EQ(m3.rejected[0].reason,
            "norm: |delta| = 23 exceeds max_update_norm_ratio 10 x 2.24, the median of the last 4 accepted updates");
}
