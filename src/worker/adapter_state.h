// The live LoRA adapter of a model as plain float tensors (codec::Tensor, PEFT key names):
// what workers diff against their anchor and what global versions hold.
#pragma once

#include <string>
#include <vector>

#include "codec/codec.h"
#include "model/llama.h"

namespace brl::worker {

std::vector<codec::Tensor> snapshot(model::Model& m);
// Copies values into the attached adapter (same names and shapes; errors name `source`).
void assign(model::Model& m, const std::vector<codec::Tensor>& values, const std::string& source);
// a - b, tensor by tensor (same names and shapes).
std::vector<codec::Tensor> subtract(const std::vector<codec::Tensor>& a, const std::vector<codec::Tensor>& b);
// a += b, tensor by tensor (same names and shapes).
void add_into(std::vector<codec::Tensor>& a, const std::vector<codec::Tensor>& b);
double l2_norm(const std::vector<codec::Tensor>& t);

}  // namespace brl::worker
