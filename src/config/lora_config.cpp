#include "config/lora_config.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace brl {

namespace {
const std::vector<std::string> kAllLinear = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                             "gate_proj", "up_proj", "down_proj"};
}

double LoraConfig::scale() const {
  return use_rslora ? lora_alpha / std::sqrt(static_cast<double>(r)) : lora_alpha / r;
}

std::vector<std::string> LoraConfig::resolved_modules() const {
  std::vector<std::string> out;
  for (const auto& m : target_modules) {
    if (m == "all-linear" || m == "all_linear") return kAllLinear;
    std::string full = m.size() <= 4 ? m + "_proj" : m;  // q -> q_proj, gate -> gate_proj
    if (std::find(kAllLinear.begin(), kAllLinear.end(), full) == kAllLinear.end())
      throw UserError(
          "lora.target_modules: unknown module '" + m + "'",
          "use q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (or q, k, ...) or \"all-linear\"");
    if (std::find(out.begin(), out.end(), full) == out.end()) out.push_back(full);
  }
  return out;
}

ConfigTable LoraConfig::table() {
  ConfigTable t("lora");
  t.add("r", &r, "adapter rank")
      .add("lora_alpha", &lora_alpha, "scaling numerator: scale = lora_alpha / r")
      .add("lora_dropout", &lora_dropout, "dropout on the adapter input during training")
      .add("target_modules", &target_modules, "modules to adapt, or \"all-linear\"")
      .add("use_rslora", &use_rslora, "rank-stabilised scaling lora_alpha / sqrt(r)")
      .add("init_seed", &init_seed, "seed of the A matrices' initialisation");
  return t;
}

void LoraConfig::validate() const {
  if (r < 1) throw UserError("lora config: r (" + std::to_string(r) + ") must be >= 1");
  if (!(lora_alpha > 0)) throw UserError("lora config: lora_alpha (" + std::to_string(lora_alpha) + ") must be > 0");
  if (!(lora_dropout >= 0 && lora_dropout < 1))
    throw UserError("lora config: lora_dropout (" + std::to_string(lora_dropout) + ") must be in [0, 1)");
  if (target_modules.empty())
    throw UserError("lora config: target_modules is empty", "e.g. target_modules = \"all-linear\"");
  (void)resolved_modules();
}

}  // namespace brl
