#include "config/run_config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace brl {

namespace {

nlohmann::json toml_to_json(const toml::node& n) {
  if (auto t = n.as_table()) {
    nlohmann::json j = nlohmann::json::object();
    for (auto& [k, v] : *t) j[std::string(k.str())] = toml_to_json(v);
    return j;
  }
  if (auto a = n.as_array()) {
    nlohmann::json j = nlohmann::json::array();
    for (auto& v : *a) j.push_back(toml_to_json(v));
    return j;
  }
  if (auto v = n.as_string()) return v->get();
  if (auto v = n.as_integer()) return v->get();
  if (auto v = n.as_floating_point()) return v->get();
  if (auto v = n.as_boolean()) return v->get();
  // Dates and times: not used by any key; keep their TOML text for the error message.
  return std::string("<date/time>");
}

ConfigTable model_table(ModelRef& m) {
  ConfigTable t("model");
  t.add("path", &m.path, "Hugging Face model folder")
      .add("dtype", &m.dtype, "weights: auto (bfloat16 on a GPU, float32 on the CPU) | float32 | bfloat16")
      .add("device", &m.device, "auto (a GPU when there is one) | cpu | cuda | cuda:N");
  return t;
}

ConfigTable task_table(tasks::TaskOptions& o) {
  ConfigTable t("task");
  t.add("name", &o.name, "arithmetic | countdown | jsonl")
      .add("dataset_path", &o.dataset_path, "jsonl: training prompts")
      .add("eval_path", &o.eval_path, "jsonl: held-out prompts (default: every 10th example)")
      .add("num_eval", &o.num_eval, "held-out examples of a built-in task")
      .add("max_operand", &o.max_operand, "arithmetic: operands in [0, max_operand]")
      .add("operations", &o.operations, "arithmetic: operators, a subset of \"+-*\"")
      .add("format_reward", &o.format_reward, "add the format reward")
      .add("format_weight", &o.format_weight, "weight of the format reward")
      .add("reward_commands", &o.reward_commands, "external reward commands (JSON lines in, numbers out)")
      .add("tool_command", &o.tool_command,
           "tool calling: a command that runs the model's tool calls (JSON lines in, one JSON result per line out); "
           "the tools are each example's \"tools\" (docs/configuration.md, Tool calling)")
      .add("response_template", &o.response_template,
           "with tool_command: how the model's turns are parsed for tool calls: \"auto\" (the model's "
           "tokenizer_config.json response_template, else the format its chat template writes), \"qwen3\", "
           "\"llama3\", or a JSON file in transformers' response_template format")
      .add("seed", &o.seed, "task seed (problem streams, held-out set, dataset order)")
      .add("shuffle_dataset", &o.shuffle_dataset,
           "jsonl: train on each shard's examples in a new order every epoch, drawn from the seed (TRL's "
           "shuffle_dataset); false: file order");
  return t;
}

ConfigTable train_table(TrainConfig& c) {
  ConfigTable t("train");
  t.add("output_dir", &c.output_dir, "checkpoints and logs")
      .add("eval_steps", &c.eval_steps, "evaluate every N steps (0 = at the end only)")
      .add("save_steps", &c.save_steps, "save the adapter every N steps")
      .add("logging_steps", &c.logging_steps, "log every N steps")
      .add("log_completions", &c.log_completions,
           "log each logging step's prompts, completions, rewards (each function's too) and advantages: train "
           "writes <output_dir>/completions.jsonl, a worker adds them to its log lines in the bucket")
      .add("num_completions_to_print", &c.num_completions_to_print,
           "with log_completions: how many of a step's completions train prints and a worker logs (unset: all)")
      .add("eval_max_examples", &c.eval_max_examples, "held-out examples per evaluation")
      .add("eval_temperature", &c.eval_temperature, "0 = greedy")
      .add("eval_pass_k", &c.eval_pass_k,
           "the evaluator's pass@1 and pass@k from k answers sampled per held-out prompt as the rollouts "
           "sample: -1 = k is grpo.num_generations_eval (unset: grpo.num_generations), 0 = off")
      .add("eval_pass_samples", &c.eval_pass_samples,
           "answers sampled per held-out prompt for pass@1 and pass@k, n >= k (0 = k): with n > k both "
           "come from the unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al. 2021) and vary less "
           "between evaluations (pass@8 from 8 answers moved by 0.08 between two seeds; it costs n / k "
           "times the sampling)")
      .add("threads", &c.threads, "compute threads, 0 = all cores");
  return t;
}

std::vector<ConfigTable> tables(RunConfig& c) {
  return {model_table(c.model), c.lora.table(),  c.grpo.table(),        task_table(c.task), train_table(c.train),
          c.sync.table(),       c.proxy.table(), c.aggregation.table(), c.security.table()};
}

}  // namespace

void RunConfig::apply_json(const nlohmann::json& j, const std::string& source) {
  auto ts = tables(*this);
  for (auto& [section, body] : j.items()) {
    // A named capture: clang 14 (the sanitizer build) cannot capture a structured binding.
    auto it = std::find_if(ts.begin(), ts.end(), [&name = section](auto& t) { return t.section() == name; });
    if (it == ts.end()) {
      std::vector<std::string> names;
      for (auto& t : ts) names.push_back(t.section());
      throw UserError(source + ": unknown section [" + section + "]",
                      "did you mean [" + nearest_name(section, names) + "]?");
    }
    // TRL keeps every knob in one config: a key of another section says which.
    if (body.is_object())
      for (const auto& item : body.items())
        if (!it->has(item.key()))
          for (auto& t : ts)
            if (t.has(item.key()))
              throw UserError(source + ": " + item.key() + " is not in [" + section + "] but in [" + t.section() + "]",
                              "move it to [" + t.section() + "]");
    it->set_from_json(body, source);
  }
  grpo.apply_generation_kwargs(source);
}

RunConfig RunConfig::from_toml_string(const std::string& text, const std::string& source) {
  toml::table tbl;
  try {
    tbl = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream s;
    s << source << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
    throw UserError(s.str());
  }
  RunConfig c;
  c.apply_json(toml_to_json(tbl), source);
  return c;
}

RunConfig RunConfig::from_toml_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw UserError("cannot read config '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return from_toml_string(ss.str(), path);
}

RunConfig RunConfig::from_file(const std::string& path) {
  if (path.size() < 5 || path.compare(path.size() - 5, 5, ".json") != 0) return from_toml_file(path);
  std::ifstream f(path);
  if (!f) throw UserError("cannot read config '" + path + "'");
  auto j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw UserError("config '" + path + "' is not a JSON object",
                    "write TOML (run.toml), or JSON as `bucketrl demo --print-config` prints");
  RunConfig c;
  c.apply_json(j, path);
  return c;
}

void RunConfig::apply_overrides(const std::vector<std::string>& kvs) {
  for (const auto& kv : kvs) {
    auto eq = kv.find('=');
    std::string key = kv.substr(0, eq);
    auto dot = key.find('.');
    auto ts = tables(*this);
    if (dot != std::string::npos) {
      std::string section = key.substr(0, dot);
      // A named capture: clang 14 (the sanitizer build) cannot capture a structured binding.
      auto it = std::find_if(ts.begin(), ts.end(), [&name = section](auto& t) { return t.section() == name; });
      if (it == ts.end()) throw UserError("--set " + kv + ": unknown section '" + section + "'");
      it->set_from_override(kv.substr(dot + 1));
      continue;
    }
    std::vector<ConfigTable*> owners;
    for (auto& t : ts)
      if (t.has(key)) owners.push_back(&t);
    if (owners.size() == 1) {
      owners[0]->set_from_override(kv);
    } else if (owners.empty()) {
      for (auto& t : ts)
        if (std::string why = t.foreign_reason(key); !why.empty())
          throw UserError("--set " + kv + ": " + key + " is not a bucketrl setting: " + why, "remove it");
      std::vector<std::string> all;
      for (auto& t : ts)
        for (auto& f : t.fields()) all.push_back(t.section() + "." + f.name);
      throw UserError("--set " + kv + ": unknown key '" + key + "'", "did you mean '" + nearest_name(key, all) + "'?");
    } else {
      throw UserError("--set " + kv + ": '" + key + "' is in several sections", "write it as section." + key);
    }
  }
  grpo.apply_generation_kwargs("--set");  // it takes precedence over the keys it names, as in TRL
}

void RunConfig::validate() const {
  auto one_of = [](const std::string& key, const std::string& v, std::initializer_list<const char*> ok,
                   const char* hint) {
    for (auto o : ok)
      if (v == o) return;
    throw UserError("model." + key + " = \"" + v + "\" is not valid", hint);
  };
  one_of("dtype", model.dtype, {"auto", "float32", "f32", "bfloat16", "bf16"}, "use auto, float32 or bfloat16");
  if (model.device.rfind("cuda:", 0) != 0)
    one_of("device", model.device, {"auto", "cpu", "cuda"}, "use auto, cpu, cuda or cuda:N");
  if (train.eval_pass_k < -1)
    throw UserError("train.eval_pass_k = " + std::to_string(train.eval_pass_k) + " is not valid",
                    "use -1 (k = grpo.num_generations_eval or grpo.num_generations), 0 (off) or k >= 1");
  if (const int k = train.eval_pass_k < 0 ? grpo.eval_generations() : train.eval_pass_k;
      train.eval_pass_samples != 0 && (k == 0 || train.eval_pass_samples < k))
    throw UserError("train.eval_pass_samples = " + std::to_string(train.eval_pass_samples) +
                        " is not valid with pass@k for k = " + std::to_string(k),
                    "use 0 (as many as k), or n >= k with pass@k on (train.eval_pass_k)");
  if (train.num_completions_to_print && *train.num_completions_to_print < 0)
    throw UserError(
        "train.num_completions_to_print = " + std::to_string(*train.num_completions_to_print) + " is not valid",
        "use a count >= 0, or leave it unset for all");
  lora.validate();
  grpo.validate();
  sync.validate();
  proxy.validate();
  aggregation.validate();
  security.validate();
}

namespace {

// Where each section's names come from, for the reference.
const char* section_origin(const std::string& section) {
  if (section == "model") return "The base model (a Hugging Face folder) and where it runs.";
  if (section == "lora")
    return "PEFT's `LoraConfig`: the same names and meanings (`init_seed` is bucketrl's); defaults are bucketrl's "
           "(PEFT's lora_alpha is 8).";
  if (section == "grpo")
    return "TRL's `GRPOConfig` (and the `TrainingArguments` it extends): the same names and meanings; defaults "
           "sized for the small models and CPUs bucketrl's demo runs on where they differ.";
  if (section == "task") return "The task: prompts, answers and rewards (bucketrl's own).";
  if (section == "train")
    return "One-process training (`bucketrl train`) and the evaluator; `TrainingArguments`' names where it has "
           "them (output_dir, eval_steps, save_steps, logging_steps).";
  if (section == "sync") return "Workers: when they upload, the update codec, what a new version does to them.";
  if (section == "proxy") return "The proxy: polling, worker health, old versions.";
  if (section == "aggregation") return "How the proxy validates and folds updates into the next version.";
  if (section == "security") return "Signed updates: whose updates the proxy accepts.";
  return "";
}

// A value as TOML writes it: JSON's strings, numbers, booleans and arrays are TOML too;
// objects become inline tables (keys bare where TOML allows).
std::string toml_value(const nlohmann::json& v) {
  if (!v.is_object() && !v.is_array()) return v.dump();
  std::string out;
  for (auto& item : v.items()) {
    out += out.empty() ? "" : ", ";
    if (v.is_object()) {
      const std::string& k = item.key();
      const bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
      });
      out += (bare ? k : nlohmann::json(k).dump()) + " = ";
    }
    out += toml_value(item.value());
  }
  return v.is_object() ? (out.empty() ? "{}" : "{ " + out + " }") : "[" + out + "]";
}

std::string md_cell(std::string s) {
  for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.insert(i, "\\");
  return s;
}

}  // namespace

std::string RunConfig::to_toml() {
  std::string out;
  for (auto& t : tables(*this)) {
    out += (out.empty() ? "[" : "\n[") + t.section() + "]\n";
    const auto values = t.to_json();
    for (auto& f : t.fields()) {
      const auto& v = values.at(f.name);
      out += (v.is_null() ? "# " + f.name + " =" : f.name + " = " + toml_value(v)) + "  # " + f.help + "\n";
    }
  }
  return out;
}

std::string RunConfig::reference_markdown() {
  std::string out;
  for (auto& t : tables(*this)) {
    out += "## [" + t.section() + "]\n\n" + section_origin(t.section()) + "\n\n";
    out += "| key | kind | default | meaning |\n|---|---|---|---|\n";
    const auto values = t.to_json();
    for (auto& f : t.fields()) {
      const auto& v = values.at(f.name);
      out += "| `" + f.name + "` | " + md_cell(ConfigTable::kind(f)) + " | " +
             (v.is_null() ? "unset" : "`" + md_cell(toml_value(v)) + "`") + " | " + md_cell(f.help) + " |\n";
    }
    out += "\n";
  }
  return out;
}

nlohmann::json RunConfig::to_json() {
  nlohmann::json j;
  for (auto& t : tables(*this)) j[t.section()] = t.to_json();
  return j;
}

}  // namespace brl
