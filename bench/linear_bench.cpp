// linear_bench: y = x W^T for few rows (decode shapes), at::linear in F32 and BF16 against
// skinny_linear (src/model/skinny_linear.h) in F32 per instruction set and in BF16 (the best
// set), with the memory floor (F32 bytes of W / --gbps; half that for BF16). Medians; ms per call.
//   linear_bench [--threads N] [--repeats 20] [--gbps 38]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "model/threads.h"
#include "model/skinny_linear.h"

using namespace brl;

int main(int argc, char** argv) {
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  int64_t repeats = 20;
  double gbps = 38;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--threads") threads = std::stoi(v);
    else if (a == "--repeats") repeats = std::stoll(v);
    else if (a == "--gbps") gbps = std::stod(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  threads = brl::model::set_compute_threads(threads);
  c10::InferenceMode guard;
  at::manual_seed(0);
  auto ms = [&](auto&& f) {
    std::vector<double> t;
    for (int64_t r = 0; r <= repeats; ++r) {  // r == 0 warms up
      double s = bench::seconds_of(f);
      if (r) t.push_back(s * 1e3);
    }
    return bench::median(t);
  };
  const std::pair<model::SkinnyIsa, const char*> isas[] = {{model::SkinnyIsa::kAvx512, "avx512"},
                                                           {model::SkinnyIsa::kAvx2, "avx2"},
                                                           {model::SkinnyIsa::kGeneric, "generic"}};
  std::printf("threads %d, ms per call (median of %lld); floor = f32 bytes of W / %.0f GB/s\n", threads,
              (long long)repeats, gbps);
  std::printf("%3s %6s %7s | %8s %8s %8s | %8s %8s %8s | %8s\n", "M", "K", "N", "floor", "f32", "bf16", "avx512",
              "avx2", "generic", "bf16");
  for (int64_t K : {896, 4864}) {
    for (int64_t N : {896, 4864, 151936}) {
      if (K == 4864 && N != 896) continue;  // down_proj only
      auto w = at::randn({N, K}) * 0.02;
      auto wb = w.to(at::kBFloat16);
      for (int64_t M : {1, 4, 8, 16}) {
        auto x = at::randn({M, K});
        auto xb = x.to(at::kBFloat16);
        std::printf("%3lld %6lld %7lld | %8.3f %8.3f %8.3f |", (long long)M, (long long)K, (long long)N,
                    N * K * 4 / (gbps * 1e9) * 1e3, ms([&] { at::linear(x, w); }), ms([&] { at::linear(xb, wb); }));
        for (auto [isa, name] : isas) {
          if (model::skinny_isa_supported(isa)) std::printf(" %8.3f", ms([&] { model::skinny_linear(x, w, {}, isa); }));
          else std::printf(" %8s", "n/a");
        }
        if (model::skinny_linear_applies(xb, wb, {}))
          std::printf(" | %8.3f\n", ms([&] { model::skinny_linear(xb, wb, {}); }));
        else std::printf(" | %8s\n", "-");  // past kSkinnyMaxRowsBf16: ATen's is as fast
      }
    }
  }
  return 0;
}
