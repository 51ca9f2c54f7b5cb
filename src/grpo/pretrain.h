// The demo base model, made here (nothing can be downloaded): a small Llama-family model
// with a byte-level tokenizer, trained from scratch with supervised next-token loss on a
// built-in task's answers, and stopped early on purpose so that its held-out accuracy sits
// in a band (default 0.2-0.5): an imperfect base that GRPO has something to teach.
#pragma once

#include <string>

#include "model/config.h"
#include "tasks/task.h"

namespace brl::grpo {

struct PretrainOptions {
  std::string out_dir = "runs/base";
  int hidden_size = 128, num_layers = 4, num_heads = 4, num_kv_heads = 2, intermediate_size = 352;
  int batch_size = 64;
  int max_steps = 3000;
  double learning_rate = 3e-3;
  int eval_every = 50;
  int eval_examples = 200;
  double target_accuracy = 0.35;  // stop once held-out greedy accuracy reaches this
  uint64_t seed = 7;
};

struct PretrainResult {
  int steps = 0;
  double accuracy = 0, seconds = 0;
};

// Writes a byte-level BPE tokenizer.json (the 256 GPT-2 byte symbols, no merges, and
// <|endoftext|> = 256) plus tokenizer_config.json / generation_config.json into dir.
void write_byte_tokenizer(const std::string& dir);
model::ModelConfig demo_model_config(const PretrainOptions& o);
// Trains and writes an HF folder (config.json, model.safetensors, tokenizer files).
PretrainResult pretrain(tasks::Task& task, const PretrainOptions& o, bool progress = true);

}  // namespace brl::grpo
