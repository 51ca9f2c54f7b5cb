// Loading and saving HF model folders; random models.
#include "model/loader.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "util/safetensors.h"
#include "model/tensor_io.h"
#include "util/error.h"
#include "util/file.h"

namespace brl::model {

namespace fs = std::filesystem;

namespace {
std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Tensors a checkpoint may carry that the model does not use.
bool ignorable(const std::string& name, const ModelConfig& cfg) {
  if (name.find("rotary_emb.inv_freq") != std::string::npos) return true;  // old HF exports
  return cfg.tie_word_embeddings && name == "lm_head.weight";              // tied: the embedding serves
}
}  // namespace

Model load_model(const std::string& dir, const LoadOptions& opts) {
  const fs::path root(dir);
  if (!fs::is_directory(root))
    throw UserError("model folder " + dir + " does not exist",
                    "pass a Hugging Face model folder (config.json + *.safetensors)");
  ModelConfig cfg = ModelConfig::from_file((root / "config.json").string());
  Model model(cfg);

  // name -> shard file, and the shards themselves (mapped once each).
  std::map<std::string, std::string> where;
  std::map<std::string, st::SafetensorsFile> shards;
  const fs::path single = root / "model.safetensors", index = root / "model.safetensors.index.json";
  if (fs::exists(index)) {
    nlohmann::json j;
    try {
      std::ifstream in(index);
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw UserError(index.string() + ": not valid JSON: " + e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw UserError(index.string() + ": missing object \"weight_map\"");
    for (auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) throw UserError(index.string() + ": weight_map[\"" + name + "\"] is not a file name");
      std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos || f == "..")
        throw UserError(index.string() + ": shard name \"" + f + "\" must be a plain file name");
      where[name] = f;
      if (!shards.count(f)) {
        if (!fs::exists(root / f))
          throw UserError(index.string() + " lists shard " + f + " (for tensor \"" + name + "\") but " +
                          (root / f).string() + " does not exist");
        shards.emplace(f, st::SafetensorsFile::open((root / f).string()));
      }
    }
    for (auto& [f, sf] : shards)
      for (auto& n : sf.names()) {
        auto it = where.find(n);
        if (it == where.end() && !ignorable(n, cfg))
          throw UserError("shard " + (root / f).string() + " holds tensor \"" + n + "\" that " + index.string() +
                          " does not list");
      }
  } else if (fs::exists(single)) {
    shards.emplace("model.safetensors", st::SafetensorsFile::open(single.string()));
    for (auto& n : shards.at("model.safetensors").names()) where[n] = "model.safetensors";
  } else {
    throw UserError("model folder " + dir + " has neither model.safetensors nor model.safetensors.index.json",
                    "save the model in safetensors format");
  }

  std::set<std::string> used;
  for (auto& nt : model.named_tensors()) {
    auto it = where.find(nt.name);
    if (it == where.end())
      throw UserError(
          "model " + dir + ": missing tensor \"" + nt.name + "\" (expected shape " + shape_str(nt.shape) + ")",
          "the checkpoint does not match config.json (model_type " + cfg.model_type + ")");
    const auto& sf = shards.at(it->second);
    const auto* v = sf.find(nt.name);
    if (!v)
      throw UserError("model " + dir + ": tensor \"" + nt.name + "\" is listed in the index for " + it->second +
                      " but that shard does not hold it");
    if (v->shape != nt.shape)
      throw UserError("model " + dir + ": tensor \"" + nt.name + "\" in " + sf.label() + " has shape " +
                          shape_str(v->shape) + ", expected " + shape_str(nt.shape),
                      "check hidden_size / heads / intermediate_size in config.json");
    if (v->dtype != st::DType::F32 && v->dtype != st::DType::F16 && v->dtype != st::DType::BF16 &&
        v->dtype != st::DType::F64)
      throw UserError("model " + dir + ": tensor \"" + nt.name + "\" in " + sf.label() + " has dtype " +
                      st::dtype_name(v->dtype) + ", expected F32, F16 or BF16");
    *nt.tensor = copy_tensor(*v, opts.dtype);
    used.insert(nt.name);
  }
  for (auto& [name, file] : where)
    if (!used.count(name) && !ignorable(name, cfg))
      throw UserError("model " + dir + ": unexpected tensor \"" + name + "\" in " + file,
                      "the checkpoint does not match config.json (model_type " + cfg.model_type + ", " +
                          std::to_string(cfg.num_hidden_layers) + " layers)");
  model.set_requires_grad(false);
  return model;
}

void save_model(Model& model, const std::string& dir, torch::ScalarType save_dtype) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UserError("cannot create model folder " + dir + ": " + ec.message());
  ModelConfig cfg = model.config;
  auto dt = save_dtype == at::ScalarType::Undefined ? model.dtype() : save_dtype;
  cfg.torch_dtype = dt == at::kBFloat16 ? "bfloat16" : dt == at::kHalf ? "float16" : "float32";
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (auto& nt : model.named_tensors()) {
    BRL_ASSERT(nt.tensor->defined(), "saving a model with unset tensor " + nt.name);
    tensors.emplace_back(nt.name, nt.tensor->detach().to(dt));
  }
  save_tensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  write_file((fs::path(dir) / "config.json").string(), cfg.to_json().dump(2) + "\n");
}

Model random_model(const ModelConfig& cfg, uint64_t seed, double init_std, torch::ScalarType dtype,
                   torch::Device device) {
  Model m(cfg);
  auto gen = at::detail::createCPUGenerator(seed);
  auto opts = at::TensorOptions().dtype(at::kFloat);
  if (device.is_cuda()) at::manual_seed(seed);  // the device's default generator
  for (auto& nt : m.named_tensors()) {
    const bool is_norm = nt.name.find("norm") != std::string::npos;
    auto t = device.is_cuda() ? at::randn(nt.shape, opts.device(device)) : at::randn(nt.shape, gen, opts);
    t = is_norm ? 1.0 + 0.1 * t : init_std * t;
    *nt.tensor = t.to(dtype);
  }
  m.set_requires_grad(false);
  return m;
}

void write_random_checkpoint(const ModelConfig& cfg, uint64_t seed, const std::string& dir,
                             torch::ScalarType save_dtype, double init_std) {
  auto m = random_model(cfg, seed, init_std);
  save_model(m, dir, save_dtype);
}

}  // namespace brl::model
