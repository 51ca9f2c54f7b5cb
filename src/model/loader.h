// Hugging Face model folders <-> Model: config.json + model.safetensors (or shards listed in
// model.safetensors.index.json), any of F32/F16/BF16 converted to the compute dtype. Every
// expected tensor must be present with its shape, and no unexpected tensor may be left over.
// Also random models and checkpoints for tests and benches (the project cannot download).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>

#include "model/config.h"
#include "model/llama.h"

namespace brl::model {

struct LoadOptions {
  torch::ScalarType dtype = torch::kFloat;  // compute dtype
};

Model load_model(const std::string& dir, const LoadOptions& opts = {});

// Writes dir/config.json and dir/model.safetensors (creating dir). save_dtype kUndefined keeps
// the model's dtype.
void save_model(Model& model, const std::string& dir, torch::ScalarType save_dtype = torch::ScalarType::Undefined);

// Weights ~ N(0, init_std), norm weights ~ 1 + N(0, 0.1), biases ~ N(0, init_std); seeded.
// On a CUDA device the weights are drawn there (seeded, but other values than the CPU's):
// benchmarks of 7B shapes would otherwise spend minutes drawing them on the CPU.
Model random_model(const ModelConfig& cfg, uint64_t seed, double init_std = 0.02,
                   torch::ScalarType dtype = torch::kFloat, torch::Device device = torch::kCPU);
void write_random_checkpoint(const ModelConfig& cfg, uint64_t seed, const std::string& dir,
                             torch::ScalarType save_dtype = torch::kFloat, double init_std = 0.02);

}  // namespace brl::model
