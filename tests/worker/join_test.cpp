// The base model's local cache (worker::fetch_base) when several processes start together, as
// the workers and evaluator of `bucketrl run` / `demo` do on one machine: the base is
// downloaded once and every caller gets the same whole copy; a copy without its marker (a
// killed download of an older version) is replaced; a holder of the download lock that is
// killed halfway stalls no one. Every store call is slowed (store::FaultStore, hangs only) so that
// the callers overlap for certain, and counted; the copies are checked against run.json's sha256s.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "protocol/bucket.h"
#include "store/fault_store.h"
#include "util/file.h"
#include "util/hash.h"
#include "worker/join.h"
#include "../launch/async_util.h"

using namespace brl;
namespace fs = std::filesystem;

namespace {

struct BaseRun {
  test::TempDir tmp;
  std::string bucket;
  protocol::RunDescription run;
  // Every caller's store: each call takes 100 ms (so callers overlap for certain) and is counted.
  std::unique_ptr<store::FaultStore> slow_store;
  BaseRun() {
    bucket = test::init_bucket(tmp, test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out")));
    run = protocol::read_run(*protocol::open_bucket(bucket)).value();
    store::FaultOptions slow;
    slow.hang_rate = 1;
    slow.hang_ms = 100;
    slow_store = std::make_unique<store::FaultStore>(protocol::open_bucket(bucket), slow);
  }
  std::string cache() const { return tmp.str("cache"); }
  std::string fetch() const { return worker::fetch_base(*slow_store, run, cache()); }
  int calls() const { return slow_store->counts().calls; }  // fetch_base's are its base files' gets
  // Every base file in dir, with run.json's sha256.
  void expect_whole(const std::string& dir) const {
    ASSERT_FALSE(run.base_files.empty());
    for (auto& f : run.base_files) EXPECT_EQ(sha256_file_hex(dir + "/" + f.name), f.sha256) << f.name;
  }
  int leftovers() const {  // temporary download folders left in the cache
    int n = 0;
    for (auto& e : fs::directory_iterator(cache()))
      if (e.path().filename().string().rfind(".tmp-", 0) == 0) ++n;
    return n;
  }
};

}  // namespace

TEST(FetchBase, CallersStartingTogetherDownloadTheBaseOnce) {
  BaseRun r;
  std::vector<std::string> dirs(4);
  std::vector<std::thread> ts;
  for (size_t i = 0; i < dirs.size(); ++i) ts.emplace_back([&, i] { dirs[i] = r.fetch(); });
  for (auto& t : ts) t.join();
  EXPECT_EQ(r.calls(), static_cast<int>(r.run.base_files.size()));  // one download, not four
  for (auto& d : dirs) EXPECT_EQ(d, dirs[0]);
  r.expect_whole(dirs[0]);
  EXPECT_EQ(r.leftovers(), 0);
  EXPECT_EQ(r.fetch(), dirs[0]);  // and a later caller uses the cache
  EXPECT_EQ(r.calls(), static_cast<int>(r.run.base_files.size()));
}

TEST(FetchBase, ACopyWithoutItsMarkerIsReplaced) {
  BaseRun r;
  const fs::path dir = fs::path(r.cache()) / r.run.base_sha256.substr(0, 16);
  fs::create_directories(dir);
  test::write_file((dir / "model.safetensors").string(), "torn");  // a killed older download
  EXPECT_EQ(r.fetch(), dir.string());
  EXPECT_EQ(r.calls(), static_cast<int>(r.run.base_files.size()));
  r.expect_whole(dir.string());
}

TEST(FetchBase, AKilledHolderOfTheDownloadLockStallsNoOne) {
  BaseRun r;
  fs::create_directories(r.cache());
  const std::string lock = r.cache() + "/.lock-" + r.run.base_sha256.substr(0, 16);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // takes the lock as a downloading process would, then hangs until killed
    FileLock held(lock);
    if (write(ready[1], "x", 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  std::atomic<bool> done{false};
  std::string dir;
  std::thread t([&] {
    dir = r.fetch();
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(done.load()) << "fetched while another process held the download lock";
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  t.join();
  EXPECT_TRUE(done.load());
  r.expect_whole(dir);
  close(ready[0]);
  close(ready[1]);
}
