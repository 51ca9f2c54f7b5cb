// `bucketrl dataset`: a task's prompts as JSONL ({"prompt", "answer", extra fields}), so that
// other tools (TRL's GRPOTrainer in bench/trl_compare.sh) train and evaluate on exactly the
// examples bucketrl does: the training stream of a shard in its order, or the held-out set.
// --render adds what the model is given for each prompt (its text after the chat template,
// and its token ids), as workers compute it.
#include <cstdio>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "config/run_config.h"
#include "grpo/prompts.h"
#include "tasks/task.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

using namespace brl;

namespace {

cli::RunFn setup_dataset(CLI::App& app) {
  static std::string config, split = "train";
  static std::vector<std::string> sets;
  static int64_t num = 1000;
  static int shard = 0, num_shards = 1;
  static bool render = false;
  app.add_option("--config", config, "run.toml (its [task] section; [model] and [grpo] too with --render)");
  app.add_option("--set", sets, "override a key: section.key=value (repeatable)");
  app.add_option("--split", split, "train | eval (the held-out set) | validation (pretraining's early stop)")
      ->capture_default_str();
  app.add_option("--num", num, "train: examples to print (the held-out sets print whole)")->capture_default_str();
  app.add_option("--shard", shard, "train: the shard, 0-based")->capture_default_str();
  app.add_option("--num-shards", num_shards, "train: shards the stream is cut into")->capture_default_str();
  app.add_flag("--render", render,
               "add prompt_text (after model.path's chat template, with grpo.chat_template_kwargs) and "
               "prompt_ids (the last grpo.max_prompt_length), as workers compute them");
  return [] {
    RunConfig cfg = config.empty() ? RunConfig() : RunConfig::from_file(config);
    cfg.apply_overrides(sets);
    if (num_shards < 1 || shard < 0 || shard >= num_shards)
      throw UserError(
          "dataset: shard " + std::to_string(shard) + " of " + std::to_string(num_shards) + " does not exist",
          "use 0 <= --shard < --num-shards");
    auto task = tasks::make_task(cfg.task);
    std::optional<tok::Tokenizer> tk;
    if (render) {
      if (cfg.model.path.empty())
        throw UserError("dataset --render: no model to render the prompts for", "--set model.path=DIR");
      tk = tok::Tokenizer::from_dir(cfg.model.path);
    }
    auto print = [&](const tasks::Example& e) {
      nlohmann::json j = e.extra.is_object() ? e.extra : nlohmann::json::object();
      j["prompt"] = e.prompt_json();
      if (!e.chat_template_kwargs.is_null())
        j["chat_template_kwargs"] = nlohmann::json::parse(e.chat_template_kwargs.dump());
      if (!e.tools.is_null()) j["tools"] = nlohmann::json::parse(e.tools.dump());
      j["answer"] = e.answer;
      if (tk) {
        const std::string text = grpo::prompt_text(*tk, e, cfg.grpo.chat_template_kwargs);
        j["prompt_ids"] = grpo::prompt_ids_of_text(*tk, e, text, cfg.grpo.max_prompt_length);
        j["prompt_text"] = text;
      }
      std::printf("%s\n", j.dump().c_str());
    };
    if (split == "train") {
      for (int64_t i = 0; i < num; ++i) print(task->train_example(static_cast<uint64_t>(i), shard, num_shards));
    } else if (split == "eval" || split == "validation") {
      for (auto& e : split == "eval" ? task->eval_set() : task->validation_set()) print(e);
    } else {
      throw UserError("dataset: --split " + split + " is not known", "use train, eval or validation");
    }
    return 0;
  };
}
cli::Register dataset_reg("dataset", "print a task's training stream or held-out set as JSONL (prompt, answer)",
                          setup_dataset);

}  // namespace
