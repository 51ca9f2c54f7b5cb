// Disk full under the proxy (issue 8): the real Proxy in-process on a directory bucket in a
// 1 MiB tmpfs, filled by a file beside the bucket. A publish that fails for lack of space,
// at the payload or between the manifest (the commit point) and LATEST, leaves no corrupt
// version, the proxy keeps polling (no exception escapes), and once space is free the
// pending updates are folded, each exactly once. Needs root (CI runs as root).
#include <gtest/gtest.h>

#include <filesystem>

#include "proxy/proxy.h"
#include "protocol/bucket.h"
#include "protocol/verify.h"
#include "../test_mounts.h"
#include "chaos_util.h"
#include "../proxy/proxy_util.h"

using namespace brl;
using proxy::Proxy;
using proxy::ProxyOptions;

namespace {

// The bucket verifies, its newest version and LATEST are as given, no temporary file is left.
void expect_bucket(store::ObjectStore& s, const std::string& dir, int64_t newest, int64_t latest) {
  auto r = protocol::verify_run(s);
  EXPECT_TRUE(r.ok()) << r.summary();
  EXPECT_EQ(protocol::newest_version(s).value(), newest);
  EXPECT_EQ(protocol::read_latest(s).value(), latest);
  EXPECT_FALSE(test::writing_under(dir, "")) << "a temporary file was left in the bucket";
}

std::vector<std::string> folded(store::ObjectStore& s, int64_t v) {
  std::vector<std::string> ids;
  for (auto& u : protocol::read_manifest(s, v).value().updates) ids.push_back(u.worker + "/" + u.id);
  return ids;
}

std::string id(const std::string& worker, int64_t seq) {
  return worker + "/" + test::update_header(worker, seq, 0, 1).id;
}

}  // namespace

TEST(ProxyDiskFull, FailedPublishesLeaveNoBrokenVersionAndTheNextOneSucceeds) {
  if (auto why = test::why_no_root(); !why.empty()) GTEST_SKIP() << why;
  test::TempDir tmp;
  const std::string mnt = tmp.str("mnt"), dir = mnt + "/bucket", filler = mnt + "/filler";
  std::filesystem::create_directories(mnt);
  test::TmpfsMount tmpfs(mnt, 1 << 20);
  ASSERT_EQ(tmpfs.error(), "");
  auto s = protocol::open_bucket(dir);
  test::make_run(*s, RunConfig{}, test::tiny_v0());
  test::upload(*s, "w0", 1, 0, 64, test::tiny_delta(0.01f));
  test::upload(*s, "w1", 2, 0, 64, test::tiny_delta(0.02f));
  ProxyOptions po;
  po.bucket = dir;
  po.id = "p1";
  Proxy p(po);
  ASSERT_TRUE(p.poll_once());
  auto m1 = protocol::read_manifest(*s, 1).value();
  // One 4 KiB tmpfs page each for the payload and the manifest of the next version.
  ASSERT_LT(m1.payload_size, 4096u);
  ASSERT_LT(s->head(protocol::manifest_key(1)).value().size, 3000u);

  // The disk is full: the payload cannot be written. The proxy reports it, reloads, polls on.
  test::upload(*s, "w0", 3, 1, 64, test::tiny_delta(0.03f));
  test::upload(*s, "w1", 4, 1, 64, test::tiny_delta(0.04f));
  const size_t filled = test::fill_disk(filler);
  ASSERT_GT(filled, 0u);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(p.poll_once());
  EXPECT_EQ(p.version(), 1);
  expect_bucket(*s, dir, 1, 1);
  // What it logged: the store's error names the object, the cause and what to do.
  Status st = s->put("probe", "x");
  EXPECT_EQ(st.code(), StatusCode::kIOError) << st.to_string();
  for (const std::string& want : {dir + "/probe", std::string("No space left on device"), std::string("free space")})
    EXPECT_NE(st.message().find(want), std::string::npos) << want << " not in: " << st.message();

  // Room for the payload and the manifest, not for LATEST: version 2 is committed by its
  // manifest. The proxy must not die trying to bring LATEST up (it used to throw).
  ASSERT_TRUE(test::leave_free_pages(filler, filled, 2));
  EXPECT_FALSE(p.poll_once());
  EXPECT_EQ(p.version(), 2);
  expect_bucket(*s, dir, 2, 1);
  EXPECT_EQ(folded(*s, 2), (std::vector<std::string>{id("w0", 3), id("w1", 4)}));
  EXPECT_FALSE(p.poll_once()) << "nothing new to fold";

  // Space again: the next version is published whole, LATEST with it.
  std::filesystem::remove(filler);
  test::upload(*s, "w0", 5, 2, 64, test::tiny_delta(0.05f));
  ASSERT_TRUE(p.poll_once());
  EXPECT_EQ(p.version(), 3);
  expect_bucket(*s, dir, 3, 3);
  EXPECT_EQ(folded(*s, 3), (std::vector<std::string>{id("w0", 5)}));
  auto r = protocol::verify_run(*s);
  EXPECT_EQ(r.updates_folded, 5) << r.summary();  // every update once: verify_run checks no id is folded twice
}
