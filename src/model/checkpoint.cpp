#include "model/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include <mutex>

namespace brl::model {

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The function to recompute, kept in the autograd context until backward.
struct Recompute : torch::CustomClassHolder {
  std::function<torch::Tensor(const torch::Tensor&)> fn;
  explicit Recompute(std::function<torch::Tensor(const torch::Tensor&)> f) : fn(std::move(f)) {}
};

torch::Tensor rng_state(const torch::Device& d) {
  auto gen = at::globalContext().defaultGenerator(d);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}
void set_rng_state(const torch::Device& d, const torch::Tensor& s) {
  auto gen = at::globalContext().defaultGenerator(d);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(s);
}

struct Checkpoint : public torch::autograd::Function<Checkpoint> {
  // anchor: an empty tensor that requires grad, so that backward runs even when x does not
  // (the first layer's input: embeddings of a frozen table) while the parameters fn reads do.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& anchor,
                               c10::intrusive_ptr<Recompute> r) {
    ctx->saved_data["rng"] = rng_state(x.device());
    ctx->saved_data["fn"] = c10::IValue::make_capsule(r);
    ctx->save_for_backward({x});
    return r->fn(x);  // Function::apply runs forward with grad mode off: nothing is kept
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    auto r = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["fn"].toCapsule());
    const auto now = rng_state(x.device());
    set_rng_state(x.device(), ctx->saved_data["rng"].toTensor());
    torch::Tensor y;
    {
      at::AutoGradMode on(true);
      y = r->fn(x);
    }
    set_rng_state(x.device(), now);
    torch::autograd::backward({y}, {grads[0]});  // accumulates into the parameters' .grad
    return {ctx->needs_input_grad(0) ? x.grad() : torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};
}  // namespace

torch::Tensor checkpoint(std::function<torch::Tensor(const torch::Tensor&)> fn, const torch::Tensor& x) {
  if (!at::GradMode::is_enabled()) return fn(x);
  auto anchor = torch::empty({0}, x.options().dtype(at::kFloat).requires_grad(true));
  return Checkpoint::apply(x, anchor, c10::make_intrusive<Recompute>(std::move(fn)));
}

}  // namespace brl::model
