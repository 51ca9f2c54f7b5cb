// LoRA adapter configuration with PEFT's LoraConfig names (adapter_config.json keys).
#pragma once

#include <string>
#include <vector>

#include "util/config_table.h"

namespace brl {

struct LoraConfig {
  int r = 8;
  double lora_alpha = 16;
  double lora_dropout = 0.0;
  // Module names as in PEFT: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj,
  // short forms q k v o gate up down, or "all-linear".
  std::vector<std::string> target_modules = {"q_proj", "v_proj"};
  bool use_rslora = false;
  int64_t init_seed = 0;  // seed for A's Kaiming-uniform init (PEFT's default init)

  double scale() const;                               // lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA
  std::vector<std::string> resolved_modules() const;  // full proj names, "all-linear" expanded
  ConfigTable table();
  void validate() const;
};

}  // namespace brl
