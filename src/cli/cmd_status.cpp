// `bucketrl status` and `bucketrl logs`: a run's state and its workers' metrics lines, read
// from the bucket alone (so they work while the proxy is down).
#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/command.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "protocol/status.h"

using namespace brl;

namespace {

cli::RunFn setup_status(CLI::App& app) {
  static std::string bucket;
  static int recent = 10;
  static bool json = false;
  app.add_option("--bucket", bucket, "s3://bucket/prefix or a directory")->required();
  app.add_option("--recent", recent, "versions to show")->capture_default_str();
  app.add_flag("--json", json, "print JSON");
  return [] {
    auto store = protocol::open_bucket(bucket);
    auto st = protocol::run_status(*store, recent);
    std::fputs(json ? (st.dump(1) + "\n").c_str() : protocol::format_status(st).c_str(), stdout);
    return 0;
  };
}
cli::Register status_reg("status", "a run's versions, evaluations and worker health, from the bucket", setup_status);

cli::RunFn setup_logs(CLI::App& app) {
  static std::string bucket, worker;
  static bool follow = false;
  app.add_option("--bucket", bucket, "s3://bucket/prefix or a directory")->required();
  app.add_option("--worker", worker, "only this worker");
  app.add_flag("-f,--follow", follow, "keep printing new lines");
  return [] {
    auto store = protocol::open_bucket(bucket);
    const auto& stop = cli::stop_on_signals();
    std::string prefix = worker.empty() ? protocol::all_logs_prefix() : protocol::logs_prefix(worker);
    std::map<std::string, std::string> after;  // per worker folder: the last batch printed
    do {
      auto objs = store->list_all(prefix).value();
      for (auto& o : objs) {
        std::string dir = o.key.substr(0, o.key.rfind('/'));
        if (o.key <= after[dir]) continue;
        if (auto body = store->get(o.key); body) std::fwrite(body->data(), 1, body->size(), stdout);
        after[dir] = o.key;
      }
      std::fflush(stdout);
      if (follow) std::this_thread::sleep_for(std::chrono::seconds(1));
    } while (follow && !stop.load());
    return 0;
  };
}
cli::Register logs_reg("logs", "print workers' metrics lines (JSONL) from the bucket", setup_logs);

}  // namespace
