// The S3 backend against a real server (Ceph RGW from scripts/s3-server.sh): the shared
// conformance suite, multipart uploads, wrong credentials, an unreachable server, and a
// fault-injecting TCP proxy (resets, hangs, truncated answers, a server stopped mid-test).
// Needs: scripts/s3-server.sh start && source .cache/s3/env.sh (scripts/test.sh does both).
// Without those variables every test here fails with that hint; it never skips.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>

#include "conformance.h"
#include "store/s3_store.h"
#include "tcp_fault_proxy.h"
#include "util/hash.h"

using namespace brl;
using namespace brl::store;

namespace {

const char* kNeeded[] = {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "BRL_S3_TEST_BUCKET"};

std::string missing_env() {
  std::string m;
  for (const char* v : kNeeded)
    if (!std::getenv(v) || !*std::getenv(v)) m += std::string(m.empty() ? "" : ", ") + v;
  return m;
}

#define REQUIRE_S3_ENV()                                                                      \
  do {                                                                                        \
    std::string m = missing_env();                                                            \
    ASSERT_TRUE(m.empty()) << "S3 test server settings missing (" << m                        \
                           << "): run scripts/s3-server.sh start && source .cache/s3/env.sh"; \
  } while (0)

// One prefix per test-binary run, so runs never see each other's objects.
const std::string& run_prefix() {
  static const std::string p = "brl-s3-test-" + std::to_string(::getpid()) + "-" +
                               std::to_string(std::chrono::system_clock::now().time_since_epoch().count() % 1000000007);
  return p;
}

std::string bucket() { return std::getenv("BRL_S3_TEST_BUCKET") ? std::getenv("BRL_S3_TEST_BUCKET") : ""; }

// The process environment with some variables replaced.
EnvLookup env_with(std::map<std::string, std::string> over) {
  return [over](const std::string& name) -> std::optional<std::string> {
    if (auto it = over.find(name); it != over.end()) return it->second;
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

int endpoint_port() {
  std::string e = std::getenv("AWS_ENDPOINT_URL");
  return std::atoi(e.substr(e.rfind(':') + 1).c_str());
}

std::unique_ptr<ObjectStore> open_test_store(const std::string& sub, const S3Options& opt = {},
                                             const EnvLookup& env = process_env()) {
  return open_s3_store("s3://" + bucket() + "/" + run_prefix() + "/" + sub, opt, env);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST(S3Env, ServerSettingsPresent) { REQUIRE_S3_ENV(); }

BRL_STORE_CONFORMANCE(S3, [](const std::string& unique_prefix) -> std::unique_ptr<brl::store::ObjectStore> {
  std::string m = missing_env();
  if (!m.empty()) {
    ADD_FAILURE() << "S3 test server settings missing (" << m
                  << "): run scripts/s3-server.sh start && source .cache/s3/env.sh";
    return nullptr;
  }
  return open_test_store(unique_prefix);
})

TEST(S3Store, MultipartOddSizeSmallPartsAndRanges) {
  REQUIRE_S3_ENV();
  S3Options opt;
  opt.part_size = 5u << 20;
  opt.multipart_threshold = 5u << 20;
  auto store = open_test_store("multipart", opt);
  const size_t size = (23u << 20) + 12345;  // 5 parts, the last one short
  const std::string data = conformance::pattern_bytes(size, 7);
  const std::string src = ::testing::TempDir() + "/brl-s3-mp-in.bin", dst = ::testing::TempDir() + "/brl-s3-mp-out.bin";
  std::ofstream(src, std::ios::binary).write(data.data(), static_cast<std::streamsize>(size));
  Status st = store->put_file("obj", src);
  ASSERT_TRUE(st) << st.to_string();
  auto h = store->head("obj");
  ASSERT_TRUE(h) << h.status().to_string();
  EXPECT_EQ(h->size, size);
  EXPECT_NE(h->etag.find("-5"), std::string::npos) << "a 5-part upload has a multipart ETag, got " << h->etag;
  ASSERT_TRUE(store->get_file("obj", dst));
  EXPECT_EQ(sha256_file_hex(dst), sha256_hex(data));
  GetOptions g;
  g.offset = size - 100;
  auto tail = store->get("obj", g);
  ASSERT_TRUE(tail);
  EXPECT_EQ(*tail, data.substr(size - 100));
  // Create-only on an existing key is refused before any part is sent.
  PutOptions once;
  once.create_only = true;
  EXPECT_EQ(store->put_file("obj", src, once).code(), StatusCode::kPreconditionFailed);
  EXPECT_TRUE(store->remove("obj"));
  std::remove(src.c_str());
  std::remove(dst.c_str());
}

TEST(S3Store, WrongSecretIsAccessDeniedAtOnceWithoutSecrets) {
  REQUIRE_S3_ENV();
  const std::string wrong = "definitely-not-the-secret-0123456789";
  auto store = open_test_store("denied", {}, env_with({{"AWS_SECRET_ACCESS_KEY", wrong}}));
  auto t0 = std::chrono::steady_clock::now();
  Status st = store->put("k", "v");
  EXPECT_LT(seconds_since(t0), 2.0) << "403 must not be retried";
  ASSERT_EQ(st.code(), StatusCode::kAccessDenied) << st.to_string();
  const std::string msg = st.message();
  EXPECT_NE(msg.find(bucket()), std::string::npos) << msg;
  EXPECT_NE(msg.find("AWS_SECRET_ACCESS_KEY"), std::string::npos) << msg;
  EXPECT_NE(msg.find("SignatureDoesNotMatch"), std::string::npos) << msg;
  EXPECT_EQ(msg.find(wrong), std::string::npos) << "the secret leaked into: " << msg;
  EXPECT_EQ(msg.find(std::getenv("AWS_ACCESS_KEY_ID")), std::string::npos) << "the key id leaked into: " << msg;
  auto unknown = open_test_store("denied", {}, env_with({{"AWS_ACCESS_KEY_ID", "AKIDUNKNOWNTOTHESERVER"}}));
  EXPECT_EQ(unknown->get("k").status().code(), StatusCode::kAccessDenied);
}

TEST(S3Store, MissingBucketIsNotFoundNamingIt) {
  REQUIRE_S3_ENV();
  auto store = open_s3_store("s3://no-such-bucket-brl-test/x", {}, process_env());
  auto r = store->get("k");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("no-such-bucket-brl-test"), std::string::npos) << r.status().to_string();
}

TEST(S3Store, UnreachableServerGivesUpWithinTheBound) {
  REQUIRE_S3_ENV();
  int port;
  {
    brl::testing::TcpFaultProxy probe(1, {});  // reserve a free port, then free it
    port = probe.port();
  }
  S3Options opt;
  opt.max_attempts = 6;
  opt.max_retry_s = 3;
  opt.timeouts.connect_ms = 500;
  auto store =
      open_test_store("unreachable", opt, env_with({{"AWS_ENDPOINT_URL", "http://127.0.0.1:" + std::to_string(port)}}));
  auto t0 = std::chrono::steady_clock::now();
  Status st = store->put("k", "v");
  double took = seconds_since(t0);
  EXPECT_EQ(st.code(), StatusCode::kTransient) << st.to_string();
  EXPECT_NE(st.message().find("gave up after"), std::string::npos) << st.message();
  EXPECT_LT(took, 4.0);
}

TEST(S3Store, RetriesRecoverFromResetsHangsAndTruncation) {
  REQUIRE_S3_ENV();
  brl::testing::TcpFaultProxy proxy(endpoint_port(), {0.15, 0.05, 0.15}, /*seed=*/1234);
  S3Options opt;
  opt.max_attempts = 10;
  opt.base_backoff_ms = 20;
  opt.max_backoff_ms = 200;
  opt.timeouts.low_speed_s = 1;  // a hung request is abandoned after ~1 s
  opt.timeouts.low_speed_bytes = 1;
  auto store = open_test_store("faults", opt,
                               env_with({{"AWS_ENDPOINT_URL", "http://127.0.0.1:" + std::to_string(proxy.port())}}));
  for (int i = 0; i < 20; ++i) {
    std::string key = "obj" + std::to_string(i), data = conformance::pattern_bytes(1000 + 5000 * i, i);
    Status st = store->put(key, data);
    ASSERT_TRUE(st) << i << ": " << st.to_string();
    auto r = store->get(key);
    ASSERT_TRUE(r) << i << ": " << r.status().to_string();
    EXPECT_EQ(sha256_hex(*r), sha256_hex(data));
  }
  auto l = store->list_all("");
  ASSERT_TRUE(l) << l.status().to_string();
  EXPECT_EQ(l->size(), 20u);
  EXPECT_GE(proxy.injected(), 5) << "the proxy injected too few faults to show anything (" << proxy.requests()
                                 << " requests)";
  proxy.set_faults({});
  for (auto& o : *l) EXPECT_TRUE(store->remove(o.key));
}

// The first answer is cut off after the server applied the create-only PUT; the retry meets
// the object (412). Ours (same bytes): OK, or a worker would upload its progress twice.
// Someone else's (other bytes): the precondition failure stands.
TEST(S3Store, CreateOnlyPutWhoseAnswerWasLostIsOursOnlyWithOurBytes) {
  REQUIRE_S3_ENV();
  brl::testing::TcpFaultProxy::Faults cut_first;
  cut_first.truncate = 1;
  cut_first.max_faults = 1;
  brl::testing::TcpFaultProxy proxy(endpoint_port(), cut_first);
  S3Options opt;
  opt.base_backoff_ms = 20;
  auto store = open_test_store("ambiguous", opt,
                               env_with({{"AWS_ENDPOINT_URL", "http://127.0.0.1:" + std::to_string(proxy.port())}}));
  PutOptions once;
  once.create_only = true;
  Status st = store->put("mine", "update 1 of w0", once);
  EXPECT_TRUE(st) << st.to_string();
  EXPECT_EQ(proxy.counts().truncate, 1);
  EXPECT_EQ(proxy.requests(), 3) << "PUT (cut off), PUT (412), HEAD (our MD5), nothing more";

  auto direct = open_test_store("ambiguous");
  ASSERT_TRUE(direct->put("theirs", "update 1 of w1"));
  cut_first.max_faults = 2;  // one more cut (the count of faults injected goes on)
  proxy.set_faults(cut_first);
  st = store->put("theirs", "update 1 of w0", once);
  EXPECT_EQ(st.code(), StatusCode::kPreconditionFailed) << st.to_string();
  EXPECT_EQ(proxy.counts().truncate, 2);
  EXPECT_EQ(*direct->get("theirs"), "update 1 of w1");
  EXPECT_EQ(*direct->get("mine"), "update 1 of w0");
  EXPECT_TRUE(direct->remove("mine"));
  EXPECT_TRUE(direct->remove("theirs"));
}

TEST(S3Store, ServerStoppedMidTestRetriesThenClearError) {
  REQUIRE_S3_ENV();
  auto proxy = std::make_unique<brl::testing::TcpFaultProxy>(endpoint_port(), brl::testing::TcpFaultProxy::Faults{});
  S3Options opt;
  opt.max_attempts = 8;
  opt.max_retry_s = 3;
  opt.timeouts.connect_ms = 500;
  auto store = open_test_store("stopped", opt,
                               env_with({{"AWS_ENDPOINT_URL", "http://127.0.0.1:" + std::to_string(proxy->port())}}));
  ASSERT_TRUE(store->put("k", "before"));
  proxy->stop();  // the "server" goes away, live keep-alive connection included
  auto t0 = std::chrono::steady_clock::now();
  auto r = store->get("k");
  double took = seconds_since(t0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::kTransient) << r.status().to_string();
  EXPECT_NE(r.status().message().find("gave up after"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("GET s3://" + bucket()), std::string::npos) << r.status().message();
  EXPECT_GT(took, 0.05) << "it should have retried with backoff";
  EXPECT_LT(took, 4.0);
  // The object is there through the real endpoint.
  auto direct = open_test_store("stopped");
  EXPECT_EQ(*direct->get("k"), "before");
  EXPECT_TRUE(direct->remove("k"));
}
