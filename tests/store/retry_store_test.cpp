// Retry decorator under injected faults (FaultStore over a real directory store): the
// backoff distribution, recovery, bounded give-up, no retry of non-retryable statuses, and
// the create-only ambiguity after a lost response.
#include "store/retry_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "conformance.h"
#include "store/fault_store.h"
#include "store/local_store.h"

namespace fs = std::filesystem;
using namespace brl;
using namespace brl::store;
using std::chrono::milliseconds;

namespace {

// The whole conformance suite through RetryStore(FaultStore(directory store)): 20% of calls
// refused, 10% with the response lost after the call took effect, 5% slow. Every
// behaviour (create-only races included) must hold as without faults.
std::unique_ptr<ObjectStore> faulty_retried_factory(const std::string& prefix) {
  static const std::string& root = *[] {
    auto* t = new std::string((fs::temp_directory_path() / "brl-retry-conf-XXXXXX").string());
    BRL_ASSERT(::mkdtemp(t->data()) != nullptr);
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(root, ec);
    });
    return t;
  }();
  static std::atomic<uint64_t> seed{100};
  FaultOptions f;
  f.fail_rate = 0.2;
  f.reset_rate = 0.1;
  f.hang_rate = 0.05;
  f.hang_ms = 1;
  f.seed = seed.fetch_add(1) + 1000 * static_cast<uint64_t>(::getpid());
  RetryOptions r;
  r.max_attempts = 25;  // 0.3^25: never gives up in practice
  r.base_delay = milliseconds(1);
  r.max_delay = milliseconds(4);
  auto local = std::make_shared<LocalStore>(root + "/" + prefix);
  return std::make_unique<RetryStore>(std::make_shared<FaultStore>(local, f), r);
}

class RetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("brl-retry-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    raw_ = std::make_shared<LocalStore>(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Retries with fake time: sleeps are recorded, not slept.
  RetryOptions fake_time(int attempts = 10) {
    RetryOptions o;
    o.max_attempts = attempts;
    o.seed = 5;
    o.sleep = [this](milliseconds d) { sleeps_.push_back(d); };
    return o;
  }
  std::string dir_;
  std::shared_ptr<LocalStore> raw_;
  std::vector<milliseconds> sleeps_;
};

}  // namespace

BRL_STORE_CONFORMANCE(LocalFaultyRetried, faulty_retried_factory)

// Full jitter: delay ~ uniform[0, min(max, base*2^i)]. Mean of a uniform is cap/2, sd cap/sqrt(12);
// with 4000 draws the sample mean is within 4.5% of cap/2 at > 5 sigma.
TEST_F(RetryTest, BackoffIsFullJitterWithinCap) {
  RetryOptions o = fake_time();
  o.base_delay = milliseconds(100);
  o.max_delay = milliseconds(1000);
  RetryStore r(raw_, o);
  for (int i : {0, 1, 2, 3, 4, 8, 40}) {
    const double cap = std::min(1000.0, 100.0 * std::pow(2.0, std::min(i, 30)));
    double sum = 0, mx = 0;
    const int n = 4000;
    for (int k = 0; k < n; ++k) {
      double d = static_cast<double>(r.backoff(i).count());
      ASSERT_GE(d, 0);
      ASSERT_LE(d, cap) << "retry " << i;
      sum += d;
      mx = std::max(mx, d);
    }
    EXPECT_NEAR(sum / n, cap / 2, 0.045 * cap) << "retry " << i;
    EXPECT_GT(mx, 0.95 * cap) << "retry " << i;
  }
}

// 30% refused + 10% lost responses + 5% slow: without retries many calls fail; with them all
// 150 put/get pairs succeed and the raw store holds exactly what was written.
TEST_F(RetryTest, RecoversUnderInjectedFaults) {
  FaultOptions f;
  f.fail_rate = 0.3;
  f.reset_rate = 0.1;
  f.hang_rate = 0.05;
  f.hang_ms = 2;
  f.seed = 7;
  auto faulty = std::make_shared<FaultStore>(raw_, f);
  // Without retries: the faults are real (the test would be vacuous otherwise).
  int bare_failures = 0;
  for (int i = 0; i < 50; ++i)
    if (!faulty->put("bare/" + std::to_string(i), "x")) ++bare_failures;
  EXPECT_GT(bare_failures, 10);

  RetryStore r(faulty, fake_time(12));
  for (int i = 0; i < 150; ++i) {
    const std::string key = "k/" + std::to_string(i), val = "value-" + std::to_string(i * 7919);
    Status st = r.put(key, val);
    ASSERT_TRUE(st) << st.to_string();
    auto got = r.get(key);
    ASSERT_TRUE(got) << got.status().to_string();
    EXPECT_EQ(*got, val);
    EXPECT_EQ(*raw_->get(key), val);
  }
  auto listed = r.list_all("k/");
  ASSERT_TRUE(listed) << listed.status().to_string();
  EXPECT_EQ(listed->size(), 150u);
  auto c = faulty->counts();
  EXPECT_GT(c.failed, 60);
  EXPECT_GT(c.reset, 15);
  EXPECT_GT(c.hung, 5);
  auto rc = r.counts();
  EXPECT_GT(rc.attempts, rc.calls + 60) << "retries happened";
  EXPECT_EQ(rc.gave_up, 0);
  EXPECT_EQ(static_cast<int>(sleeps_.size()), rc.attempts - rc.calls);
}

TEST_F(RetryTest, GivesUpAfterMaxAttemptsWithClearMessage) {
  FaultOptions f;
  f.fail_rate = 1.0;
  auto faulty = std::make_shared<FaultStore>(raw_, f);
  RetryStore r(faulty, fake_time(4));
  Status st = r.put("x", "y");
  EXPECT_EQ(st.code(), StatusCode::kTransient);
  EXPECT_NE(st.message().find("gave up on put 'x' after 4 attempts"), std::string::npos) << st.message();
  EXPECT_EQ(faulty->counts().calls, 4);
  EXPECT_EQ(sleeps_.size(), 3u);
  EXPECT_EQ(r.counts().gave_up, 1);
}

// Real sleeps: a 300 ms budget with 100 ms base delay stops well before 10 attempts.
TEST_F(RetryTest, TotalTimeBoundsRetries) {
  FaultOptions f;
  f.fail_rate = 1.0;
  auto faulty = std::make_shared<FaultStore>(raw_, f);
  RetryOptions o;
  o.max_attempts = 100;
  o.base_delay = milliseconds(100);
  o.max_delay = milliseconds(200);
  o.total_time = milliseconds(300);
  o.seed = 3;
  RetryStore r(faulty, o);
  auto t0 = std::chrono::steady_clock::now();
  auto got = r.get("x");
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(got.status().code(), StatusCode::kTransient);
  EXPECT_LE(ms, 300 + 50);  // never sleeps past the budget (50 ms slack for scheduling)
  EXPECT_LT(faulty->counts().calls, 100);
  EXPECT_GE(faulty->counts().calls, 2);
}

TEST_F(RetryTest, NonRetryableStatusesAreNotRetried) {
  auto faulty = std::make_shared<FaultStore>(raw_, FaultOptions{});
  RetryStore r(faulty, fake_time());
  EXPECT_EQ(r.get("missing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.put("bad//key", "x").code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(r.put("once", "a", PutOptions{.create_only = true}));
  EXPECT_EQ(r.put("once", "b", PutOptions{.create_only = true}).code(), StatusCode::kPreconditionFailed);
  EXPECT_EQ(faulty->counts().calls, 4);
  EXPECT_TRUE(sleeps_.empty());
}

// Lost responses make create-only ambiguous: the retry sees kPreconditionFailed for its own
// earlier write. Same bytes -> OK; a key that someone else created stays kPreconditionFailed.
TEST_F(RetryTest, CreateOnlyAfterLostResponse) {
  FaultOptions f;
  f.reset_rate = 0.5;
  f.seed = 11;
  auto faulty = std::make_shared<FaultStore>(raw_, f);
  RetryStore r(faulty, fake_time(20));
  ASSERT_TRUE(raw_->put("taken", "someone else"));
  int ok = 0;
  for (int i = 0; i < 40; ++i) {
    const std::string key = "lease/" + std::to_string(i), body = "me-" + std::to_string(i);
    Status st = r.put(key, body, PutOptions{.create_only = true});
    EXPECT_TRUE(st) << key << ": " << st.to_string();
    ok += st.is_ok();
    EXPECT_EQ(*raw_->get(key), body);
    Status other = r.put("taken", "mine", PutOptions{.create_only = true});
    EXPECT_EQ(other.code(), StatusCode::kPreconditionFailed) << other.to_string();
  }
  EXPECT_EQ(ok, 40);
  EXPECT_GT(faulty->counts().reset, 20) << "responses were really lost";
  EXPECT_EQ(*raw_->get("taken"), "someone else");

  // The same through put_file (read back by streaming, compared by sha256).
  const std::string src = dir_ + "-src";
  { std::ofstream(src) << "file body"; }
  for (int i = 0; i < 10; ++i) {
    Status st = r.put_file("flease/" + std::to_string(i), src, PutOptions{.create_only = true});
    EXPECT_TRUE(st) << st.to_string();
  }
  fs::remove(src);
}

// get_file through a faulty store: a cut-off transfer never leaves a file, and the retry
// delivers the whole object.
TEST_F(RetryTest, GetFileUnderResets) {
  std::string body(3 << 20, 'q');
  ASSERT_TRUE(raw_->put("blob", body));
  FaultOptions f;
  f.reset_rate = 0.6;
  f.seed = 2;
  auto faulty = std::make_shared<FaultStore>(raw_, f);
  RetryStore r(faulty, fake_time(30));
  const std::string dst = dir_ + "-out";
  for (int i = 0; i < 5; ++i) {
    fs::remove(dst);
    ASSERT_TRUE(r.get_file("blob", dst));
    EXPECT_EQ(fs::file_size(dst), body.size());
  }
  fs::remove(dst);
  EXPECT_GT(faulty->counts().reset, 2);
}
