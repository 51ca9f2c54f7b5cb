// A worker learns that the proxy rejected its update: from the manifests of the versions it
// adopts (their `rejected` list names worker, id and reason), it logs the rejection, counts it
// in its summary and sends it in its heartbeat (updates_rejected, last_error). Before, only the
// proxy knew. Setting: sync mode with max_update_norm so small that every delta is rejected;
// a rejected round still publishes a version, which the worker adopts at the barrier.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "proxy/proxy.h"
#include "worker/worker.h"
#include "../launch/async_util.h"
#include "../proxy/proxy_util.h"
#include "protocol/layout.h"
#include "protocol/records.h"

using namespace brl;

TEST(WorkerRejection, WorkerReadsItsRejectionsFromTheManifests) {
  test::TempDir tmp;
  RunConfig cfg = test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out"));
  cfg.sync.mode = SyncMode::sync;
  cfg.sync.sync_steps = 1;
  cfg.aggregation.max_update_norm = 1e-9;  // every delta of a step is larger
  cfg.grpo.weight_decay = 0.1;             // moves LoRA A every step even when no group has reward variance
  const std::string bucket = test::init_bucket(tmp, cfg);

  std::atomic<bool> done{false};
  proxy::Proxy proxy(test::proxy_options(bucket, "p"));
  std::thread proxy_thread([&] {
    while (!done.load()) {
      proxy.poll_once();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  worker::WorkerOptions o = test::worker_options(tmp, bucket, "wa");
  o.max_steps = 2;
  std::atomic<bool> stop{false};
  auto sum = worker::run_worker(o, stop);
  done = true;
  proxy_thread.join();

  EXPECT_GE(sum.updates, 2);
  EXPECT_GE(sum.adopted, 1);
  EXPECT_GE(sum.rejected, 1);  // the first update's rejection, read from the version it adopted
  EXPECT_NE(sum.last_rejection.find("norm: |delta|"), std::string::npos) << sum.last_rejection;
  EXPECT_GE(proxy.counters().rejected_by_reason.count("norm"), 1u);
  auto s = protocol::open_bucket(bucket);
  auto hb = protocol::Heartbeat::parse(s->get(protocol::heartbeat_key("wa")).value(), "hb").value();
  EXPECT_GE(hb.updates_rejected, 1);
  EXPECT_NE(hb.last_error.find("rejected update"), std::string::npos) << hb.last_error;
}
