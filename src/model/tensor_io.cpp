// safetensors <-> torch conversion.
#include "model/tensor_io.h"

#include <ATen/ATen.h>

#include "util/error.h"

namespace brl::model {

torch::ScalarType to_scalar_type(st::DType d) {
  switch (d) {
    case st::DType::F64: return at::kDouble;
    case st::DType::F32: return at::kFloat;
    case st::DType::F16: return at::kHalf;
    case st::DType::BF16: return at::kBFloat16;
    case st::DType::I64: return at::kLong;
    case st::DType::I32: return at::kInt;
    case st::DType::I16: return at::kShort;
    case st::DType::I8: return at::kChar;
    case st::DType::U8: return at::kByte;
    case st::DType::BOOL: return at::kBool;
  }
  BRL_ASSERT(false, "bad dtype");
}

st::DType to_st_dtype(torch::ScalarType t) {
  switch (t) {
    case at::kDouble: return st::DType::F64;
    case at::kFloat: return st::DType::F32;
    case at::kHalf: return st::DType::F16;
    case at::kBFloat16: return st::DType::BF16;
    case at::kLong: return st::DType::I64;
    case at::kInt: return st::DType::I32;
    case at::kShort: return st::DType::I16;
    case at::kChar: return st::DType::I8;
    case at::kByte: return st::DType::U8;
    case at::kBool: return st::DType::BOOL;
    default: throw UserError(std::string("tensor dtype ") + c10::toString(t) + " has no safetensors dtype");
  }
}

torch::Tensor view_tensor(const st::TensorView& v) {
  auto opts = at::TensorOptions().dtype(to_scalar_type(v.dtype));
  if (v.nbytes == 0) return at::empty(v.shape, opts);
  return at::from_blob(const_cast<uint8_t*>(v.data), v.shape, opts);
}

torch::Tensor copy_tensor(const st::TensorView& v, torch::ScalarType dtype) {
  auto t = view_tensor(v);
  if (dtype == at::ScalarType::Undefined || dtype == t.scalar_type()) return t.clone();
  return t.to(dtype);  // converts into fresh memory
}

st::TensorData tensor_data(const std::string& name, const torch::Tensor& t) {
  BRL_ASSERT(t.is_contiguous() && t.device().is_cpu(), "tensor_data needs a contiguous CPU tensor");
  st::TensorData d;
  d.name = name;
  d.dtype = to_st_dtype(t.scalar_type());
  d.shape.assign(t.sizes().begin(), t.sizes().end());
  d.data = t.data_ptr();
  d.nbytes = t.numel() * t.element_size();
  return d;
}

void save_tensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                  const std::map<std::string, std::string>& metadata) {
  std::vector<torch::Tensor> keep;
  std::vector<st::TensorData> data;
  for (auto& [name, t] : tensors) {
    keep.push_back(t.detach().cpu().contiguous());
    data.push_back(tensor_data(name, keep.back()));
  }
  st::write_safetensors(path, data, metadata);
}

std::map<std::string, torch::Tensor> load_tensors(const std::string& path, torch::ScalarType dtype) {
  auto f = st::SafetensorsFile::open(path);
  std::map<std::string, torch::Tensor> out;
  for (auto& n : f.names()) out[n] = copy_tensor(f.get(n), dtype);
  return out;
}

}  // namespace brl::model
