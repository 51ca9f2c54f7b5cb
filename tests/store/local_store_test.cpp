// The directory backend: the shared conformance suite, plus what only a directory can show:
// crash mid-put, disk full, permission denied, file/folder conflicts, temp-file hygiene, and
// open_store URL parsing.
#include "store/local_store.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_files.h"
#include "../test_mounts.h"
#include "conformance.h"

namespace fs = std::filesystem;
using namespace brl;
using namespace brl::store;
using brl::store::conformance::keys_of;

namespace {

// One temporary folder for the whole test binary, removed at exit.
const std::string& test_root() {
  // Never destroyed: the atexit handler below runs after static destructors would have.
  static const std::string& root = *[] {
    auto* t = new std::string((fs::temp_directory_path() / "brl-local-store-XXXXXX").string());
    BRL_ASSERT(::mkdtemp(t->data()) != nullptr);
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(test_root(), ec);
    });
    return t;
  }();
  return root;
}

}  // namespace

namespace {

std::unique_ptr<ObjectStore> local_factory(const std::string& prefix) {
  return open_store("file://" + test_root() + "/" + prefix);
}

// Files under dir whose name starts with the temp prefix.
int count_temp_files(const std::string& dir) {
  int n = 0;
  std::error_code ec;
  for (auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(std::string(kTempPrefix), 0) == 0) ++n;
  return n;
}

class LocalStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_root() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    store_ = std::make_unique<LocalStore>(dir_);
  }
  std::string dir_;
  std::unique_ptr<LocalStore> store_;
};

// Runs fn in a forked child and returns its exit code (or 100 + signal).
int in_child(const std::function<int()>& fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = fn();
    } catch (...) {
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

}  // namespace

BRL_STORE_CONFORMANCE(Local, local_factory)

TEST(OpenStore, ParsesUrlsAndPaths) {
  EXPECT_EQ(open_store("file:///tmp/brl-x")->describe(), "/tmp/brl-x");
  EXPECT_EQ(open_store("file://localhost/tmp/brl-x/")->describe(), "/tmp/brl-x");
  EXPECT_EQ(open_store("/tmp/./brl-x/../brl-y")->describe(), "/tmp/brl-y");
  EXPECT_EQ(open_store("rel/dir")->describe(), (fs::current_path() / "rel/dir").string());
  auto msg = [](const std::string& url) {
    try {
      open_store(url);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("").find("empty store URL"), std::string::npos);
  EXPECT_NE(msg("file://relative/x").find("three slashes"), std::string::npos);
  EXPECT_NE(msg("gs://bucket/x").find("unsupported scheme 'gs'"), std::string::npos);
  EXPECT_NE(msg("gs://bucket/x").find("AWS_ENDPOINT_URL"), std::string::npos);
  EXPECT_NE(msg("/etc/hostname").find("not a directory"), std::string::npos);
}

TEST(ValidateKey, NamesKeyAndRule) {
  EXPECT_TRUE(validate_key("global/v00000001/manifest.json"));
  EXPECT_TRUE(validate_key(".hidden/ok"));  // only the reserved prefix is refused
  Status st = validate_key("a/../b");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'a/../b'"), std::string::npos) << st.message();
  EXPECT_NE(validate_key("a//b").message().find("empty segment"), std::string::npos);
  EXPECT_FALSE(validate_key(std::string(1025, 'k')));
  EXPECT_TRUE(validate_prefix("a/b/partial.."));
  EXPECT_FALSE(validate_prefix("a/../"));
}

TEST_F(LocalStoreTest, TempFilesAreInvisibleAndStaleOnesAreCleaned) {
  ASSERT_TRUE(store_->put("x/real", "1"));
  for (std::string p :
       {dir_ + "/" + std::string(kTempPrefix) + "junk", dir_ + "/x/" + std::string(kTempPrefix) + "junk"}) {
    std::ofstream(p) << "partial";
  }
  auto l = store_->list_all("");
  ASSERT_TRUE(l);
  ASSERT_EQ(keys_of(*l), std::vector<std::string>{"x/real"});
  auto fresh = store_->cleanup_stale_temp(std::chrono::hours(1));
  ASSERT_TRUE(fresh);
  EXPECT_EQ(*fresh, 0) << "young temp files may belong to a writer in progress";
  // Two hours old: stale.
  struct timespec old[2];
  ::clock_gettime(CLOCK_REALTIME, &old[0]);
  old[0].tv_sec -= 7200;
  old[1] = old[0];
  ASSERT_EQ(::utimensat(AT_FDCWD, (dir_ + "/x/" + std::string(kTempPrefix) + "junk").c_str(), old, 0), 0);
  auto stale = store_->cleanup_stale_temp(std::chrono::hours(1));
  ASSERT_TRUE(stale);
  EXPECT_EQ(*stale, 1);
  EXPECT_EQ(count_temp_files(dir_), 1);
}

// A writer killed mid-put (SIGKILL while it streams from a pipe) leaves the old object
// intact and only a temp file behind.
TEST_F(LocalStoreTest, CrashMidPutLeavesOldObject) {
  ASSERT_TRUE(store_->put("k", "old"));
  const std::string fifo = dir_ + "-fifo";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    LocalStore s(dir_);
    (void)s.put_file("k", fifo);
    ::_exit(0);
  }
  int w = ::open(fifo.c_str(), O_WRONLY);
  ASSERT_GE(w, 0);
  std::string chunk(1 << 20, 'n');
  ASSERT_EQ(::write(w, chunk.data(), chunk.size()), static_cast<ssize_t>(chunk.size()));
  // Wait until the child has written some of it into its temp file, then kill it.
  bool partial = false;
  for (int i = 0; i < 500 && !partial; ++i) {
    for (auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().rfind(std::string(kTempPrefix), 0) == 0 && fs::file_size(e.path()) > 0)
        partial = true;
    if (!partial) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ::close(w);
  fs::remove(fifo);
  ASSERT_TRUE(partial) << "the child never started writing; the test did not exercise a crash";
  EXPECT_EQ(*store_->get("k"), "old");
  auto l = store_->list_all("");
  ASSERT_TRUE(l);
  EXPECT_EQ(keys_of(*l), std::vector<std::string>{"k"});
  EXPECT_EQ(count_temp_files(dir_), 1);
  EXPECT_EQ(*store_->cleanup_stale_temp(std::chrono::seconds(0)), 1);
}

// A real ENOSPC: a 1 MiB tmpfs in a private mount namespace of a child process (needs root,
// as CI runs; skipped otherwise). A put and a put_file larger than the free space fail with
// a message naming the object, the cause and what to do; the old object stays whole, no new
// one appears, no temporary file is left and its space is given back (a put that fits works).
TEST_F(LocalStoreTest, DiskFullGivesIOErrorAndNoPartialObject) {
  if (auto why = test::why_no_root(); !why.empty()) GTEST_SKIP() << why;
  const std::string mnt = dir_ + "-tiny", src = dir_ + "-big";
  fs::create_directories(mnt);
  test::write_file(src, std::string(2 << 20, 'y'));
  int code = in_child([&] {
    test::TmpfsMount tmpfs(mnt, 1 << 20);
    if (!tmpfs.error().empty()) return 9;
    LocalStore s(mnt);
    if (!s.put("keep", "old")) return 10;
    for (Status st : {s.put("keep", std::string(4 << 20, 'z')), s.put_file("big", src)}) {
      if (st.code() != StatusCode::kIOError) return 11;
      if (st.message().find("No space left") == std::string::npos) return 12;
      if (st.message().find("cannot write '" + mnt + "/") == std::string::npos) return 13;  // names the object
      if (st.message().find("free space") == std::string::npos) return 17;                  // says what to do
    }
    if (*s.get("keep") != "old") return 14;
    if (count_temp_files(mnt) != 0) return 15;
    if (s.head("big").status().code() != StatusCode::kNotFound) return 16;
    if (!s.put("fits", std::string(900 << 10, 'f'))) return 18;
    return 0;
  });
  fs::remove(src);
  EXPECT_EQ(code, 0) << "9: cannot mount a tmpfs, 10: setup put, 11: not kIOError, 12: no ENOSPC text, 13: no path, "
                        "14: old object damaged, 15: temp file left, 16: object appeared, 17: no hint, "
                        "18: the failed writes kept their space";
}

// A file-size limit (RLIMIT_FSIZE) makes write(2) fail with EFBIG mid-object: the same
// failure path as a full disk, available without privileges.
TEST_F(LocalStoreTest, WriteFailureMidObjectLeavesNothing) {
  int code = in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {1 << 20, 1 << 20};
    if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) return 10;
    LocalStore s(dir_);
    Status st = s.put("big", std::string(3 << 20, 'z'));
    if (st.code() != StatusCode::kIOError) return 11;
    if (st.message().find("File too large") == std::string::npos) return 12;
    if (s.head("big").status().code() != StatusCode::kNotFound) return 13;
    if (count_temp_files(dir_) != 0) return 14;
    return 0;
  });
  EXPECT_EQ(code, 0) << "11: not kIOError, 12: no EFBIG text, 13: object appeared, 14: temp left";
}

// Permission denied. Root ignores mode bits, so as root the child drops to uid/gid 65534
// ("nobody") first; the folder and the file belong to root with modes that refuse nobody.
TEST_F(LocalStoreTest, PermissionDeniedIsAccessDenied) {
  ASSERT_TRUE(store_->put("ro/secret", "s"));
  ::chmod(test_root().c_str(), 0755);  // mkdtemp made it 0700: let nobody reach the folder
  ::chmod((dir_ + "/ro").c_str(), 0555);
  ::chmod((dir_ + "/ro/secret").c_str(), 0600);
  int code = in_child([&] {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return 10;
    LocalStore s(dir_);
    Status w = s.put("ro/new", "x");
    if (w.code() != StatusCode::kAccessDenied) return 11;
    if (w.message().find("Permission denied") == std::string::npos) return 12;
    if (w.message().find("cannot write '" + dir_ + "/ro/new'") == std::string::npos) return 15;
    if (w.message().find("uid 65534") == std::string::npos) return 16;  // who, and what to do
    if (s.get("ro/secret").status().code() != StatusCode::kAccessDenied) return 13;
    if (s.remove("ro/secret").code() != StatusCode::kAccessDenied) return 14;
    return 0;
  });
  ::chmod((dir_ + "/ro").c_str(), 0755);
  EXPECT_EQ(code, 0) << "10: cannot drop root, 11: put not denied, 12: no EACCES text, "
                        "13: get not denied, 14: remove not denied, 15: the object not named, 16: no hint";
  EXPECT_FALSE(fs::exists(dir_ + "/ro/new"));
  EXPECT_EQ(count_temp_files(dir_), 0);
}

TEST_F(LocalStoreTest, FileWhereFolderIsExpected) {
  ASSERT_TRUE(store_->put("a", "file"));
  Status st = store_->put("a/b", "x");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("conflicts"), std::string::npos) << st.message();
  EXPECT_EQ(store_->get("a/b").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->head("a/b").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->put("d/e", "x"));
  EXPECT_EQ(store_->put("d", "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->get("d").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->remove("d"));
  EXPECT_EQ(*store_->get("d/e"), "x");
  EXPECT_EQ(count_temp_files(dir_), 0);
}

TEST_F(LocalStoreTest, RemovePrunesEmptyFolders) {
  ASSERT_TRUE(store_->put("p/q/r/s", "x"));
  ASSERT_TRUE(store_->put("p/keep", "y"));
  ASSERT_TRUE(store_->remove("p/q/r/s"));
  EXPECT_FALSE(fs::exists(dir_ + "/p/q"));
  EXPECT_TRUE(fs::exists(dir_ + "/p/keep"));
  EXPECT_TRUE(fs::exists(dir_));
}

// Writers creating keys while a remover prunes their folders: no put may fail.
TEST_F(LocalStoreTest, ConcurrentPutAndPrune) {
  std::atomic<bool> stop{false};
  std::thread remover([&] {
    LocalStore s(dir_);
    while (!stop) (void)s.remove("f/g/victim");
  });
  int failures = 0;
  std::string last_error;
  auto check = [&](Status st) {
    if (!st) ++failures, last_error = st.to_string();
  };
  for (int i = 0; i < 200; ++i) {
    check(store_->put("f/g/victim", "v"));
    check(store_->put("f/g/other" + std::to_string(i % 3), "o"));
    check(store_->remove("f/g/other" + std::to_string(i % 3)));
  }
  stop = true;
  remover.join();
  EXPECT_EQ(failures, 0) << last_error;
}

TEST(CopyFileAtomic, CopiesAndReplaces) {
  const std::string d = test_root() + "/copy";
  fs::create_directories(d);
  std::ofstream(d + "/src") << "content";
  std::ofstream(d + "/dst") << "old old old";
  ASSERT_TRUE(copy_file_atomic(d + "/src", d + "/dst"));
  std::ifstream in(d + "/dst");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(s, "content");
  EXPECT_EQ(copy_file_atomic(d + "/missing", d + "/dst2").code(), StatusCode::kNotFound);
  EXPECT_EQ(count_temp_files(d), 0);
}
