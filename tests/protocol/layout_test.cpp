// The bucket layout of protocol v1: object keys as DESIGN.md names them, parsed back from any
// listing, versions and evaluations round-tripping through their keys, worker ids refused when
// they would escape their folder.
#include "protocol/layout.h"

#include <gtest/gtest.h>

#include "util/error.h"

using namespace brl::protocol;

TEST(Layout, KeysMatchDesign) {
  EXPECT_EQ(adapter_key(12, "0123456789abcdef0123"), "global/v00000012/adapter-0123456789abcdef.safetensors");
  EXPECT_EQ(eval_key(3), "evals/v00000003.json");
  EXPECT_EQ(manifest_key(0), "global/v00000000/manifest.json");
  EXPECT_EQ(update_key("w1", "u-3"), "updates/w1/u-3.upd");
  EXPECT_EQ(heartbeat_key("w1"), "heartbeats/w1.json");
  EXPECT_EQ(log_key("w1", 1700000000123), "logs/w1/1700000000123.jsonl");
  // Zero padding keeps lexicographic order = numeric order (ListObjects sorts by key).
  EXPECT_LT(manifest_key(9), manifest_key(10));
  EXPECT_LT(log_key("w", 999), log_key("w", 1000));
}

TEST(Layout, Parse) {
  EXPECT_EQ(parse_manifest_key("global/v00000012/manifest.json"), 12);
  EXPECT_EQ(parse_manifest_key("global/v00000012/adapter.safetensors"), std::nullopt);
  EXPECT_EQ(parse_manifest_key("global/v12/manifest.json"), std::nullopt);
  auto u = parse_update_key("updates/w1/abc.upd");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->first, "w1");
  EXPECT_EQ(u->second, "abc");
  EXPECT_FALSE(parse_update_key("updates/w1/x/abc.upd"));
  EXPECT_FALSE(parse_update_key("updates/w1/abc.tmp"));
  EXPECT_FALSE(parse_update_key("updates//abc.upd"));
  // Ids that would name other folders (found by fuzz/proxy_admission: a header's worker "..").
  EXPECT_FALSE(parse_update_key("updates/../abc.upd"));
  EXPECT_FALSE(parse_update_key("updates/w1/...upd"));
  EXPECT_FALSE(parse_update_key("updates/.hidden/abc.upd"));
  EXPECT_TRUE(parse_update_key("updates/w.1/a.b-c_d.upd"));
}

// Every key the proxy's garbage collection and the evaluator read back: parsed where made.
TEST(Layout, VersionAndEvalKeysRoundTrip) {
  const std::string sha(64, 'c');
  EXPECT_EQ(outer_state_key(7, sha), "global/v00000007/outer-cccccccccccccccc.safetensors");
  for (int64_t v : {0, 7, 12345678}) {
    auto m = parse_version_key(manifest_key(v)), a = parse_version_key(adapter_key(v, sha)),
         o = parse_version_key(outer_state_key(v, sha));
    ASSERT_TRUE(m && a && o) << v;
    EXPECT_EQ(m->version, v);
    EXPECT_EQ(a->version, v);
    EXPECT_EQ(o->version, v);
    EXPECT_EQ(m->object, VersionObject::manifest);
    EXPECT_EQ(a->object, VersionObject::adapter);
    EXPECT_EQ(o->object, VersionObject::outer_state);
    EXPECT_EQ(parse_eval_key(eval_key(v)), v);
    EXPECT_EQ(parse_manifest_key(adapter_key(v, sha)), std::nullopt);
  }
  for (const char* bad : {"global/LATEST", "global/v0000001x/manifest.json", "global/v00000001/adapter-.safetensors",
                          "global/v00000001/other-abc.safetensors", "global/v00000001/adapter-a/b.safetensors",
                          "global/v00000001/manifest.json.tmp", "global/v00000001", "xglobal/v00000001/manifest.json"})
    EXPECT_EQ(parse_version_key(bad), std::nullopt) << bad;
  for (const char* bad : {"evals/v00000001.jsonl", "evals/v1.json", "evals/", "global/v00000001.json"})
    EXPECT_EQ(parse_eval_key(bad), std::nullopt) << bad;
}

TEST(Layout, WorkerIds) {
  check_worker_id("worker-0.a_b");
  EXPECT_THROW(check_worker_id(""), brl::UserError);
  EXPECT_THROW(check_worker_id("a/b"), brl::UserError);
  EXPECT_THROW(check_worker_id(".hidden"), brl::UserError);
  EXPECT_THROW(check_worker_id(std::string(65, 'a')), brl::UserError);
}
