// The one-machine run with the bucket on the real S3 server (Ceph RGW; scripts/s3-server.sh):
// every process talks to it through SigV4, nothing else is shared. Versions are published in
// bf16 here (float32 in the directory-bucket test), so workers train from rounded versions.
#include "local_run_check.h"

TEST(LocalRunS3, TwoWorkersAndAProxyTrainThroughS3) {
  brl::test::two_workers_train_through(brl::test::s3_test_url("brl-async-test"), "bfloat16");
}
