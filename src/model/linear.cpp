// Linear + LoRA forward.
#include "model/linear.h"

#include <ATen/ATen.h>

#include "model/skinny_linear.h"

namespace brl::model {

torch::Tensor Linear::forward(const torch::Tensor& x, bool adapters_enabled, bool training) const {
  auto y = fast_linear(x, weight, bias);  // [..., out]; few-row F32 (decode): skinny_linear
  if (lora && adapters_enabled && lora->A.defined()) {
    // The adapter may be kept in f32 over a bf16 base (as PEFT's autocast_adapter_dtype): its
    // branch runs in the adapter's dtype and is added back in the base's.
    auto xl = x.scalar_type() == lora->A.scalar_type() ? x : x.to(lora->A.scalar_type());
    auto xin = (training && lora->dropout > 0) ? at::dropout(xl, lora->dropout, true) : xl;
    auto h = at::linear(xin, lora->A);              // [..., r]
    auto d = at::linear(h, lora->B) * lora->scale;  // [..., out]
    y = y + (d.scalar_type() == y.scalar_type() ? d : d.to(y.scalar_type()));
  }
  return y;
}

}  // namespace brl::model
