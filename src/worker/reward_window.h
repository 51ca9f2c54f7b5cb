// The running sums of a worker's steps since its last sync: what its next update header
// reports (protocol::UpdateStats). Sample-weighted, so mean and std are over completions.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>

#include "protocol/update.h"

namespace brl::worker {

struct StepSample {  // what one GRPO step contributes
  int64_t samples = 0;
  double reward_mean = 0, reward_std = 0, accuracy = 0, frac_reward_zero_std = 0;
};

class RewardWindow {
 public:
  void add(const StepSample& s) {
    ++steps_;
    samples_ += s.samples;
    reward_sum_ += s.reward_mean * s.samples;
    reward_sq_ += (s.reward_std * s.reward_std + s.reward_mean * s.reward_mean) * s.samples;
    acc_sum_ += s.accuracy * s.samples;
    zero_std_sum_ += s.frac_reward_zero_std * s.samples;
  }
  int64_t steps() const { return steps_; }
  int64_t samples() const { return samples_; }
  double mean() const { return samples_ ? reward_sum_ / samples_ : 0; }
  // The std of all completions' rewards: from each step's mean and std (parallel axis theorem).
  double std() const { return samples_ ? std::sqrt(std::max(0.0, reward_sq_ / samples_ - mean() * mean())) : 0; }
  double accuracy() const { return samples_ ? acc_sum_ / samples_ : 0; }
  double frac_reward_zero_std() const { return samples_ ? zero_std_sum_ / samples_ : 0; }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  protocol::UpdateStats stats() const {
    return {steps_, samples_, mean(), std(), accuracy(), frac_reward_zero_std(), seconds()};
  }

 private:
  int64_t steps_ = 0, samples_ = 0;
  double reward_sum_ = 0, reward_sq_ = 0, acc_sum_ = 0, zero_std_sum_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace brl::worker
