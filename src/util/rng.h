// splitmix64: a fast, well-mixed 64-bit hash, used to derive independent, platform-stable
// streams from (seed, index) pairs: per-completion sampling seeds, task problem streams.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace brl {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A permutation of 0 .. n-1 by Fisher-Yates from the splitmix64 stream started at `seed`: the
// same on every machine.
inline std::vector<uint64_t> permutation(uint64_t n, uint64_t seed) {
  std::vector<uint64_t> p(n);
  for (uint64_t j = 0; j < n; ++j) p[j] = j;
  for (uint64_t j = n; j > 1; --j) std::swap(p[j - 1], p[(seed = splitmix64(seed)) % j]);
  return p;
}

}  // namespace brl
