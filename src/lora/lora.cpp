#include "lora/lora.h"

#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "model/tensor_io.h"
#include "util/error.h"
#include "util/file.h"

namespace brl::lora {

namespace fs = std::filesystem;

namespace {
const std::string kPrefix = "base_model.model.";

// "model.layers.3.self_attn.q_proj" -> "q_proj"
std::string leaf(const std::string& module) { return module.substr(module.rfind('.') + 1); }
}  // namespace

void attach(model::Model& m, const LoraConfig& cfg) {
  cfg.validate();
  auto wanted = cfg.resolved_modules();
  std::set<std::string> targets(wanted.begin(), wanted.end());
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(cfg.init_seed));
  for (auto& [name, lin] : m.projections()) {
    if (lin->lora) throw UserError("an adapter is already attached to " + name, "detach it first");
    if (!targets.count(leaf(name))) continue;
    int64_t in = lin->in_features(), out = lin->out_features();
    double bound = 1.0 / std::sqrt(static_cast<double>(in));
    model::LoraSlot s;
    // Factors in f32 over a half/bf16 base (PEFT's autocast_adapter_dtype): AdamW's small
    // updates would round away in bf16. Drawn on the CPU so a seed gives the same adapter anywhere.
    auto opts = lin->weight.options().dtype(at::kFloat).requires_grad(false);
    if (lin->weight.scalar_type() == at::kDouble) opts = opts.dtype(at::kDouble);
    s.A = at::empty({cfg.r, in}, opts.device(at::kCPU)).uniform_(-bound, bound, gen).to(opts.device());  // [r, in]
    s.B = at::zeros({out, cfg.r}, opts);                                                                 // [out, r]
    s.A.set_requires_grad(true);
    s.B.set_requires_grad(true);
    s.scale = cfg.scale();
    s.dropout = cfg.lora_dropout;
    lin->lora = s;
  }
}

void detach(model::Model& m) {
  for (auto& [name, lin] : m.projections()) lin->lora.reset();
}

std::vector<std::pair<std::string, torch::Tensor>> adapter_tensors(model::Model& m) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto& [name, lin] : m.projections()) {
    if (!lin->lora) continue;
    out.emplace_back(kPrefix + name + ".lora_A.weight", lin->lora->A);
    out.emplace_back(kPrefix + name + ".lora_B.weight", lin->lora->B);
  }
  return out;
}

std::vector<torch::Tensor> parameters(model::Model& m) {
  std::vector<torch::Tensor> p;
  for (auto& [k, t] : adapter_tensors(m)) p.push_back(t);
  return p;
}

void set_adapter_tensors(model::Model& m, const std::map<std::string, torch::Tensor>& values,
                         const std::string& source) {
  auto slots = adapter_tensors(m);
  std::set<std::string> seen;
  torch::NoGradGuard ng;
  for (auto& [key, t] : slots) {
    auto it = values.find(key);
    if (it == values.end()) throw UserError(source + ": missing adapter tensor '" + key + "'");
    if (it->second.sizes() != t.sizes()) {
      std::ostringstream s;
      s << source << ": adapter tensor '" << key << "' has shape " << it->second.sizes() << ", expected " << t.sizes();
      throw UserError(s.str(), "the adapter's r and target modules must match the run's LoRA config");
    }
    t.copy_(it->second);
    seen.insert(key);
  }
  for (auto& [key, v] : values)
    if (!seen.count(key))
      throw UserError(source + ": unexpected adapter tensor '" + key + "'",
                      "it matches no adapted module of this model");
}

LoraConfig read_peft_config(const std::string& dir) {
  std::string path = (fs::path(dir) / "adapter_config.json").string();
  std::ifstream f(path);
  if (!f)
    throw UserError("cannot read '" + path + "'",
                    "a PEFT adapter folder holds adapter_config.json and adapter_model.safetensors");
  auto j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw UserError(path + ": not valid JSON");
  if (j.value("peft_type", "") != "LORA")
    throw UserError(path + ": peft_type is '" + j.value("peft_type", "") + "', expected \"LORA\"");
  LoraConfig c;
  auto num = [&](const char* k, auto def) {
    if (!j.contains(k) || j[k].is_null()) return def;
    if (!j[k].is_number()) throw UserError(path + ": '" + std::string(k) + "' must be a number");
    return j[k].get<decltype(def)>();
  };
  c.r = num("r", 8);
  c.lora_alpha = num("lora_alpha", 8.0);
  c.lora_dropout = num("lora_dropout", 0.0);
  c.use_rslora = j.value("use_rslora", false);
  if (j.value("fan_in_fan_out", false))
    throw UserError(path + ": fan_in_fan_out = true is not supported (GPT-2 Conv1D layouts)");
  if (j.contains("target_modules")) {
    auto& t = j["target_modules"];
    if (t.is_string()) c.target_modules = {t.get<std::string>()};
    else if (t.is_array()) c.target_modules = t.get<std::vector<std::string>>();
    else throw UserError(path + ": target_modules must be a string or a list");
  }
  c.validate();
  return c;
}

LoraConfig load_peft(model::Model& m, const std::string& dir) {
  LoraConfig c = read_peft_config(dir);
  std::string st = (fs::path(dir) / "adapter_model.safetensors").string();
  // Read in f32 (f64 for f64 models): slots over a bf16 base are f32 (attach).
  auto values = model::load_tensors(st, m.dtype() == at::kDouble ? at::kDouble : at::kFloat);
  detach(m);
  // Attach only where the file has tensors (PEFT may list modules by regex); shapes give r.
  std::set<std::string> present;
  for (auto& [k, v] : values) {
    if (k.rfind(kPrefix, 0) != 0 || k.size() < 16)
      throw UserError(st + ": unexpected tensor '" + k + "'", "PEFT keys start with base_model.model.");
    std::string mod = k.substr(kPrefix.size());
    auto p = mod.rfind(".lora_");
    if (p == std::string::npos) throw UserError(st + ": unexpected tensor '" + k + "'");
    present.insert(mod.substr(0, p));
  }
  c.target_modules.clear();
  for (auto& [name, lin] : m.projections())
    if (present.count(name)) {
      std::string l = leaf(name);
      if (std::find(c.target_modules.begin(), c.target_modules.end(), l) == c.target_modules.end())
        c.target_modules.push_back(l);
    }
  if (c.target_modules.empty()) throw UserError(st + ": no tensor matches a module of this model");
  attach(m, c);
  // attach() adapts every layer of a targeted kind; an adapter covering only some layers
  // leaves the others zero (B = 0 is the identity) unless the file has them.
  for (auto& [name, lin] : m.projections())
    if (lin->lora && !present.count(name)) {
      std::string a = kPrefix + name + ".lora_A.weight", b = kPrefix + name + ".lora_B.weight";
      values[a] = lin->lora->A.detach().clone();
      values[b] = at::zeros_like(lin->lora->B);
    }
  set_adapter_tensors(m, values, st);
  return c;
}

void save_peft(model::Model& m, const LoraConfig& cfg, const std::string& dir, const std::string& base) {
  fs::create_directories(dir);
  std::vector<std::pair<std::string, torch::Tensor>> ts;
  for (auto& [k, t] : adapter_tensors(m)) ts.emplace_back(k, t.detach().to(torch::kFloat).contiguous());
  model::save_tensors((fs::path(dir) / "adapter_model.safetensors").string(), ts, {{"format", "pt"}});
  write_peft_config(cfg, dir, base);
}

void write_peft_config(const LoraConfig& cfg, const std::string& dir, const std::string& base) {
  std::vector<std::string> modules;
  for (auto& x : cfg.resolved_modules()) modules.push_back(x);
  nlohmann::json j = {{"peft_type", "LORA"},
                      {"task_type", "CAUSAL_LM"},
                      {"r", cfg.r},
                      {"lora_alpha", cfg.lora_alpha},
                      {"lora_dropout", cfg.lora_dropout},
                      {"target_modules", modules},
                      {"use_rslora", cfg.use_rslora},
                      {"bias", "none"},
                      {"fan_in_fan_out", false},
                      {"inference_mode", true},
                      {"init_lora_weights", true},
                      {"base_model_name_or_path", base}};
  write_file((fs::path(dir) / "adapter_config.json").string(), j.dump(2) + "\n");
}

void merge(model::Model& m) {
  torch::NoGradGuard ng;
  for (auto& [name, lin] : m.projections()) {
    if (!lin->lora) continue;
    auto& s = *lin->lora;
    lin->weight.add_(at::matmul(s.B, s.A).to(lin->weight.dtype()), s.scale);  // [out, in]
    lin->lora.reset();
  }
}

}  // namespace brl::lora
