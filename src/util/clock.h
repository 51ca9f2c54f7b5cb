// The clock for intervals, deadlines and timings: steady (the wall clock jumps); bucket
// records carry wall times from protocol::now_ms().
#pragma once

#include <chrono>

namespace brl {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace brl
