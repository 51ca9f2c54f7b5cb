// Thin bridge between the torch-free safetensors reader/writer and torch tensors.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "util/safetensors.h"

namespace brl::model {

torch::ScalarType to_scalar_type(st::DType d);
st::DType to_st_dtype(torch::ScalarType t);  // throws UserError for types safetensors lacks

// Zero-copy, read-only view of mapped bytes: valid while the SafetensorsFile lives; never write.
torch::Tensor view_tensor(const st::TensorView& v);
// An owning copy, converted to `dtype` (kUndefined: keep the stored dtype).
torch::Tensor copy_tensor(const st::TensorView& v, torch::ScalarType dtype = torch::kFloat);
// Describes a contiguous CPU tensor for the writer (the tensor must outlive the write).
st::TensorData tensor_data(const std::string& name, const torch::Tensor& t);

// Whole-file helpers (adapters, tests). Tensors are made contiguous CPU before writing.
void save_tensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                  const std::map<std::string, std::string>& metadata = {});
std::map<std::string, torch::Tensor> load_tensors(const std::string& path,
                                                  torch::ScalarType dtype = torch::ScalarType::Undefined);

}  // namespace brl::model
