// README's "A run on S3 in five lines", run as written against the test RGW: the lines come
// from README.md itself, with `bucketrl` the built executable, the example bucket a fresh
// prefix of the test bucket and the example base a small random model whose run.toml
// (learnable_config, written as `bucketrl config` prints it) it can learn from. The proxy,
// worker and evaluator must publish versions built from the worker's updates with
// evaluations, `status` must print the run, and the README's `verify` and `export` lines pass.
// Also docs/operations.md's probe of a store's create-only PUT, run as written against RGW.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "async_util.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"

using namespace brl;

namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t i = 0; (i = s.find(from, i)) != std::string::npos; i += to.size()) s.replace(i, from.size(), to);
  return s;
}

}  // namespace

TEST(ReadmeS3, TheFiveLinesTrainAndVerify) {
  const std::string readme = test::read_file(std::string(BRL_SOURCE_DIR) + "/README.md");
  const auto from = readme.find("## A run on S3 in five lines");
  ASSERT_NE(from, std::string::npos) << "README.md has no section 'A run on S3 in five lines'";
  const std::string section = readme.substr(from, readme.find("\n## ", from + 1) - from);
  std::vector<std::string> lines;  // the code block: lines indented by four spaces
  std::istringstream in(section);
  for (std::string l; std::getline(in, l);)
    if (l.rfind("    ", 0) == 0) lines.push_back(l.substr(4));
  ASSERT_EQ(lines.size(), 5u) << section;
  std::vector<std::string> after;  // the `bucketrl verify ...` and `bucketrl export ...` in its text
  const std::regex inline_cmd("`(bucketrl (verify|export) [^`]*)`");
  for (std::sregex_iterator m(section.begin(), section.end(), inline_cmd), end; m != end; ++m) after.push_back((*m)[1]);
  ASSERT_EQ(after.size(), 2u) << section;

  test::TempDir tmp;
  const std::string url = test::s3_test_url("brl-readme");
  const std::string base = test::make_base(tmp.str("base"));
  RunConfig cfg = test::learnable_config(base, tmp.str("out"));
  cfg.sync.sync_interval_s = 2;
  test::write_file(tmp.str("run.toml"), cfg.to_toml());
  auto as_here = [&](std::string l) {
    EXPECT_EQ(l.rfind("bucketrl ", 0), 0u) << l;
    l = std::string(BRL_EXE) + l.substr(std::string("bucketrl").size());
    return replace_all(replace_all(l, "s3://my-bucket/run1", url), "runs/demo/base", base);
  };
  std::string script = "set -e\ncd '" + tmp.str() + "'\n";
  for (auto& l : lines) script += as_here(l) + "\n";
  script += "echo started\nwait\n";
  test::write_file(tmp.str("five.sh"), script);

  const std::string log = tmp.str("five.log");
  pid_t pid = fork();
  if (pid == 0) {
    setsid();  // its own process group: the test stops the script and everything it started
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1), dup2(fd, 2);
    execl("/bin/bash", "bash", tmp.str("five.sh").c_str(), (char*)nullptr);
    _exit(127);
  }
  ASSERT_GT(pid, 0);
  auto store = protocol::open_bucket(url);
  int64_t newest = 0;
  bool evaluated = false;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
    if (auto v = protocol::read_latest(*store)) newest = *v;
    evaluated = static_cast<bool>(store->head(protocol::eval_key(std::max<int64_t>(newest - 1, 1))));
    if (newest >= 4 && evaluated) break;
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      pid = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  if (pid > 0) {
    kill(-pid, SIGTERM);  // the proxy, worker and evaluator stop cleanly
    for (int i = 0; i < 300 && kill(-pid, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    kill(-pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  const std::string out = test::read_file(log);
  ASSERT_GE(newest, 4) << out;
  EXPECT_TRUE(evaluated) << out;
  EXPECT_NE(out.find("newest global version:"), std::string::npos) << "`bucketrl status` printed no run:\n" << out;
  int64_t folded = 0;
  for (int64_t v = 1; v <= newest; ++v) folded += protocol::read_manifest(*store, v).value().updates.size();
  EXPECT_GE(folded, 3) << out;

  for (auto& l : after) {
    const std::string cmd = "cd '" + tmp.str() + "' && " + as_here(l) + " > after.log 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << l << ":\n" << test::read_file(tmp.str("after.log"));
  }
  EXPECT_TRUE(std::filesystem::exists(tmp.str("adapter/adapter_model.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(tmp.str("adapter/adapter_config.json")));
}

// docs/operations.md tells operators to probe a store with two create-only copies to one key
// (the second must fail with "already exists") and a removal; its three lines, run as written
// (example bucket -> a fresh prefix of the test bucket), must do what the page says on RGW.
TEST(ReadmeS3, OperationsCreateOnlyProbe) {
  const std::string doc = test::read_file(std::string(BRL_SOURCE_DIR) + "/docs/operations.md");
  std::vector<std::string> lines;
  std::istringstream in(doc);
  for (std::string l; std::getline(in, l);)
    if (l.find("s3://my-bucket/probe/once") != std::string::npos) lines.push_back(l.substr(l.find("bucketrl ")));
  ASSERT_EQ(lines.size(), 3u) << "docs/operations.md's probe is not three lines";
  test::TempDir tmp;
  test::write_file(tmp.str("run.toml"), "[grpo]\nlearning_rate = 0.001\n");
  const std::string url = test::s3_test_url("brl-probe");
  auto run = [&](std::string l) {
    if (auto hash = l.find(" #"); hash != std::string::npos) l.erase(hash);
    l = std::string(BRL_EXE) + l.substr(std::string("bucketrl").size());
    const std::string cmd =
        "cd '" + tmp.str() + "' && " + replace_all(l, "s3://my-bucket/probe", url) + " > out.log 2>&1";
    const int rc = std::system(cmd.c_str());
    return std::make_pair(rc, test::read_file(tmp.str("out.log")));
  };
  auto [rc1, out1] = run(lines[0]);
  EXPECT_EQ(rc1, 0) << out1;
  auto [rc2, out2] = run(lines[1]);
  EXPECT_NE(rc2, 0) << "the second create-only copy succeeded: " << out2;
  EXPECT_NE(out2.find("already exists"), std::string::npos) << out2;
  auto [rc3, out3] = run(lines[2]);
  EXPECT_EQ(rc3, 0) << out3;
  auto [rc4, out4] = run(lines[0]);  // removed: the key can be created again
  EXPECT_EQ(rc4, 0) << out4;
  run(lines[2]);
}
