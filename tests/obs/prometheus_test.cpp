// Prometheus text exposition format 0.0.4: exact output of a small set of families (from
// the format's documentation: HELP, TYPE, escaped label values, special floats), and a line
// by line check of everything the proxy's /metrics exposes.
#include <gtest/gtest.h>

#include <cmath>

#include "obs/prometheus.h"
#include "prom_check.h"

using namespace brl::obs;

TEST(Prometheus, ExactText) {
  PromText p;
  p.family("http_requests_total", "counter", "The total number of HTTP requests.")
      .sample(1027, {{"method", "post"}, {"code", "200"}})
      .sample(3, {{"method", "post"}, {"code", "400"}});
  p.family("msdos_file_access_time_seconds", "gauge", "a\\b\nc")
      .sample(1.458255915e9, {{"path", "C:\\DIR\\FILE.TXT"}, {"error", "Cannot find file:\n\"FILE.TXT\""}});
  p.family("rpc_duration_seconds", "summary", "A summary.").sample(1.7560473e7, {}, "_sum").sample(2693, {}, "_count");
  p.family("weird", "gauge", "specials")
      .sample(std::nan(""))
      .sample(INFINITY)
      .sample(-INFINITY)
      .sample(0.25)
      .sample(-3);
  EXPECT_EQ(p.str(),
            "# HELP http_requests_total The total number of HTTP requests.\n"
            "# TYPE http_requests_total counter\n"
            "http_requests_total{method=\"post\",code=\"200\"} 1027\n"
            "http_requests_total{method=\"post\",code=\"400\"} 3\n"
            "# HELP msdos_file_access_time_seconds a\\\\b\\nc\n"
            "# TYPE msdos_file_access_time_seconds gauge\n"
            "msdos_file_access_time_seconds{path=\"C:\\\\DIR\\\\FILE.TXT\",error=\"Cannot find "
            "file:\\n\\\"FILE.TXT\\\"\"} 1458255915\n"
            "# HELP rpc_duration_seconds A summary.\n"
            "# TYPE rpc_duration_seconds summary\n"
            "rpc_duration_seconds_sum 17560473\n"
            "rpc_duration_seconds_count 2693\n"
            "# HELP weird specials\n"
            "# TYPE weird gauge\n"
            "weird NaN\nweird +Inf\nweird -Inf\nweird 0.25\nweird -3\n");
  EXPECT_TRUE(brl::test::check_prometheus_text(p.str()).empty()) << brl::test::check_prometheus_text(p.str());
}

TEST(Prometheus, Names) {
  EXPECT_TRUE(valid_metric_name("bucketrl_version"));
  EXPECT_TRUE(valid_metric_name("a:b_c1"));
  EXPECT_FALSE(valid_metric_name("1abc"));
  EXPECT_FALSE(valid_metric_name("a-b"));
  EXPECT_FALSE(valid_metric_name(""));
  EXPECT_TRUE(valid_label_name("worker"));
  EXPECT_FALSE(valid_label_name("__name"));
  EXPECT_FALSE(valid_label_name("a:b"));
  EXPECT_EQ(format_sample_value(0.1), "0.1");
  EXPECT_EQ(format_sample_value(1e20), "1e+20");
}

TEST(Prometheus, TheCheckerCatchesBrokenText) {
  using brl::test::check_prometheus_text;
  EXPECT_FALSE(check_prometheus_text("x 1\n").empty());                                     // no TYPE
  EXPECT_FALSE(check_prometheus_text("# HELP x h\n# TYPE x counter\nx 1\n").empty());       // counter without _total
  EXPECT_FALSE(check_prometheus_text("# HELP x h\n# TYPE x gauge\nx{a=\"b} 1\n").empty());  // unterminated label
  EXPECT_FALSE(check_prometheus_text("# HELP x h\n# TYPE x gauge\nx{a=\"\\q\"} 1\n").empty());  // bad escape
  EXPECT_FALSE(check_prometheus_text("# HELP x h\n# TYPE x gauge\nx one\n").empty());           // value
  EXPECT_FALSE(check_prometheus_text("# HELP x h\n# TYPE x gauge\nx 1").empty());               // no final newline
  EXPECT_FALSE(check_prometheus_text("# HELP x h\n# TYPE x gauge\ny 1\n").empty());             // other family
}
