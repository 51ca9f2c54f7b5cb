// store_bench: put/get throughput of any store URL (s3://bucket/prefix, file:///dir, a path)
// for objects of given sizes, the median over repetitions, in MiB/s. Measures the in-memory
// put/get and the streaming put_file/get_file (multipart on S3). Keys go under
// <prefix>/store-bench-<pid>/ and are removed afterwards.
//
//   store_bench URL [--sizes-mib 1,64] [--reps 5] [--json]
// Local numbers include the fsyncs a durable put makes; page-cache effects are not removed
// (a get right after its put reads from memory), as for the workers in practice.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "store/object_store.h"
#include "util/error.h"

using namespace brl;
using namespace brl::store;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_of(const std::function<void()>& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void must(const Status& st, const std::string& what) {
  if (!st) throw UserError(what + ": " + st.to_string());
}

int usage() {
  std::fprintf(stderr, "usage: store_bench URL [--sizes-mib 1,64] [--reps 5] [--json]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string url = argv[1];
  std::vector<uint64_t> sizes_mib = {1, 64};
  int reps = 5;
  bool json = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--json") json = true;
    else if (a == "--sizes-mib" && i + 1 < argc) {
      sizes_mib.clear();
      std::string s = argv[++i];
      for (size_t p = 0; p < s.size();) {
        size_t c = s.find(',', p);
        sizes_mib.push_back(std::stoull(s.substr(p, c - p)));
        p = c == std::string::npos ? s.size() : c + 1;
      }
    } else return usage();
  }
  try {
    auto store = open_store(url);
    const std::string base = "store-bench-" + std::to_string(::getpid()) + "/";
    const std::string tmp_in =
        (std::filesystem::temp_directory_path() / (base.substr(0, base.size() - 1) + "-in")).string();
    const std::string tmp_out = tmp_in.substr(0, tmp_in.size() - 3) + "-out";
    std::mt19937_64 rng(1);
    std::printf("%s  %s, median of %d\n", "store_bench", store->describe().c_str(), reps);
    std::printf("%8s %12s %12s %14s %14s   (MiB/s)\n", "size", "put", "get", "put_file", "get_file");
    for (uint64_t mib : sizes_mib) {
      const uint64_t n = mib << 20;
      std::string data(n, '\0');
      for (uint64_t i = 0; i + 8 <= n; i += 8) {
        uint64_t v = rng();
        std::memcpy(data.data() + i, &v, 8);
      }
      {
        std::ofstream f(tmp_in, std::ios::binary);
        f.write(data.data(), static_cast<std::streamsize>(n));
      }
      std::vector<double> put_s, get_s, putf_s, getf_s;
      for (int r = 0; r < reps; ++r) {
        const std::string key = base + std::to_string(mib) + "MiB/" + std::to_string(r);
        put_s.push_back(seconds_of([&] { must(store->put(key, data), "put " + key); }));
        get_s.push_back(seconds_of([&] {
          auto g = store->get(key);
          must(g.status(), "get " + key);
          if (g->size() != n) throw UserError("get " + key + ": short object");
        }));
        putf_s.push_back(seconds_of([&] { must(store->put_file(key + ".f", tmp_in), "put_file " + key); }));
        getf_s.push_back(seconds_of([&] { must(store->get_file(key + ".f", tmp_out), "get_file " + key); }));
        (void)store->remove(key);
        (void)store->remove(key + ".f");
      }
      auto rate = [&](const std::vector<double>& s) { return static_cast<double>(mib) / median(s); };
      std::printf("%5lluMiB %12.1f %12.1f %14.1f %14.1f\n", static_cast<unsigned long long>(mib), rate(put_s),
                  rate(get_s), rate(putf_s), rate(getf_s));
      if (json)
        std::printf(
            "{\"store\":\"%s\",\"size_mib\":%llu,\"reps\":%d,\"put_mibps\":%.1f,\"get_mibps\":%.1f,"
            "\"put_file_mibps\":%.1f,\"get_file_mibps\":%.1f}\n",
            store->describe().c_str(), static_cast<unsigned long long>(mib), reps, rate(put_s), rate(get_s),
            rate(putf_s), rate(getf_s));
    }
    std::filesystem::remove(tmp_in);
    std::filesystem::remove(tmp_out);
  } catch (const UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
