// Put/get throughput of the ObjectStore on one URL (S3 or a directory), one caller thread:
// small objects from memory (put/get), large ones through files (put_file/get_file, multipart
// on S3). Prints one JSON line per size. Driven by bench/s3_compare.sh.
//   s3_compare_bench URL SIZE_MIB COUNT SCRATCH_DIR
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "store/object_store.h"

using namespace brl;
using namespace brl::store;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s URL SIZE_MIB COUNT SCRATCH_DIR\n", argv[0]);
    return 2;
  }
  const std::string url = argv[1], scratch = argv[4];
  const size_t mib = std::stoul(argv[2]), count = std::stoul(argv[3]), size = mib << 20;
  const bool via_files = mib >= 16;
  try {
    auto store = open_store(url);
    std::mt19937_64 rng(1);
    std::string data(size, '\0');
    for (size_t i = 0; i + 8 <= size; i += 8) {
      uint64_t v = rng();
      std::memcpy(&data[i], &v, 8);
    }
    const std::string src = scratch + "/bench-src.bin", dst = scratch + "/bench-dst.bin";
    if (via_files) std::ofstream(src, std::ios::binary).write(data.data(), static_cast<std::streamsize>(size));
    auto key = [&](size_t i) { return "bench/" + std::to_string(mib) + "mib/" + std::to_string(i); };
    using Clock = std::chrono::steady_clock;
    auto t0 = Clock::now();
    for (size_t i = 0; i < count; ++i) {
      Status st = via_files ? store->put_file(key(i), src) : store->put(key(i), data);
      st.throw_if_error();
    }
    double put_s = std::chrono::duration<double>(Clock::now() - t0).count();
    t0 = Clock::now();
    for (size_t i = 0; i < count; ++i) {
      if (via_files) {
        store->get_file(key(i), dst).throw_if_error();
      } else {
        auto r = store->get(key(i));
        if (!r || r->size() != size) r.status().throw_if_error();
      }
    }
    double get_s = std::chrono::duration<double>(Clock::now() - t0).count();
    for (size_t i = 0; i < count; ++i) (void)store->remove(key(i));
    std::remove(src.c_str());
    std::remove(dst.c_str());
    double total = static_cast<double>(mib * count);
    std::printf(
        "{\"client\": \"bucketrl\", \"size_mib\": %zu, \"count\": %zu, \"put_mib_s\": %.1f, \"get_mib_s\": %.1f}\n",
        mib, count, total / put_s, total / get_s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "s3_compare_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
