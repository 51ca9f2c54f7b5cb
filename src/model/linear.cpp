// Linear + LoRA forward.
#include "model/linear.h"

#include <ATen/ATen.h>

#include "model/skinny_linear.h"

namespace brl::model {

torch::Tensor Linear::forward(const torch::Tensor& x, bool adapters_enabled, bool training,
                              torch::Tensor* lora_x) const {
  if (!lora || !adapters_enabled || !lora->A.defined()) return fast_linear(x, weight, bias);
  // Rows flattened: a [B, T, in] input with a bias would make the base's output a view of
  // addmm's, and the in-place add below would then cost autograd a copy of its gradient.
  auto x2 = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});
  auto y = fast_linear(x2, weight, bias);  // [rows, out]; few-row F32/BF16 (decode): skinny_linear
  // The adapter may be kept in f32 over a bf16 base (as PEFT's autocast_adapter_dtype): its
  // branch runs in the adapter's dtype and is added back in the base's.
  // One cast per input, not per projection: on a GPU q, k and v would cast the same rows three
  // times forward and round three gradients back; shared, those are summed in f32 and cast once.
  torch::Tensor xl;
  if (x2.scalar_type() == lora->A.scalar_type()) xl = x2;
  else if (lora_x && lora_x->defined() && lora_x->scalar_type() == lora->A.scalar_type()) xl = *lora_x;
  else {
    xl = x2.to(lora->A.scalar_type());
    if (lora_x) *lora_x = xl;
  }
  auto xin = (training && lora->dropout > 0) ? at::dropout(xl, lora->dropout, true) : xl;
  // The scale on the r-wide side, not on the out-wide product: one pass over [rows, out] fewer
  // each way.
  auto h = at::linear(xin, lora->A);  // [rows, r]
  if (lora->scale != 1.0) h = h * lora->scale;
  auto d = at::linear(h, lora->B);  // [rows, out]
  // Added in place (y is no input of anything's backward). On a GPU a bf16 y takes the f32
  // branch in one pass (summed in f32, rounded once); the CPU's kernels would cast y to f32 and
  // back around the add, so there the branch is rounded to y's dtype first.
  if (d.scalar_type() == y.scalar_type() || y.is_cuda()) y.add_(d);
  else y.add_(d.to(y.scalar_type()));
  if (x.dim() == 2) return y;
  auto shape = x.sizes().vec();
  shape.back() = y.size(-1);
  return y.view(shape);
}

}  // namespace brl::model
