// A model folder loaded where a command or a run asks ([model] device / --device, and dtype:
// "auto" = bfloat16 on a GPU, float32 on the CPU): one place for every command and the
// trainer's session, so they resolve names and log the placement alike.
#pragma once

#include <string>

#include "model/llama.h"

namespace brl::model {

Model load_model_on(const std::string& dir, const std::string& device, const std::string& dtype = "auto");

}  // namespace brl::model
