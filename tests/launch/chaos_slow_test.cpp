// Chaos on a directory bucket: the proxy and three workers (the real bucketrl executable)
// train the learnable task while a seeded loop SIGKILLs one of them every moment or so (at
// random, or aimed at the moment an update or a version is being written) and restarts it.
// After a clean stop, from the bucket alone: one verified chain, nothing folded twice,
// every update accounted for (folded or rejected once, or pending), and training progressed;
// and the restarted workers resumed their trainer state. A second case restarts every worker
// on an empty disk, as a replaced spot machine: it resumes from the bucket's copy.
//
// The soak (scripts/chaos.sh) runs this test with
//   BRL_CHAOS_SECONDS  how long to kill (default 40)
//   BRL_CHAOS_BUCKET   a fresh bucket URL (default: a directory in a temporary folder)
//   BRL_CHAOS_SEED     the victims' and delays' seed (default 20261203)
//   BRL_CHAOS_NEW_MACHINES=1  every restarted worker starts with an empty disk
#include <gtest/gtest.h>

#include <cstdlib>

#include "chaos_util.h"

using namespace brl;

namespace {

double env_or(const char* name, double def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atof(v) : def;
}

}  // namespace

// As above, but every restarted worker comes back with an empty disk, as a spot machine's
// replacement does: it resumes its trainer state from the bucket. (Without that copy the
// newest adapter's LoRA B norm was 11-13 here against 6-7: BENCHMARKS.md.)
TEST(Chaos, RestartsOnNewMachinesResumeFromTheBucket) {
  test::TempDir tmp;
  test::chaos_case(tmp, "", 40, 20261206, 15, /*new_machines=*/true);
}

TEST(Chaos, KillNineAnyProcessManyTimesAndTheBucketStillVerifies) {
  test::TempDir tmp;
  const char* url = std::getenv("BRL_CHAOS_BUCKET");
  const double seconds = env_or("BRL_CHAOS_SECONDS", 40);
  test::chaos_case(tmp, url ? url : "", seconds, static_cast<uint64_t>(env_or("BRL_CHAOS_SEED", 20261203)),
                   static_cast<int>(seconds * 15 / 40), env_or("BRL_CHAOS_NEW_MACHINES", 0) != 0);
}
