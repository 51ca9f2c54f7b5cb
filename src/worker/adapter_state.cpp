#include "worker/adapter_state.h"

#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <map>

#include "lora/lora.h"
#include "util/error.h"

namespace brl::worker {

std::vector<codec::Tensor> snapshot(model::Model& m) {
  std::vector<codec::Tensor> out;
  for (auto& [name, t] : lora::adapter_tensors(m)) {
    auto c = t.detach().to(torch::kFloat).cpu().contiguous();
    codec::Tensor x{name, c.sizes().vec(), std::vector<float>(static_cast<size_t>(c.numel()))};
    std::memcpy(x.data.data(), c.data_ptr<float>(), x.data.size() * sizeof(float));
    out.push_back(std::move(x));
  }
  return out;
}

void assign(model::Model& m, const std::vector<codec::Tensor>& values, const std::string& source) {
  std::map<std::string, torch::Tensor> v;
  for (auto& t : values)
    v[t.name] = torch::from_blob(const_cast<float*>(t.data.data()), t.shape, torch::kFloat).clone();
  lora::set_adapter_tensors(m, v, source);
}

namespace {
// a += s b, tensor by tensor (same names and shapes); s = -1 is exact negation.
void axpy(std::vector<codec::Tensor>& a, const std::vector<codec::Tensor>& b, float s) {
  BRL_ASSERT(a.size() == b.size(), "adapter snapshots differ in tensor count");
  for (size_t i = 0; i < a.size(); ++i) {
    BRL_ASSERT(a[i].name == b[i].name && a[i].data.size() == b[i].data.size(),
               "adapter snapshots differ: " + a[i].name);
    for (size_t k = 0; k < a[i].data.size(); ++k) a[i].data[k] += s * b[i].data[k];
  }
}
}  // namespace

std::vector<codec::Tensor> subtract(const std::vector<codec::Tensor>& a, const std::vector<codec::Tensor>& b) {
  std::vector<codec::Tensor> d = a;
  axpy(d, b, -1.0f);
  return d;
}

void add_into(std::vector<codec::Tensor>& a, const std::vector<codec::Tensor>& b) { axpy(a, b, 1.0f); }

double l2_norm(const std::vector<codec::Tensor>& t) {
  double s = 0;
  for (auto& x : t)
    for (float v : x.data) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

}  // namespace brl::worker
