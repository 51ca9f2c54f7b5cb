// The base model's local cache (worker::fetch_base) when several processes start together, as
// the workers and evaluator of `bucketrl run` / `demo` do on one machine: the base is
// downloaded once and every caller gets the same whole copy; a copy without its marker (a
// killed download of an older version) is replaced; a holder of the download lock that is
// killed halfway stalls no one. Downloads are slowed by a store decorator so that the callers
// overlap for certain; the copies are checked against run.json's sha256s.
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
#include "protocol/layout.h"
#include "util/file.h"
#include "util/hash.h"
#include "worker/join.h"
#include "../launch/async_util.h"

using namespace brl;
namespace fs = std::filesystem;

namespace {

// Counts the base files fetched through it (over every caller) and makes each fetch slow.
class SlowCountingStore : public store::ObjectStore {
 public:
  SlowCountingStore(std::shared_ptr<store::ObjectStore> inner, std::atomic<int>* base_gets)
      : inner_(std::move(inner)), base_gets_(base_gets) {}
  Status put(const std::string& k, const std::string& d, const store::PutOptions& o) override {
    return inner_->put(k, d, o);
  }
  Status put_file(const std::string& k, const std::string& p, const store::PutOptions& o) override {
    return inner_->put_file(k, p, o);
  }
  Result<std::string> get(const std::string& k, const store::GetOptions& o) override { return inner_->get(k, o); }
  Status get_file(const std::string& k, const std::string& p) override {
    if (k.rfind(protocol::base_key(""), 0) == 0) {
      ++*base_gets_;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return inner_->get_file(k, p);
  }
  Result<store::ObjectInfo> head(const std::string& k) override { return inner_->head(k); }
  Result<store::ListPage> list(const store::ListOptions& o) override { return inner_->list(o); }
  Status remove(const std::string& k) override { return inner_->remove(k); }
  std::string describe() const override { return "slow(" + inner_->describe() + ")"; }

 private:
  std::shared_ptr<store::ObjectStore> inner_;
  std::atomic<int>* base_gets_;
};

struct BaseRun {
  test::TempDir tmp;
  std::string bucket;
  protocol::RunDescription run;
  BaseRun() {
    bucket = test::init_bucket(tmp, test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out")));
    run = protocol::read_run(*protocol::open_bucket(bucket)).value();
  }
  std::string cache() const { return tmp.str("cache"); }
  std::string fetch(std::atomic<int>* gets) const {
    SlowCountingStore s(protocol::open_bucket(bucket), gets);
    return worker::fetch_base(s, run, cache());
  }
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
  std::atomic<int> gets{0};
  std::vector<std::string> dirs(4);
  std::vector<std::thread> ts;
  for (size_t i = 0; i < dirs.size(); ++i) ts.emplace_back([&, i] { dirs[i] = r.fetch(&gets); });
  for (auto& t : ts) t.join();
  EXPECT_EQ(gets.load(), static_cast<int>(r.run.base_files.size()));  // one download, not four
  for (auto& d : dirs) EXPECT_EQ(d, dirs[0]);
  r.expect_whole(dirs[0]);
  EXPECT_EQ(r.leftovers(), 0);
  gets = 0;  // and a later caller uses the cache
  EXPECT_EQ(r.fetch(&gets), dirs[0]);
  EXPECT_EQ(gets.load(), 0);
}

TEST(FetchBase, ACopyWithoutItsMarkerIsReplaced) {
  BaseRun r;
  const fs::path dir = fs::path(r.cache()) / r.run.base_sha256.substr(0, 16);
  fs::create_directories(dir);
  test::write_file((dir / "model.safetensors").string(), "torn");  // a killed older download
  std::atomic<int> gets{0};
  EXPECT_EQ(r.fetch(&gets), dir.string());
  EXPECT_EQ(gets.load(), static_cast<int>(r.run.base_files.size()));
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
  std::atomic<int> gets{0};
  std::atomic<bool> done{false};
  std::string dir;
  std::thread t([&] {
    dir = r.fetch(&gets);
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
