// write_file: the whole file or an error naming it, never a torn file. A full disk is simulated
// with RLIMIT_FSIZE (writes past the limit fail with EFBIG, as on a full disk they fail with
// ENOSPC), which reaches the buffered tail that only fclose writes.
#include "util/file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <string>

#include "../test_files.h"
#include "util/error.h"

using namespace brl;

TEST(WriteFile, WritesReplacesAndLeavesNoTemporary) {
  test::TempDir dir;
  const std::string p = dir.str("a.json");
  write_file(p, "old");
  write_file(p, "new contents");
  EXPECT_EQ(test::read_file(p), "new contents");
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
}

TEST(WriteFile, MissingFolderNamesThePath) {
  test::TempDir dir;
  try {
    write_file(dir.str("no/such/dir/x.json"), "x");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.str("no/such/dir/x.json") + ": No such file or directory"),
              std::string::npos)
        << e.what();
  }
}

TEST(WriteFile, AFullDiskIsAnErrorAndTheOldFileStays) {
  test::TempDir dir;
  const std::string p = dir.str("summary.json");
  write_file(p, "the old summary");
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 1000;  // bytes: the 4096-byte stdio buffer is flushed only at fclose
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error;
  try {
    write_file(p, std::string(3000, 'x'));
  } catch (const UserError& e) {
    error = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(error.find("cannot write " + p + ": File too large"), std::string::npos) << error;
  EXPECT_EQ(test::read_file(p), "the old summary");
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
}
