// The proxy's dashboard in a real browser: a small real run (the bucketrl executable: a
// proxy with --http and two workers on a directory bucket, plus one corrupt update planted
// in the bucket), then headless Chromium loads the page, runs its JavaScript against the
// live /status and dumps the DOM; the test asserts that the charts hold data points, that
// the workers' rows and the rejected update are there, and saves a screenshot
// (build/dashboard_screenshot.png); then `bucketrl plot` draws the same run from the bucket.
// Skips when Chromium is not installed.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <regex>
#include <thread>

#include "../obs/http_client.h"
#include "../obs/prom_check.h"
#include "async_util.h"

using namespace brl;

namespace {

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    std::string cmd = std::string("command -v ") + name + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return name;
  }
  return "";
}

// Runs headless Chromium on url with the given mode flags; returns its stdout.
std::string chromium(const std::string& exe, const std::string& profile, const std::string& flags,
                     const std::string& url, const std::string& out_file) {
  std::string cmd =
      "timeout 60 " + exe +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking"
      " --disable-component-update --disable-sync --disable-dev-shm-usage --user-data-dir=" +
      profile + " --virtual-time-budget=10000 " + flags + " " + url + " > " + out_file + " 2>" + out_file + ".err";
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd << "\n" << test::read_text(out_file + ".err");
  return test::read_text(out_file);
}

// The element <svg ... id="ID" ...>...</svg> of the dumped DOM ("" if absent).
std::string svg_element(const std::string& dom, const std::string& id) {
  size_t at = dom.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  size_t open = dom.rfind("<svg", at), close = dom.find("</svg>", at);
  return open == std::string::npos || close == std::string::npos ? "" : dom.substr(open, close - open);
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

int data_points(const std::string& svg) {
  std::smatch m;
  std::string tag = svg.substr(0, svg.find('>'));
  return std::regex_search(tag, m, std::regex("data-points=\"([0-9]+)\"")) ? std::stoi(m[1]) : -1;
}

}  // namespace

TEST(Dashboard, HeadlessChromiumDrawsTheLiveRun) {
  const std::string exe = find_chromium();
  if (exe.empty())
    GTEST_SKIP() << "chromium is not installed: run scripts/setup.sh --test (it installs Debian's chromium)";
  test::TempDir tmp;
  RunConfig cfg = test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out"));
  cfg.sync.sync_interval_s = 0.7;
  const std::string bucket = test::init_bucket(tmp, cfg), cache = tmp.str("cache");
  // Sorts before every real update of w0: the proxy reads it first and rejects it.
  ASSERT_TRUE(protocol::open_bucket(bucket)->put("updates/w0/0000000000000-planted.upd", "not an update"));
  const int port = test::free_port();
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
  std::vector<test::Proc> procs;
  procs.push_back(
      test::start({"proxy", "--bucket", bucket, "--http", "127.0.0.1:" + std::to_string(port)}, tmp.str("proxy.log")));
  for (int i = 0; i < 2; ++i)
    procs.push_back(test::start({"worker", "--bucket", bucket, "--id", "w" + std::to_string(i), "--shard",
                                 std::to_string(i) + "/2", "--threads", "1", "--cache-dir", cache},
                                tmp.str("w" + std::to_string(i) + ".log")));
  // Wait for a few versions from both workers, as /status tells them.
  nlohmann::json st;
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    auto r = test::http_get(port, "/status");
    if (r.status == 200) {
      st = nlohmann::json::parse(r.body);
      int contributing = 0;
      for (auto& w : st["workers"]) contributing += w["folded"].get<int>() > 0;
      if (st["versions"].size() >= 5 && contributing == 2 && !st["rejected"].empty()) break;
    }
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(45))
        << "no 5 versions from 2 workers in 45 s; last /status: " << st.dump() << "\n"
        << test::read_text(tmp.str("proxy.log"));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_EQ(test::http_get(port, "/health").status, 200);
  auto metrics = test::http_get(port, "/metrics");
  EXPECT_EQ(test::check_prometheus_text(metrics.body), "") << metrics.body;
  EXPECT_NE(metrics.body.find("bucketrl_updates_rejected_total{reason=\"corrupt\"} 1\n"), std::string::npos)
      << metrics.body;

  std::string dom = chromium(exe, tmp.str("chrome-profile"), "--dump-dom", url, tmp.str("dom.html"));
  ASSERT_NE(dom.find("data-rendered=\"1\""), std::string::npos) << "the page's script did not render /status:\n"
                                                                << dom.substr(0, 3000);
  for (const char* id : {"chart-reward-time", "chart-reward-version", "chart-staleness"}) {
    std::string svg = svg_element(dom, id);
    EXPECT_GE(data_points(svg), 4) << id;
    EXPECT_GE(count(svg, "<circle class=\"pt\""), 4) << id << ": " << svg.substr(0, 400);
    EXPECT_EQ(count(svg, "<path class=\"series\" d=\"M"), 1) << id;
  }
  EXPECT_EQ(count(svg_element(dom, "chart-reward-time"), "<polygon class=\"band\""), 1);  // the spread band
  std::string workers = svg_element(dom, "chart-workers");
  EXPECT_EQ(count(workers, "<rect class=\"bar\" data-worker=\"w0\""), 1) << workers.substr(0, 400);
  EXPECT_EQ(count(workers, "<rect class=\"bar\" data-worker=\"w1\""), 1);
  EXPECT_GE(count(svg_element(dom, "chart-bytes"), "<rect class=\"bar\""), 4);
  for (const char* w : {"w0", "w1"}) {
    std::smatch m;
    ASSERT_TRUE(
        std::regex_search(dom, m, std::regex(std::string("<tr data-worker=\"") + w + "\" data-health=\"([a-z]+)\"")))
        << "no table row for " << w;
    EXPECT_EQ(m[1], "alive") << w;
  }
  EXPECT_NE(dom.find("data-update=\"w0/0000000000000-planted\""), std::string::npos);
  EXPECT_NE(dom.find(">corrupt</span>"), std::string::npos);
  EXPECT_NE(dom.find(st["run"]["id"].get<std::string>()), std::string::npos);

  const std::string png = std::string(BRL_BINARY_DIR) + "/dashboard_screenshot.png";
  std::remove(png.c_str());
  chromium(exe, tmp.str("chrome-profile2"), "--hide-scrollbars --window-size=1280,900 --screenshot=" + png, url,
           tmp.str("shot.txt"));
  std::string bytes = test::read_text(png);
  EXPECT_GT(bytes.size(), 20000u) << png;
  EXPECT_EQ(bytes.substr(0, 4), "\x89PNG");
  std::printf("dashboard screenshot: %s\n", png.c_str());

  for (size_t k = 1; k < procs.size(); ++k) test::stop(procs[k]);
  test::stop(procs[0]);

  // The same run, plotted from the bucket alone: one point per version in each file.
  const std::string plots = tmp.str("plots");
  ASSERT_EQ(std::system((std::string(BRL_EXE) + " plot --bucket " + bucket + " --out " + plots + " > " +
                         tmp.str("plot.log") + " 2>&1")
                            .c_str()),
            0)
      << test::read_text(tmp.str("plot.log"));
  int64_t newest = protocol::newest_version(*protocol::open_bucket(bucket)).value();
  std::string versions = test::read_text(plots + "/versions_over_time.svg");
  EXPECT_EQ(count(versions, "<circle class=\"pt\""), newest + 1) << versions.substr(0, 500);
  EXPECT_EQ(count(test::read_text(plots + "/reward_over_time.svg"), "<circle class=\"pt\""),
            newest);  // v0 folds nothing
  EXPECT_EQ(count(test::read_text(plots + "/reward_per_version.svg"), "<circle class=\"pt\""), newest);
}
