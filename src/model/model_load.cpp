// load_model_on: resolve the names, load in that dtype, move, log.
#include "model/model_load.h"

#include "model/device.h"
#include "model/loader.h"
#include "util/log.h"

namespace brl::model {

Model load_model_on(const std::string& dir, const std::string& device, const std::string& dtype) {
  const auto dev = resolve_device(device);
  LoadOptions lo;
  lo.dtype = resolve_dtype(dtype, dev);
  auto m = load_model(dir, lo);
  m.to(dev);
  LOG_INFO("model on {} in {}", dev.str(), c10::toString(m.dtype()));
  return m;
}

}  // namespace brl::model
