#include "grpo/train_loop.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "grpo/trainer.h"
#include "lora/lora.h"
#include "model/model_load.h"
#include "model/loader.h"
#include "model/tensor_io.h"
#include "tasks/task.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/log.h"
#include "util/progress.h"

namespace brl::grpo {

namespace fs = std::filesystem;

std::string latest_checkpoint(const std::string& out) {
  std::string best;
  long best_n = -1;
  if (!fs::exists(out)) return "";
  for (auto& e : fs::directory_iterator(out)) {
    std::string n = e.path().filename().string();
    if (n.rfind("checkpoint-", 0) != 0 || !fs::exists(e.path() / "trainer_state.pt")) continue;
    long k = std::strtol(n.c_str() + 11, nullptr, 10);
    if (k > best_n) best_n = k, best = e.path().string();
  }
  return best;
}

Session open_session(const RunConfig& cfg) {
  if (cfg.model.path.empty()) throw UserError("no base model: set [model] path or --set model.path=DIR");
  Session s{model::load_model_on(cfg.model.path, cfg.model.device, cfg.model.dtype),
            tok::Tokenizer::from_dir(cfg.model.path),
            tasks::make_task(cfg.task),
            {}};
  // Refused here rather than at the first forward past the window, mid-run.
  s.model.check_window(cfg.grpo.max_prompt_length + cfg.grpo.max_completion_length);
  lora::attach(s.model, cfg.lora);  // on the model's device; f32 over a bf16 base
  if (cfg.grpo.cast_lm_head_to_fp32) s.model.cast_lm_head_to_fp32();
  for (auto& r : s.task->rewards) s.reward_weights.push_back(r->name() == "format" ? cfg.task.format_weight : 1.0);
  return s;
}

EvalResult evaluate_held_out(const model::Model& m, const tok::Tokenizer& tk, tasks::Task& task, const RunConfig& cfg) {
  return evaluate(m, tk, task, cfg.train.eval_max_examples, cfg.grpo.max_completion_length, cfg.train.eval_temperature,
                  0, pass_at_k_options(cfg.grpo, cfg.train.eval_pass_k, cfg.train.eval_pass_samples),
                  cfg.grpo.chat_template_kwargs, cfg.grpo.max_tool_calling_iterations);
}

TrainSummary run_training(RunConfig cfg, bool resume, double time_limit_s, double target_accuracy,
                          TargetMetric target_metric) {
  auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  cfg.validate();
  LOG_INFO("resolved config: {}", cfg.to_json().dump());
  Session ses = open_session(cfg);
  auto& m = ses.model;
  auto& tk = ses.tokenizer;
  auto& task = ses.task;
  GrpoTrainer trainer(m, tk, *task, cfg.grpo, 0, 1, ses.reward_weights);
  const std::string out = cfg.train.output_dir;
  fs::create_directories(out);
  if (resume) {
    std::string ck = latest_checkpoint(out);
    if (ck.empty()) {
      LOG_INFO("no checkpoint in {}: starting fresh", out);
    } else {
      // Copy into the live slots: the optimizer already tracks those tensors.
      std::string st = (fs::path(ck) / "adapter_model.safetensors").string();
      lora::set_adapter_tensors(m, model::load_tensors(st, m.dtype()), st);
      trainer.load_state((fs::path(ck) / "trainer_state.pt").string());
      LOG_INFO("resumed from {} at step {}", ck, trainer.global_step());
    }
  }
  std::ofstream metrics(fs::path(out) / "metrics.jsonl", std::ios::app);
  std::ofstream completions;  // log_completions: one line per completion of each logging step
  if (cfg.train.log_completions) completions.open(fs::path(out) / "completions.jsonl", std::ios::app);
  double stepping = 0;  // metrics' time_s: seconds spent in GRPO steps (evaluations and checkpoints excluded)
  auto eval_now = [&](int64_t step) {
    auto ev = evaluate_held_out(m, tk, *task, cfg);
    LOG_INFO("eval step {}: held-out accuracy {:.3f}, mean reward {:.3f}{} (n={})", step, ev.accuracy, ev.reward_mean,
             ev.k ? fmt::format(", pass@1 {:.3f}, pass@{} {:.3f}", ev.pass_at_1, ev.k, ev.pass_at_k) : "", ev.n);
    nlohmann::json line{
        {"step", step}, {"eval_accuracy", ev.accuracy}, {"eval_reward", ev.reward_mean}, {"time_s", stepping}};
    if (ev.k) line["eval_pass_at_1"] = ev.pass_at_1, line["eval_pass_at_k"] = ev.pass_at_k, line["eval_k"] = ev.k;
    metrics << line.dump() << "\n";
    if (!metrics.flush())
      throw UserError("cannot append to " + (fs::path(out) / "metrics.jsonl").string(),
                      "check free space and permissions");
    return ev;
  };
  TrainSummary sum;
  sum.initial_eval = sum.final_eval = eval_now(trainer.global_step());
  sum.initial_accuracy = sum.final_accuracy = sum.initial_eval.accuracy;
  const bool on_pass = target_metric == TargetMetric::pass_at_1;
  auto save = [&](int64_t step) {
    std::string ck = (fs::path(out) / ("checkpoint-" + std::to_string(step))).string();
    lora::save_peft(m, cfg.lora, ck, cfg.model.path);
    trainer.save_state((fs::path(ck) / "trainer_state.pt").string());
  };
  ProgressOptions po;
  po.label = "train";
  po.total = cfg.grpo.max_steps;
  po.initial = trainer.global_step();
  Progress bar(po);
  while (trainer.global_step() < cfg.grpo.max_steps) {
    const double before = elapsed();
    trainer.set_log_completions(cfg.train.log_completions && cfg.train.logs_step(trainer.global_step() + 1));
    auto s = trainer.step();
    stepping += elapsed() - before;
    if (!s.completions.empty()) {
      nlohmann::json all = completions_json(s, *task);
      for (auto& c : all) {
        c["step"] = s.step;
        completions << c.dump() << "\n";
      }
      if (!completions.flush())
        throw UserError("cannot append to " + (fs::path(out) / "completions.jsonl").string(),
                        "check free space and permissions");
      const auto limit = cfg.train.num_completions_to_print;
      const size_t shown = limit ? std::min(all.size(), static_cast<size_t>(*limit)) : all.size();
      for (size_t i = 0; i < shown; ++i) {
        const auto& c = all[i];
        LOG_INFO("step {} completion: reward {:.3f} advantage {:+.3f} rewards {}\n  prompt: {}\n  completion: {}",
                 s.step, c["reward"].get<double>(), c["advantage"].get<double>(), c["rewards"].dump(),
                 c["prompt"].dump(), c["completion"].dump());
      }
    }
    if (cfg.train.logs_step(s.step))
      LOG_INFO(
          "step {}/{}: reward {:.3f}±{:.3f} acc {:.3f} loss {:.4f} kl {:.4f} clip {:.3f} |g| {:.3f} lr {:.2e} "
          "len {:.1f} gen {:.1f}s train {:.1f}s",
          s.step, cfg.grpo.max_steps, s.reward_mean, s.reward_std, s.accuracy, s.loss, s.kl, s.clip_ratio, s.grad_norm,
          s.lr, s.completion_length, s.gen_seconds, s.train_seconds);
    nlohmann::json line{{"step", s.step},
                        {"reward", s.reward_mean},
                        {"reward_std", s.reward_std},
                        {"accuracy", s.accuracy},
                        {"loss", s.loss},
                        {"kl", s.kl},
                        {"clip_ratio", s.clip_ratio},
                        {"grad_norm", s.grad_norm},
                        {"lr", s.lr},
                        {"completion_length", s.completion_length},
                        {"frac_reward_zero_std", s.frac_reward_zero_std},
                        {"samples", s.samples},
                        {"time_s", stepping}};
    add_optional_stats(line, s);
    metrics << line.dump() << "\n";
    bool stop = s.step == cfg.grpo.max_steps || (time_limit_s > 0 && elapsed() > time_limit_s);
    if ((cfg.train.save_steps > 0 && s.step % cfg.train.save_steps == 0) || stop) save(s.step);
    if ((cfg.train.eval_steps > 0 && s.step % cfg.train.eval_steps == 0) || stop) {
      sum.final_eval = eval_now(s.step);
      sum.final_accuracy = sum.final_eval.accuracy;
      if (target_accuracy > 0 && (on_pass ? sum.final_eval.pass_at_1 : sum.final_accuracy) >= target_accuracy)
        stop = true;
    }
    bar.update(s.step, fmt::format("reward {:.3f} acc {:.3f} loss {:.4f}; eval {:.3f}", s.reward_mean, s.accuracy,
                                   s.loss, sum.final_accuracy));
    if (stop) break;
  }
  bar.finish();
  sum.steps = trainer.global_step();
  sum.adapter_dir = (fs::path(out) / "adapter").string();
  lora::save_peft(m, cfg.lora, sum.adapter_dir, cfg.model.path);
  sum.seconds = elapsed();
  return sum;
}

}  // namespace brl::grpo
