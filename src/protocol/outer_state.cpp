#include "protocol/outer_state.h"

#include <cstdlib>

#include "protocol/bucket.h"
#include "util/error.h"
#include "util/safetensors.h"

namespace brl::protocol {

namespace {
constexpr const char* kStateFormat = "brl-outer-1";
constexpr const char* kMasterPrefix = "master/";
}  // namespace

std::string encode_outer_state(const OuterState& s) {
  std::vector<st::TensorData> td;
  std::vector<std::string> names;  // master tensors are stored under a prefix the adapter's names never have
  names.reserve(s.master.size());
  for (auto& t : s.momentum)
    td.push_back({t.name, st::DType::F32, t.shape, t.data.data(), t.data.size() * sizeof(float)});
  for (auto& t : s.master) {
    names.push_back(kMasterPrefix + t.name);
    td.push_back({names.back(), st::DType::F32, t.shape, t.data.data(), t.data.size() * sizeof(float)});
  }
  return st::serialize_safetensors(td, {{"format", kStateFormat}, {"steps", std::to_string(s.steps)}});
}

Result<OuterState> decode_outer_state(std::string_view bytes, const std::string& label) {
  OuterState s;
  try {
    auto f = st::SafetensorsFile::from_buffer(bytes.data(), bytes.size(), label);
    auto fmt = f.metadata().find("format");
    auto steps = f.metadata().find("steps");
    if (fmt == f.metadata().end() || fmt->second != kStateFormat || steps == f.metadata().end())
      return Status(StatusCode::kCorrupt,
                    label + ": not an outer optimizer state (metadata format " + kStateFormat + " and steps expected)");
    char* end = nullptr;
    s.steps = std::strtoll(steps->second.c_str(), &end, 10);
    if (steps->second.empty() || *end != '\0' || s.steps < 0)
      return Status(StatusCode::kCorrupt, label + ": steps '" + steps->second + "' is not a count");
    auto t = finite_float_tensors(f, label, false);  // the state is exact: F32 only
    if (!t) return t.status();
    for (auto& x : *t) {
      if (x.name.rfind(kMasterPrefix, 0) == 0) {
        x.name.erase(0, std::string_view(kMasterPrefix).size());
        s.master.push_back(std::move(x));
      } else {
        s.momentum.push_back(std::move(x));
      }
    }
  } catch (const UserError& e) {
    return Status(StatusCode::kCorrupt, e.what());
  }
  return s;
}

}  // namespace brl::protocol
