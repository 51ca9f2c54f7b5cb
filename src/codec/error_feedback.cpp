// Error feedback: what quantization dropped is added to the next delta.
#include <cmath>

#include "codec/codec.h"
#include "util/error.h"

namespace brl::codec {

std::string ErrorFeedback::encode(const std::vector<Tensor>& delta, const Options& opt, std::vector<Tensor>* sent) {
  std::vector<Tensor> corrected = delta;
  for (auto& t : corrected) {
    auto it = residual_.find(t.name);
    if (it == residual_.end()) continue;
    if (it->second.size() != t.data.size())
      throw UserError("error feedback: tensor \"" + t.name + "\" has " + std::to_string(t.data.size()) +
                          " elements, its stored residual " + std::to_string(it->second.size()),
                      "the adapter shape changed; call reset() first");
    for (size_t i = 0; i < t.data.size(); ++i) t.data[i] += it->second[i];
  }
  std::string bytes = codec::encode(corrected, opt);
  auto decoded = codec::decode(bytes);
  BRL_ASSERT(decoded.is_ok(), "a payload we just encoded does not decode: " + decoded.status().to_string());
  for (size_t t = 0; t < corrected.size(); ++t) {
    std::vector<float>& r = corrected[t].data;  // becomes the residual in place
    const std::vector<float>& d = decoded->at(t).data;
    for (size_t i = 0; i < r.size(); ++i) r[i] -= d[i];
  }
  for (auto& t : corrected) residual_[t.name] = std::move(t.data);
  if (sent) *sent = std::move(*decoded);
  return bytes;
}

double ErrorFeedback::residual_norm() const {
  double s = 0;
  for (auto& [name, r] : residual_)
    for (float v : r) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

}  // namespace brl::codec
