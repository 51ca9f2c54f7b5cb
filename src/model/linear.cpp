// Linear + LoRA forward.
#include "model/linear.h"

#include <ATen/ATen.h>

#include "model/skinny_linear.h"

namespace brl::model {

torch::Tensor Linear::forward(const torch::Tensor& x, bool adapters_enabled, bool training) const {
  auto y = fast_linear(x, weight, bias);  // [..., out]; few-row F32 (decode): skinny_linear
  if (lora && adapters_enabled && lora->A.defined()) {
    auto xin = (training && lora->dropout > 0) ? at::dropout(x, lora->dropout, true) : x;
    auto h = at::linear(xin, lora->A);                 // [..., r]
    y = y + at::linear(h, lora->B) * lora->scale;      // [..., out]
  }
  return y;
}

}  // namespace brl::model
