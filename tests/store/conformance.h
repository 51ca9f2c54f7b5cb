// The object-store conformance suite: one set of behaviours every backend must show, run
// against each (directory: local_store_test.cpp; S3 on RGW: s3_store_s3_test.cpp).
//
// Use from exactly one test file per backend:
//   #include "conformance.h"
//   BRL_STORE_CONFORMANCE(Local, [](const std::string& unique_prefix) {
//     return std::unique_ptr<brl::store::ObjectStore>(...store rooted at unique_prefix...);
//   });
// The factory gets a fresh prefix per test ("conf-<test>-<pid>-<n>-<hex>", no '/'), and is
// called again (same prefix) for second handles and in forked child processes; the store it
// returns must see only keys under that prefix. Each test removes what it wrote.
//
// Expected values are fixed by hand (byte patterns, sorted key lists computed with
// std::sort, sha256 of seeded data) rather than read back from the store under test.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "store/object_store.h"
#include "util/hash.h"

namespace brl::store::conformance {

using StoreFactory = std::function<std::unique_ptr<ObjectStore>(const std::string& unique_prefix)>;

struct StoreBackend {
  std::string name;
  StoreFactory factory;
};

// Test names show the backend, not the factory's bytes.
inline void PrintTo(const StoreBackend& b, std::ostream* os) { *os << b.name; }

inline std::string make_unique_prefix() {
  static std::atomic<int> n{0};
  std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(test.begin(), test.end(), '/', '-');
  std::random_device rd;
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%d-%d-%08x", static_cast<int>(::getpid()), n.fetch_add(1), rd());
  return "conf-" + test + buf;
}

// Seeded bytes, so the same content can be regenerated for comparison.
inline std::string pattern_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    std::memcpy(s.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return s;
}

inline std::vector<std::string> keys_of(const std::vector<ObjectInfo>& v) {
  std::vector<std::string> k;
  for (auto& o : v) k.push_back(o.key);
  return k;
}

class StoreConformance : public ::testing::TestWithParam<StoreBackend> {
 protected:
  void SetUp() override {
    prefix_ = make_unique_prefix();
    store_ = GetParam().factory(prefix_);
    ASSERT_TRUE(store_);
    scratch_ = std::filesystem::temp_directory_path() / ("brl-conf-scratch-" + prefix_);
    std::filesystem::create_directories(scratch_);
  }
  void TearDown() override {
    if (store_) {
      auto all = store_->list_all("");
      if (all)
        for (auto& o : *all) (void)store_->remove(o.key);
    }
    std::error_code ec;
    std::filesystem::remove_all(scratch_, ec);
  }
  std::unique_ptr<ObjectStore> reopen() const { return GetParam().factory(prefix_); }
  std::string scratch(const std::string& name) const { return (scratch_ / name).string(); }
  void put_ok(const std::string& key, const std::string& data) {
    Status st = store_->put(key, data);
    ASSERT_TRUE(st) << st.to_string();
  }
  std::string get_ok(const std::string& key) {
    auto r = store_->get(key);
    EXPECT_TRUE(r) << r.status().to_string();
    return r ? *r : std::string("<error>");
  }

  std::string prefix_;
  std::unique_ptr<ObjectStore> store_;
  std::filesystem::path scratch_;
};

TEST_P(StoreConformance, PutGetOverwriteAndEmptyAndBinary) {
  put_ok("a/b.txt", "hello");
  EXPECT_EQ(get_ok("a/b.txt"), "hello");
  put_ok("a/b.txt", "world, longer");
  EXPECT_EQ(get_ok("a/b.txt"), "world, longer");
  put_ok("empty", "");
  EXPECT_EQ(get_ok("empty"), "");
  std::string all_bytes;
  for (int i = 0; i < 256; ++i) all_bytes.push_back(static_cast<char>(i));
  put_ok("bin/all-bytes", all_bytes);
  EXPECT_EQ(get_ok("bin/all-bytes"), all_bytes);
  // Characters that need escaping in URLs and signatures.
  const std::string odd = "odd/sp ace/plus+pct%20q?h#amp&eq=ü~";
  put_ok(odd, "odd");
  EXPECT_EQ(get_ok(odd), "odd");
  auto other = reopen();  // a second handle sees the same objects
  auto r = other->get("a/b.txt");
  ASSERT_TRUE(r) << r.status().to_string();
  EXPECT_EQ(*r, "world, longer");
}

TEST_P(StoreConformance, RangeGet) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<char>('a' + i % 26));
  put_ok("r", data);
  auto range = [&](uint64_t off, std::optional<uint64_t> len) {
    GetOptions g;
    g.offset = off;
    g.length = len;
    return store_->get("r", g);
  };
  auto a = range(0, 10);
  ASSERT_TRUE(a) << a.status().to_string();
  EXPECT_EQ(*a, "abcdefghij");
  auto b = range(990, 10);
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, data.substr(990));
  auto c = range(995, 100);  // clamped at the end, as HTTP ranges are
  ASSERT_TRUE(c);
  EXPECT_EQ(*c, data.substr(995));
  auto d = range(500, std::nullopt);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, data.substr(500));
  auto e = range(27, 3);
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, "bcd");
  EXPECT_EQ(range(1000, 1).status().code(), StatusCode::kInvalidArgument);  // S3: 416
  EXPECT_EQ(range(5000, std::nullopt).status().code(), StatusCode::kInvalidArgument);
}

TEST_P(StoreConformance, HeadAndEtag) {
  const auto now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  put_ok("h/obj", std::string(1234, 'x'));
  auto h = store_->head("h/obj");
  ASSERT_TRUE(h) << h.status().to_string();
  EXPECT_EQ(h->key, "h/obj");
  EXPECT_EQ(h->size, 1234u);
  EXPECT_FALSE(h->etag.empty());
  EXPECT_EQ(h->etag.find('"'), std::string::npos) << "etags come unquoted";
  EXPECT_NEAR(static_cast<double>(h->mtime_ms), static_cast<double>(now_ms), 5 * 60 * 1000.0);
  auto l = store_->list_all("h/");
  ASSERT_TRUE(l);
  ASSERT_EQ(l->size(), 1u);
  EXPECT_EQ((*l)[0].etag, h->etag);
  EXPECT_EQ((*l)[0].size, 1234u);
  // Same size, different bytes, immediately after: the etag must change.
  put_ok("h/obj", std::string(1234, 'y'));
  auto h2 = store_->head("h/obj");
  ASSERT_TRUE(h2);
  EXPECT_NE(h2->etag, h->etag);
}

TEST_P(StoreConformance, ListOrderPagingPrefixStartAfter) {
  std::vector<std::string> keys = {"k/a.c", "k/a/b",   "k/a/c/d", "k/a-",       "k/a0", "k/b",
                                   "k/B",   "k/z/y/x", "top",     "k/\xc3\xa9", "k/~"};
  for (int i = 0; i < 20; ++i) {
    char b[16];
    std::snprintf(b, sizeof b, "k/n/%03d", i);
    keys.push_back(b);
  }
  for (auto& k : keys) put_ok(k, "v:" + k);
  std::vector<std::string> sorted = keys;
  std::sort(sorted.begin(), sorted.end());  // bytewise, as S3 orders UTF-8 keys

  auto all = store_->list_all("");
  ASSERT_TRUE(all) << all.status().to_string();
  EXPECT_EQ(keys_of(*all), sorted);
  for (auto& o : *all) EXPECT_EQ(o.size, 2 + o.key.size()) << o.key;

  // Paging with a small page: every page full but the last, pages in order, nothing twice.
  ListOptions opt;
  opt.max_keys = 4;
  std::vector<std::string> paged;
  int pages = 0;
  for (;;) {
    auto p = store_->list(opt);
    ASSERT_TRUE(p) << p.status().to_string();
    ++pages;
    ASSERT_LE(p->objects.size(), 4u);
    for (auto& o : p->objects) paged.push_back(o.key);
    if (p->next.empty()) break;
    ASSERT_EQ(p->objects.size(), 4u);
    opt.continuation = p->next;
    ASSERT_LT(pages, 100);
  }
  EXPECT_EQ(paged, sorted);
  EXPECT_EQ(pages, static_cast<int>((sorted.size() + 3) / 4));

  auto with_prefix = [&](const std::string& prefix, const std::string& after = "") {
    std::vector<std::string> want;
    for (auto& k : sorted)
      if (k.rfind(prefix, 0) == 0 && k > after) want.push_back(k);
    return want;
  };
  for (std::string p : {"k/a", "k/a/", "k/n/01", "k/a/c/d", "nope/", "t", "k/"}) {
    auto l = store_->list_all(p);
    ASSERT_TRUE(l) << p << ": " << l.status().to_string();
    EXPECT_EQ(keys_of(*l), with_prefix(p)) << "prefix " << p;
  }
  for (std::string after : {"k/a/b", "k/a", "k/m", "k/n/005", "a", "zzz"}) {
    auto l = store_->list_all("", after);
    ASSERT_TRUE(l);
    EXPECT_EQ(keys_of(*l), with_prefix("", after)) << "start_after " << after;
  }
  // start_after together with a prefix and small pages.
  ListOptions o2;
  o2.prefix = "k/n/";
  o2.start_after = "k/n/007";
  o2.max_keys = 3;
  std::vector<std::string> got;
  for (int guard = 0; guard < 50; ++guard) {
    auto p = store_->list(o2);
    ASSERT_TRUE(p);
    for (auto& o : p->objects) got.push_back(o.key);
    if (p->next.empty()) break;
    o2.continuation = p->next;
  }
  EXPECT_EQ(got, with_prefix("k/n/", "k/n/007"));
  EXPECT_EQ(got.size(), 12u);
}

TEST_P(StoreConformance, RemoveAndNotFound) {
  put_ok("d/e/f", "1");
  put_ok("d/e/g", "2");
  ASSERT_TRUE(store_->remove("d/e/f"));
  EXPECT_EQ(store_->head("d/e/f").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->get("d/e/f").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(get_ok("d/e/g"), "2");
  EXPECT_TRUE(store_->remove("d/e/f")) << "removing a missing key is not an error";
  EXPECT_TRUE(store_->remove("never/was"));
  ASSERT_TRUE(store_->remove("d/e/g"));
  auto l = store_->list_all("d/");
  ASSERT_TRUE(l);
  EXPECT_TRUE(l->empty());
  auto none = store_->list_all("no/such/prefix/");
  ASSERT_TRUE(none) << none.status().to_string();
  EXPECT_TRUE(none->empty());

  const std::string dst = scratch("not-created");
  EXPECT_EQ(store_->get_file("missing/key", dst).code(), StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dst)) << "a failed get_file leaves no file";
  auto pf = store_->put_file("from/missing/file", scratch("no-such-source"));
  EXPECT_FALSE(pf);
  EXPECT_EQ(store_->head("from/missing/file").status().code(), StatusCode::kNotFound);
}

TEST_P(StoreConformance, CreateOnly) {
  PutOptions once;
  once.create_only = true;
  ASSERT_TRUE(store_->put("c/lock", "first", once));
  Status st = store_->put("c/lock", "second", once);
  EXPECT_EQ(st.code(), StatusCode::kPreconditionFailed) << st.to_string();
  EXPECT_EQ(get_ok("c/lock"), "first");
  ASSERT_TRUE(store_->put("c/lock", "plain overwrite"));
  EXPECT_EQ(get_ok("c/lock"), "plain overwrite");
  ASSERT_TRUE(store_->remove("c/lock"));
  EXPECT_TRUE(store_->put("c/lock", "after remove", once));
  EXPECT_EQ(get_ok("c/lock"), "after remove");
}

TEST_P(StoreConformance, CreateOnlyThreadRace) {
  constexpr int kRacers = 8;
  for (int round = 0; round < 3; ++round) {
    const std::string key = "race-t/" + std::to_string(round);
    std::vector<std::unique_ptr<ObjectStore>> stores;
    for (int i = 0; i < kRacers; ++i) stores.push_back(reopen());
    std::atomic<int> ready{0};
    std::vector<Status> results(kRacers);
    std::vector<std::thread> threads;
    for (int i = 0; i < kRacers; ++i)
      threads.emplace_back([&, i] {
        ready.fetch_add(1);
        while (ready.load() < kRacers) std::this_thread::yield();
        PutOptions once;
        once.create_only = true;
        results[i] = stores[i]->put(key, "racer-" + std::to_string(i), once);
      });
    for (auto& t : threads) t.join();
    int winners = 0, winner = -1;
    for (int i = 0; i < kRacers; ++i) {
      if (results[i]) ++winners, winner = i;
      else EXPECT_EQ(results[i].code(), StatusCode::kPreconditionFailed) << results[i].to_string();
    }
    ASSERT_EQ(winners, 1) << "round " << round;
    EXPECT_EQ(get_ok(key), "racer-" + std::to_string(winner));
  }
}

// Separate processes (fork), each with its own store handle from the factory, released
// together through a pipe: the kernel/server must arbitrate, no in-process lock can help.
TEST_P(StoreConformance, CreateOnlyProcessRace) {
  constexpr int kRacers = 8;
  for (int round = 0; round < 3; ++round) {
    const std::string key = "race-p/" + std::to_string(round);
    int gate[2];
    ASSERT_EQ(::pipe(gate), 0);
    std::vector<pid_t> kids;
    for (int i = 0; i < kRacers; ++i) {
      pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::close(gate[1]);
        int code = 3;
        try {
          auto s = GetParam().factory(prefix_);
          char c;
          (void)!::read(gate[0], &c, 1);  // returns 0 when the parent closes the gate
          PutOptions once;
          once.create_only = true;
          Status st = s->put(key, "racer-" + std::to_string(i), once);
          code = st ? 0 : st.code() == StatusCode::kPreconditionFailed ? 1 : 2;
          if (code == 2) std::fprintf(stderr, "racer %d: %s\n", i, st.to_string().c_str());
        } catch (...) {
        }
        ::_exit(code);
      }
      kids.push_back(pid);
    }
    ::close(gate[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let them all reach the gate
    ::close(gate[1]);
    int winners = 0, losers = 0, winner = -1;
    for (int i = 0; i < kRacers; ++i) {
      int status = 0;
      ASSERT_EQ(::waitpid(kids[i], &status, 0), kids[i]);
      ASSERT_TRUE(WIFEXITED(status));
      if (WEXITSTATUS(status) == 0) ++winners, winner = i;
      if (WEXITSTATUS(status) == 1) ++losers;
    }
    EXPECT_EQ(winners, 1) << "round " << round;
    EXPECT_EQ(losers, kRacers - 1) << "round " << round;
    EXPECT_EQ(get_ok(key), "racer-" + std::to_string(winner));
  }
}

// Tens of MiB through put_file/get_file (multipart on S3), checked by sha256 of seeded data.
TEST_P(StoreConformance, LargeFileStreaming) {
  constexpr size_t kSize = 40u << 20;
  const std::string src = scratch("in.bin"), dst = scratch("out.bin");
  const std::string data = pattern_bytes(kSize, 42);
  {
    std::ofstream f(src, std::ios::binary);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    ASSERT_TRUE(f.good());
  }
  const std::string want = sha256_hex(data);
  Status st = store_->put_file("big/blob", src);
  ASSERT_TRUE(st) << st.to_string();
  auto h = store_->head("big/blob");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->size, kSize);
  st = store_->get_file("big/blob", dst);
  ASSERT_TRUE(st) << st.to_string();
  EXPECT_EQ(sha256_file_hex(dst), want);
  // Only the two files are left in the scratch folder: get_file's temp file was renamed.
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator(scratch_)) (void)e, ++n;
  EXPECT_EQ(n, 2);
  // A range from the middle, across any part boundary (parts are >= 5 MiB).
  GetOptions g;
  g.offset = (5u << 20) - 100;
  g.length = 1u << 20;
  auto r = store_->get("big/blob", g);
  ASSERT_TRUE(r) << r.status().to_string();
  EXPECT_EQ(sha256_hex(*r), sha256_hex(std::string_view(data).substr(g.offset, *g.length)));
  // get_file over an existing file replaces it.
  put_ok("small", "tiny");
  ASSERT_TRUE(store_->get_file("small", dst));
  std::ifstream in(dst, std::ios::binary);
  std::string back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(back, "tiny");
}

TEST_P(StoreConformance, KeyValidation) {
  const std::vector<std::string> bad = {"",           "/abs",        "a//b",      "a/../b",
                                        "..",         "a/./b",       "trailing/", std::string("nul\0byte", 8),
                                        ".brl-tmp-x", "d/.brl-tmp-x"};
  for (auto& k : bad) {
    EXPECT_EQ(store_->put(k, "x").code(), StatusCode::kInvalidArgument) << "put '" << k << "'";
    EXPECT_EQ(store_->get(k).status().code(), StatusCode::kInvalidArgument) << "get '" << k << "'";
    EXPECT_EQ(store_->head(k).status().code(), StatusCode::kInvalidArgument) << "head '" << k << "'";
    EXPECT_EQ(store_->remove(k).code(), StatusCode::kInvalidArgument) << "remove '" << k << "'";
  }
  ListOptions o;
  o.prefix = "../";
  EXPECT_EQ(store_->list(o).status().code(), StatusCode::kInvalidArgument);
  auto l = store_->list_all("");
  ASSERT_TRUE(l);
  EXPECT_TRUE(l->empty()) << "nothing was written";
}

TEST_P(StoreConformance, PrefixIsolation) {
  put_ok("mine", "1");
  auto sibling = GetParam().factory(prefix_ + "-sibling");
  auto l = sibling->list_all("");
  ASSERT_TRUE(l) << l.status().to_string();
  EXPECT_TRUE(l->empty());
  EXPECT_EQ(sibling->get("mine").status().code(), StatusCode::kNotFound);
}

}  // namespace brl::store::conformance

// Instantiates the suite for one backend. `factory` is a StoreFactory expression.
#define BRL_STORE_CONFORMANCE(backend, factory)                                                           \
  namespace brl::store::conformance {                                                                     \
  INSTANTIATE_TEST_SUITE_P(backend, StoreConformance, ::testing::Values(StoreBackend{#backend, factory}), \
                           [](const auto& info) { return info.param.name; });                             \
  }
