// Signed updates end to end: `bucketrl keygen` (the real executable) writes a 0600 private
// key and a one-line public key and prints no private bytes; `bucketrl init` (init_run) reads
// [security] allowed_keys_file into run.json; a worker without a key or with a key not on
// the list refuses to start, naming the fix; a worker with an allowed key (from
// BRL_SIGNING_KEY_FILE) uploads signed updates the real Proxy folds.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <functional>

#include "proxy/proxy.h"
#include "launch/run_setup.h"
#include "worker/worker.h"
#include "../launch/async_util.h"
#include "../proxy/proxy_util.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "protocol/update.h"
#include "util/ed25519.h"
#include "util/error.h"

using namespace brl;
using test::error_of;

namespace {

// `bucketrl keygen --out prefix`; returns what it printed.
std::string keygen(const std::string& prefix, const std::string& log) {
  int rc = std::system((std::string(BRL_EXE) + " keygen --out " + prefix + " > " + log + " 2>&1").c_str());
  EXPECT_EQ(rc, 0) << test::read_text(log);
  return test::read_text(log);
}

}  // namespace

TEST(WorkerSigning, KeygenInitWorkerProxy) {
  test::TempDir tmp;
  // keygen: files, modes, output.
  std::string out = keygen(tmp.str("alice"), tmp.str("keygen.log"));
  keygen(tmp.str("bob"), tmp.str("keygen2.log"));
  struct stat st {};
  ASSERT_EQ(stat(tmp.str("alice.pem").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string alice_pub = test::read_text(tmp.str("alice.pub"));
  auto alice = ed25519::SigningKey::load(tmp.str("alice.pem"));
  EXPECT_EQ(alice_pub, ed25519::format_public_key(alice.public_key()) + "\n");
  EXPECT_NE(out.find(alice_pub.substr(0, alice_pub.size() - 1)), std::string::npos) << out;
  EXPECT_EQ(out.find("PRIVATE KEY"), std::string::npos) << out;
  const std::string pem = test::read_text(tmp.str("alice.pem"));
  EXPECT_EQ(out.find(pem.substr(28, 30)), std::string::npos) << out;  // no line of the key body
  EXPECT_NE(std::system((std::string(BRL_EXE) + " keygen --out " + tmp.str("alice") + " > /dev/null 2>&1").c_str()), 0)
      << "keygen overwrote a key";

  // init: the allow-list comes from a file and is stored in run.json.
  RunConfig cfg = test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out"));
  std::ofstream(tmp.str("allowed")) << "# team\n" << alice_pub;
  cfg.security.allowed_keys_file = tmp.str("allowed");
  const std::string bucket = tmp.str("bucket");
  {
    auto s = protocol::open_bucket(bucket);
    auto run = launch::init_run(*s, cfg);
    EXPECT_EQ(run.config["security"]["allowed_keys"],
              nlohmann::json::array({alice_pub.substr(0, alice_pub.size() - 1)}));
    EXPECT_EQ(run.config["security"]["allowed_keys_file"], "");
  }

  worker::WorkerOptions o = test::worker_options(tmp, bucket, "wa");
  o.max_steps = 1;
  std::atomic<bool> stop{false};
  unsetenv("BRL_SIGNING_KEY_FILE");
  std::string e = error_of([&] { worker::run_worker(o, stop); });
  EXPECT_NE(e.find("folds only signed updates"), std::string::npos) << e;
  EXPECT_NE(e.find("--signing-key"), std::string::npos) << e;
  o.signing_key = tmp.str("bob.pem");
  e = error_of([&] { worker::run_worker(o, stop); });
  EXPECT_NE(e.find("is not one of the run's 1 allowed keys"), std::string::npos) << e;
  o.signing_key = tmp.str("alice.pub");
  e = error_of([&] { worker::run_worker(o, stop); });
  EXPECT_NE(e.find("is a public key"), std::string::npos) << e;

  // The allowed key through the environment: one step, one signed update, folded.
  o.signing_key.clear();
  setenv("BRL_SIGNING_KEY_FILE", tmp.str("alice.pem").c_str(), 1);
  auto sum = worker::run_worker(o, stop);
  unsetenv("BRL_SIGNING_KEY_FILE");
  ASSERT_EQ(sum.updates, 1);
  auto s = protocol::open_bucket(bucket);
  auto objs = s->list_all(protocol::updates_prefix()).value();
  ASSERT_EQ(objs.size(), 1u);
  std::string body = s->get(objs[0].key).value();
  auto h = protocol::parse_update(body, objs[0].key).value().header;
  EXPECT_EQ(h.signer, ed25519::format_public_key(alice.public_key()));
  EXPECT_FALSE(protocol::check_update_signature(h, {alice.public_key()}));
  proxy::Proxy p(test::proxy_options(bucket, "p"));
  ASSERT_TRUE(p.poll_once());
  auto m = protocol::read_manifest(*s, 1).value();
  ASSERT_EQ(m.updates.size(), 1u);
  EXPECT_EQ(m.updates[0].signer, h.signer);
}
