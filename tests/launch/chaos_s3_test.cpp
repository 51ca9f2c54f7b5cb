// Chaos on the real S3 server (Ceph RGW; scripts/s3-server.sh): as chaos_slow_test, shorter,
// with every process talking SigV4; then no log file and no object of the run holds the
// S3 secret key.
#include <cstdlib>

#include "chaos_util.h"

using namespace brl;

TEST(ChaosS3, KillNineAnyProcessAndTheS3BucketStillVerifies) {
  std::string url = test::s3_test_url("brl-chaos-test");
  test::TempDir tmp;
  test::chaos_case(tmp, url, 30, 20261204, 10);
  auto s = protocol::open_bucket(url);
  auto found = test::where_found({{"AWS_SECRET_ACCESS_KEY", std::getenv("AWS_SECRET_ACCESS_KEY")}}, tmp.path, s.get());
  for (auto& h : found.hits) ADD_FAILURE() << h;
  EXPECT_GT(found.objects, 20);
  EXPECT_GE(found.logs, 4);
}
