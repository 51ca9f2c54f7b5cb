// The whole configuration of a training run, read from a TOML file whose sections use
// TRL's and PEFT's names ([model], [lora], [grpo], [task], [train]), with every key
// overridable from the command line (`--set grpo.learning_rate=1e-5`, or a bare key when
// it is unique). Unknown keys and bad values are errors that name the key.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "config/async_config.h"
#include "config/grpo_config.h"
#include "config/lora_config.h"
#include "tasks/task.h"

namespace brl {

struct ModelRef {
  std::string path;             // HF model folder
  std::string dtype = "auto";   // auto: bfloat16 on a GPU, float32 on the CPU
  std::string device = "auto";  // auto: the GPU when this machine has one (each worker decides)
};

// The held-out figure a run's target is compared with: greedy accuracy, or sampled pass@1.
enum class TargetMetric { accuracy, pass_at_1 };
inline const EnumNames<TargetMetric> kTargetMetrics{{"accuracy", "pass_at_1"}};
inline void to_json(nlohmann::json& j, TargetMetric e) { j = kTargetMetrics(e); }

struct TrainConfig {
  std::string output_dir = "runs/train";
  int eval_steps = 10;  // evaluate on held-out prompts every N steps (0 = only at end)
  int save_steps = 10;  // adapter checkpoint every N steps
  int logging_steps = 1;
  bool logs_step(int64_t step) const { return logging_steps > 0 && step % logging_steps == 0; }
  // TRL's log_completions: every logging step's prompts, completions, rewards and advantages
  // (train: <output_dir>/completions.jsonl; a worker: its log lines in the bucket), and
  // num_completions_to_print of them on the console (unset: all).
  bool log_completions = false;
  std::optional<int> num_completions_to_print;
  int eval_max_examples = 200;
  double eval_temperature = 0.0;  // greedy
  int eval_pass_k = -1;           // the evaluator's pass@k samples per prompt: -1 = grpo.eval_generations(), 0 = off
  int eval_pass_samples = 0;      // answers sampled per prompt for it, n >= k (0 = k): less noise
  int threads = 0;                // 0 = all cores
};

struct RunConfig {
  ModelRef model;
  LoraConfig lora;
  grpo::GrpoConfig grpo;
  tasks::TaskOptions task;
  TrainConfig train;
  SyncConfig sync;
  ProxyConfig proxy;
  AggregationConfig aggregation;
  SecurityConfig security;

  static RunConfig from_toml_file(const std::string& path);
  // TOML, or JSON when the name ends in .json (what `demo --print-config` and run.json hold).
  static RunConfig from_file(const std::string& path);
  static RunConfig from_toml_string(const std::string& text, const std::string& source);
  void apply_overrides(const std::vector<std::string>& kvs);
  void validate() const;
  nlohmann::json to_json();  // the resolved config (printed and stored at start)
  // Sets the keys present in j ({section: {key: value}}); errors name `source` and the key.
  void apply_json(const nlohmann::json& j, const std::string& source);

  // Every key as run.toml: `key = value  # meaning`, unset optional keys commented out. Reads
  // back as this config (`bucketrl config`).
  std::string to_toml();
  // The configuration reference: per section where its names come from, then every key's
  // kind, default (this config's value) and meaning, as Markdown (docs/configuration.md).
  std::string reference_markdown();
};

}  // namespace brl
