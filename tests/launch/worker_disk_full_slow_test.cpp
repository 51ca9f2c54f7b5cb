// Disk full under a worker (issue 8): the real worker process on a directory bucket in a
// 16 MiB tmpfs, filled by a file beside the bucket. An upload that fails says why (the
// object, "No space left on device", what to do) and keeps its progress for the next one; a
// stop on a full disk retries, lands the last delta once space is back, or else exits
// non-zero naming the steps lost. Nothing is lost or counted twice: the steps in the update
// objects add up to the steps the worker reports (less those it reports lost). Needs root.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <regex>
#include <thread>

#include "../test_mounts.h"
#include "async_util.h"
#include "protocol/layout.h"
#include "protocol/update.h"

using namespace brl;
namespace fs = std::filesystem;

namespace {

// A worker alone on a bucket in a tmpfs (no proxy: its updates stay in the bucket to count).
struct FullDiskRun {
  test::TempDir tmp;
  std::string mnt = tmp.str("mnt"), bucket = mnt + "/bucket", filler = mnt + "/filler", log = tmp.str("w0.log");
  std::unique_ptr<test::TmpfsMount> tmpfs;
  std::unique_ptr<store::ObjectStore> store;
  test::Proc worker;

  // Mounts before anything starts threads (make_base runs torch): unshare moves one thread.
  void start() {
    fs::create_directories(mnt);
    tmpfs = std::make_unique<test::TmpfsMount>(mnt, 16 << 20);
    ASSERT_EQ(tmpfs->error(), "");
    RunConfig cfg = test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out"));
    test::init_bucket(tmp, cfg, bucket);
    store = protocol::open_bucket(bucket);
    worker = test::start(
        {"worker", "--bucket", bucket, "--id", "w0", "--threads", "1", "--cache-dir", tmp.str("cache")}, log);
  }
  ~FullDiskRun() {
    test::stop(worker, SIGKILL);
    tmpfs.reset();  // before TempDir removes the folder it is mounted on
  }
  size_t updates() { return store->list_all(protocol::updates_prefix() + "w0/").value().size(); }
  int64_t steps_in_bucket() {
    int64_t n = 0;
    for (auto& o : store->list_all(protocol::updates_prefix() + "w0/").value())
      n += protocol::parse_update(store->get(o.key).value(), o.key).value().header.steps;
    return n;
  }
  int failed_uploads() {
    std::string t = test::read_text(log);
    std::regex re("upload of update \\S+ failed");
    return static_cast<int>(std::distance(std::sregex_iterator(t.begin(), t.end(), re), std::sregex_iterator()));
  }
  // The number in group 1 of the first match of `pattern` in the log (-1 if none yet).
  int64_t reported(const std::string& pattern) {
    std::smatch m;
    std::string t = test::read_text(log);
    return std::regex_search(t, m, std::regex(pattern)) ? std::stoll(m[1]) : -1;
  }
};

bool wait_until(const std::function<bool()>& ok, double seconds) {
  for (auto t0 = std::chrono::steady_clock::now();
       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds;
       std::this_thread::sleep_for(std::chrono::milliseconds(100)))
    if (ok()) return true;
  return ok();
}

}  // namespace

TEST(WorkerDiskFull, FailedUploadsKeepTheProgressForTheNextOne) {
  if (auto why = test::why_no_root(); !why.empty()) GTEST_SKIP() << why;
  FullDiskRun r;
  r.start();
  ASSERT_TRUE(wait_until([&] { return r.updates() >= 2; }, 90)) << test::read_text(r.log);

  // Full: the uploads fail, each with the reason; the worker trains on.
  size_t filled = test::fill_disk(r.filler);
  ASSERT_GT(filled, 0u);
  ASSERT_TRUE(wait_until([&] { return r.failed_uploads() >= 2; }, 30)) << test::read_text(r.log);
  std::string log = test::read_text(r.log);
  std::smatch line;
  ASSERT_TRUE(std::regex_search(log, line, std::regex("upload of update \\S+ failed[^\n]*")));
  for (const std::string& want : {"cannot write '" + r.bucket + "/updates/w0/", std::string("No space left on device"),
                                  std::string("free space"), std::string("keeping the progress for the next sync")})
    EXPECT_NE(line.str().find(want), std::string::npos) << want << " not in: " << line.str();
  const size_t before = r.updates();

  // Space again: the next upload carries the steps of the failed ones.
  fs::remove(r.filler);
  ASSERT_TRUE(wait_until([&] { return r.updates() > before; }, 30)) << test::read_text(r.log);

  // Full at the stop: its upload fails, is retried, and lands once space is back.
  test::fill_disk(r.filler);
  const int failed = r.failed_uploads();
  // Steps after the last upload that landed, so the stop has some to upload (a stop right after
  // the recovery upload had none: the worker trains ~100 steps/s here, and no upload lands now).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(r.worker.pid, SIGTERM);
  ASSERT_TRUE(wait_until([&] { return r.failed_uploads() > failed; }, 30)) << test::read_text(r.log);
  fs::remove(r.filler);
  int st = 0;
  waitpid(r.worker.pid, &st, 0);
  r.worker.pid = -1;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st << "\n" << test::read_text(r.log);
  const int64_t steps = r.reported("worker: (\\d+) steps");
  ASSERT_GT(steps, 0) << test::read_text(r.log);
  EXPECT_EQ(r.steps_in_bucket(), steps) << "steps uploaded vs steps trained";
  std::printf("%d failed uploads, %zu updates, %lld steps, all in the bucket\n", r.failed_uploads(), r.updates(),
              static_cast<long long>(steps));
}

TEST(WorkerDiskFull, AStopThatCannotUploadSaysWhatIsLost) {
  if (auto why = test::why_no_root(); !why.empty()) GTEST_SKIP() << why;
  FullDiskRun r;
  r.start();
  ASSERT_TRUE(wait_until([&] { return r.updates() >= 1; }, 90)) << test::read_text(r.log);
  test::fill_disk(r.filler);
  kill(r.worker.pid, SIGTERM);
  int st = 0;
  waitpid(r.worker.pid, &st, 0);
  r.worker.pid = -1;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << "status " << st << "\n" << test::read_text(r.log);
  const int64_t lost = r.reported("could not upload the last (\\d+) steps"), steps = r.reported("worker: (\\d+) steps");
  ASSERT_GT(lost, 0) << test::read_text(r.log);
  EXPECT_NE(test::read_text(r.log).find("the last " + std::to_string(lost) +
                                        " steps could not be uploaded: I/O error: cannot write"),
            std::string::npos)
      << test::read_text(r.log);
  EXPECT_EQ(r.steps_in_bucket() + lost, steps);
  std::smatch line;
  std::string log = test::read_text(r.log);
  if (std::regex_search(log, line, std::regex("[^\n]*could not upload the last[^\n]*")))
    std::printf("%s\n", line.str().c_str());
}
