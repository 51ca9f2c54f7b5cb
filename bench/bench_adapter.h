// The adapter the benchmarks put on a random model: what a GRPO worker trains.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "lora/lora.h"

namespace brl::bench {

// LoRA of rank r on all seven linear modules (alpha 2r), every factor drawn from N(0, 0.01):
// B is zero at init, and a zero B would leave the branch's products nothing to compute.
inline void attach_random_adapter(model::Model& m, int64_t r) {
  LoraConfig lc;
  lc.r = static_cast<int>(r);
  lc.lora_alpha = 2.0 * static_cast<double>(r);
  lc.target_modules = {"all-linear"};
  lora::attach(m, lc);
  at::NoGradGuard ng;
  for (auto& p : lora::parameters(m)) p.normal_(0, 0.01);
}

}  // namespace brl::bench
