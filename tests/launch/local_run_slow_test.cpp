// The one-machine run on a directory bucket (see local_run_check.h).
#include "local_run_check.h"

TEST(LocalRun, TwoWorkersAndAProxyTrainThroughADirectoryBucket) { brl::test::two_workers_train_through(""); }
