// `bucketrl dataset`: a task's prompts as JSONL ({"prompt", "answer", extra fields}), so that
// other tools (TRL's GRPOTrainer in bench/trl_compare.sh) train and evaluate on exactly the
// examples bucketrl does: the training stream of a shard in its order, or the held-out set.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "config/run_config.h"
#include "tasks/task.h"
#include "util/error.h"

using namespace brl;

namespace {

cli::RunFn setup_dataset(CLI::App& app) {
  static std::string config, split = "train";
  static std::vector<std::string> sets;
  static int64_t num = 1000;
  static int shard = 0, num_shards = 1;
  app.add_option("--config", config, "run.toml (its [task] section)");
  app.add_option("--set", sets, "override a key: section.key=value (repeatable)");
  app.add_option("--split", split, "train | eval (the held-out set) | validation (pretraining's early stop)")
      ->capture_default_str();
  app.add_option("--num", num, "train: examples to print (the held-out sets print whole)")->capture_default_str();
  app.add_option("--shard", shard, "train: the shard, 0-based")->capture_default_str();
  app.add_option("--num-shards", num_shards, "train: shards the stream is cut into")->capture_default_str();
  return [] {
    RunConfig cfg = config.empty() ? RunConfig() : RunConfig::from_file(config);
    cfg.apply_overrides(sets);
    if (num_shards < 1 || shard < 0 || shard >= num_shards)
      throw UserError(
          "dataset: shard " + std::to_string(shard) + " of " + std::to_string(num_shards) + " does not exist",
          "use 0 <= --shard < --num-shards");
    auto task = tasks::make_task(cfg.task);
    auto print = [](const tasks::Example& e) {
      nlohmann::json j = e.extra.is_object() ? e.extra : nlohmann::json::object();
      j["prompt"] = e.prompt_json();
      if (!e.chat_template_kwargs.is_null())
        j["chat_template_kwargs"] = nlohmann::json::parse(e.chat_template_kwargs.dump());
      j["answer"] = e.answer;
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
