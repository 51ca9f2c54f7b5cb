// Chaos on the real S3 server (Ceph RGW; scripts/s3-server.sh): as chaos_slow_test, shorter,
// with every process talking SigV4; then no log file and no object of the run holds the
// S3 secret key.
#include <chrono>
#include <cstdlib>

#include "chaos_util.h"

using namespace brl;

TEST(ChaosS3, KillNineAnyProcessAndTheS3BucketStillVerifies) {
  for (const char* v : {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "BRL_S3_TEST_BUCKET"})
    ASSERT_TRUE(std::getenv(v) && *std::getenv(v)) << v << " is not set: run scripts/s3-server.sh start && source .cache/s3/env.sh";
  std::string url = "s3://" + std::string(std::getenv("BRL_S3_TEST_BUCKET")) + "/brl-chaos-test-" + std::to_string(getpid()) +
                    "-" + std::to_string(std::chrono::system_clock::now().time_since_epoch().count() % 1000000007);
  test::TempDir tmp;
  test::chaos_case(tmp, url, 30, 20261204, 10);
  auto s = protocol::open_bucket(url);
  auto found = test::where_found({{"AWS_SECRET_ACCESS_KEY", std::getenv("AWS_SECRET_ACCESS_KEY")}}, tmp.path, s.get());
  for (auto& h : found.hits) ADD_FAILURE() << h;
  EXPECT_GT(found.objects, 20);
  EXPECT_GE(found.logs, 4);
}
