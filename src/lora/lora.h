// LoRA adapters on a Model (PEFT semantics): attach to chosen projections with PEFT's
// default init (A Kaiming-uniform, B zero), enumerate trainable tensors, save/load in PEFT's
// exact layout (adapter_model.safetensors + adapter_config.json), merge into the base.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

#include "config/lora_config.h"
#include "model/llama.h"

namespace brl::lora {

// Fills the LoRA slot of every targeted projection. A ~ U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's
// kaiming_uniform_(a=sqrt(5)), PEFT's default), B = 0, so the adapted model starts equal to
// the base. Seeded by cfg.init_seed. Throws if an adapter is already attached.
void attach(model::Model& m, const LoraConfig& cfg);
void detach(model::Model& m);

// "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" -> tensor, for every slot.
// The tensors are the live slots (shared storage): optimizers train them in place.
std::vector<std::pair<std::string, torch::Tensor>> adapter_tensors(model::Model& m);
// The trainable tensors (requires_grad set on).
std::vector<torch::Tensor> parameters(model::Model& m);

// Copies values into the attached slots (same key names and shapes; errors name the key).
void set_adapter_tensors(model::Model& m, const std::map<std::string, torch::Tensor>& values,
                         const std::string& source);

// PEFT folder: adapter_model.safetensors + adapter_config.json.
void save_peft(model::Model& m, const LoraConfig& cfg, const std::string& dir,
               const std::string& base_model_name_or_path = "");
// Just adapter_config.json (for adapters whose tensors were written elsewhere).
void write_peft_config(const LoraConfig& cfg, const std::string& dir, const std::string& base_model_name_or_path = "");
// Reads adapter_config.json (r, lora_alpha, target_modules, use_rslora, lora_dropout) and the
// tensors; attaches them to m (detaching any previous adapter). Returns the config read.
LoraConfig load_peft(model::Model& m, const std::string& dir);
LoraConfig read_peft_config(const std::string& dir);

// W += scale * B A for every slot, then detaches: the result is a plain model.
void merge(model::Model& m);

}  // namespace brl::lora
