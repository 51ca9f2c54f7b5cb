// The one-machine run with the bucket on the real S3 server (Ceph RGW; scripts/s3-server.sh):
// every process talks to it through SigV4, nothing else is shared. Versions are published in
// bf16 here (float32 in the directory-bucket test), so workers train from rounded versions.
#include <chrono>
#include <cstdlib>

#include "local_run_check.h"

TEST(LocalRunS3, TwoWorkersAndAProxyTrainThroughS3) {
  for (const char* v : {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "BRL_S3_TEST_BUCKET"})
    ASSERT_TRUE(std::getenv(v) && *std::getenv(v)) << v << " is not set: run scripts/s3-server.sh start && source .cache/s3/env.sh";
  std::string prefix = "brl-async-test-" + std::to_string(getpid()) + "-" +
                       std::to_string(std::chrono::system_clock::now().time_since_epoch().count() % 1000000007);
  brl::test::two_workers_train_through("s3://" + std::string(std::getenv("BRL_S3_TEST_BUCKET")) + "/" + prefix, "bfloat16");
}
