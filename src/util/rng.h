// splitmix64: a fast, well-mixed 64-bit hash, used to derive independent, platform-stable
// streams from (seed, index) pairs: per-completion sampling seeds, task problem streams.
#pragma once

#include <cstdint>

namespace brl {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace brl
