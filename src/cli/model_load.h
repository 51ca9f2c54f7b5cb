// The model of a command that takes --model DIR and --device: loaded in the dtype asked for
// ("auto": bfloat16 on a GPU, float32 on the CPU) and moved to the device.
#pragma once

#include <string>

#include "model/llama.h"

namespace brl::cli {

model::Model load_model_on(const std::string& dir, const std::string& device, const std::string& dtype = "auto");

}  // namespace brl::cli
