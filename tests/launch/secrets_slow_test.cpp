// Secrets are never printed nor stored: a small signed run (keygen; the proxy on a non-local
// address with BRL_PROXY_TOKEN, asked with no, a wrong and the right token; two workers with
// a signing key; S3 credentials in every process's environment, and one S3 command sent to
// a server that refuses it), then every log file, every object in the bucket and every file
// the run left anywhere in its folder is searched for the token, the AWS secret and session
// token, and the private key (its PEM body, its seed in hex and base64): none may appear.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "../obs/http_client.h"
#include "async_util.h"
#include "protocol/bucket.h"
#include "protocol/verify.h"
#include "util/hash.h"

using namespace brl;

namespace {

std::string random_text(std::mt19937_64& rng, size_t n, const std::string& alphabet) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
  return s;
}

}  // namespace

TEST(Secrets, NoTokenKeyOrCredentialInAnyLogOrObject) {
  test::TempDir tmp;
  std::mt19937_64 rng(std::random_device{}());
  const std::string alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  const std::string token = random_text(rng, 32, "0123456789abcdef"), aws_secret = random_text(rng, 40, alnum + "+/"),
                    aws_session = random_text(rng, 64, alnum);
  setenv("BRL_PROXY_TOKEN", token.c_str(), 1);
  setenv("AWS_ACCESS_KEY_ID", ("AKIA" + random_text(rng, 16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")).c_str(), 1);
  setenv("AWS_SECRET_ACCESS_KEY", aws_secret.c_str(), 1);
  setenv("AWS_SESSION_TOKEN", aws_session.c_str(), 1);

  std::filesystem::create_directories(tmp.path / "keys");
  ASSERT_EQ(test::run_to_end({"keygen", "--out", tmp.str("keys/w")}, tmp.str("keygen.log")), 0)
      << test::read_text(tmp.str("keygen.log"));
  std::string pem = test::read_text(tmp.str("keys/w.pem")), pub = test::read_text(tmp.str("keys/w.pub")), body;
  for (size_t a = 0, b; a < pem.size(); a = b + 1) {
    b = pem.find('\n', a);
    if (b == std::string::npos) b = pem.size();
    if (pem.compare(a, 5, "-----") != 0) body += pem.substr(a, b - a);
  }
  auto der = base64_decode(body);
  ASSERT_TRUE(der && der->size() >= 32) << pem;
  const std::string seed = der->substr(der->size() - 32);  // PKCS#8: the 32-byte seed comes last
  while (!pub.empty() && pub.back() == '\n') pub.pop_back();

  RunConfig cfg = test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out"));
  cfg.security.allowed_keys = {pub};
  test::Cluster c;
  c.workers = 2;
  c.dir = tmp.str();
  c.bucket = test::init_bucket(tmp, cfg);
  const int port = test::free_port();
  c.proxy_extra = {"--http", "0.0.0.0:" + std::to_string(port)};
  c.worker_extra = {"--signing-key", tmp.str("keys/w.pem")};
  c.start_all();
  test::RawResponse ok;
  for (int i = 0; i < 100 && ok.status != 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ok = test::http_get(port, "/status", "Authorization: Bearer " + token + "\r\n");
  }
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(test::http_get(port, "/metrics").status, 401);
  EXPECT_EQ(test::http_get(port, "/metrics", "Authorization: Bearer " + token.substr(1) + "x\r\n").status, 401);
  EXPECT_EQ(test::http_get(port, "/metrics", "Authorization: Basic " + base64_encode("me:" + token) + "\r\n").status,
            200);
  std::this_thread::sleep_for(std::chrono::seconds(10));
  // An S3 client error path, with the credentials: the proxy's HTTP server is no S3 server.
  setenv("AWS_ENDPOINT_URL", ("http://127.0.0.1:" + std::to_string(port)).c_str(), 1);
  EXPECT_NE(test::run_to_end({"bucket", "ls", "s3://brl-secrets/run"}, tmp.str("s3-ls.log")), 0);
  unsetenv("AWS_ENDPOINT_URL");
  c.stop_all();
  for (const auto& cmd : {"verify", "status"})
    test::run_to_end({cmd, "--bucket", c.bucket}, tmp.str(std::string(cmd) + ".log"));

  // The run was real: signed updates folded into versions.
  auto s = protocol::open_bucket(c.bucket);
  auto v = protocol::verify_run(*s);
  EXPECT_TRUE(v.ok()) << v.summary();
  EXPECT_GE(v.newest, 2) << v.summary();
  EXPECT_EQ(protocol::read_manifest(*s, v.newest).value().updates.at(0).signer, pub);

  const std::vector<std::pair<std::string, std::string>> secrets{
      {"BRL_PROXY_TOKEN", token},
      {"AWS_SECRET_ACCESS_KEY", aws_secret},
      {"AWS_SESSION_TOKEN", aws_session},
      {"private key PEM body", body},
      {"private key seed (hex)", to_hex(reinterpret_cast<const unsigned char*>(seed.data()), seed.size())},
      {"private key seed (base64)", base64_encode(seed)}};
  auto found = test::where_found(secrets, tmp.path, nullptr, tmp.path / "keys" / "w.pem");
  for (auto& h : found.hits) ADD_FAILURE() << h;
  // The search sees what it should: the public key is in the worker's log and the manifests.
  EXPECT_GE(test::where_found({{"public key", pub}}, tmp.path, nullptr, tmp.path / "keys" / "w.pub").hits.size(), 3u);
  EXPECT_GE(found.logs, 6);  // keygen, proxy, w0, w1, s3-ls, verify, status
  EXPECT_GT(found.files, 20);
  std::printf("searched %d files (%d logs, the bucket's objects among them) for %zu secrets: %zu found\n", found.files,
              found.logs, secrets.size(), found.hits.size());
}
