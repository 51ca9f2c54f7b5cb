#include "grpo/optim.h"

#include <torch/optim/adamw.h>

#include <ATen/ATen.h>

#include <map>
#include <tuple>
#include <utility>

namespace brl::grpo {

double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  at::NoGradGuard ng;
  // One norm per tensor (a multi-tensor kernel on CUDA), then the norm of the norms.
  auto norms = at::_foreach_norm(grads, 2);
  at::Tensor total = norms.size() == 1 ? norms[0] : at::linalg_vector_norm(at::stack(norms), 2);
  at::Tensor coef = at::clamp_max(max_norm / (total + 1e-6), 1.0);
  at::_foreach_mul_(grads, coef);
  return total.item<double>();
}

void fused_adamw_step(torch::optim::AdamW& opt) {
  at::NoGradGuard ng;
  for (auto& group : opt.param_groups()) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    if (o.amsgrad()) {
      opt.step();
      return;
    }
  }
  for (auto& group : opt.param_groups()) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    // The kernel takes one list per (device, dtype, step count): normally a single one.
    struct Lists {
      std::vector<at::Tensor> p, g, m, v;
    };
    std::map<std::tuple<int, int, int, int64_t>, Lists> buckets;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = opt.state()[p.unsafeGetTensorImpl()];
      if (!slot) {  // opt.step()'s lazy initialisation
        auto st = std::make_unique<torch::optim::AdamWParamState>();
        st->step(0);
        st->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        st->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(st);
      }
      auto& st = static_cast<torch::optim::AdamWParamState&>(*slot);
      st.step(st.step() + 1);
      auto key = std::make_tuple(static_cast<int>(p.device().type()), static_cast<int>(p.device().index()),
                                 static_cast<int>(p.scalar_type()), st.step());
      auto& l = buckets[key];
      l.p.push_back(p), l.g.push_back(p.grad()), l.m.push_back(st.exp_avg()), l.v.push_back(st.exp_avg_sq());
    }
    const auto [beta1, beta2] = o.betas();
    for (auto& [key, l] : buckets) {
      // The step count as the kernel reads it: an f32 scalar beside the parameters, one
      // tensor shared by the list (read, never written).
      at::Tensor step = at::full({}, static_cast<double>(std::get<3>(key)), l.p[0].options().dtype(at::kFloat));
      std::vector<at::Tensor> steps(l.p.size(), step);
      at::_fused_adamw_(l.p, l.g, l.m, l.v, {}, steps, o.lr(), beta1, beta2, o.weight_decay(), o.eps(),
                        /*amsgrad=*/false, /*maximize=*/false);
    }
  }
}

}  // namespace brl::grpo
