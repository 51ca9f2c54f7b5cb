#include "grpo/pretrain.h"

#include <algorithm>
#include <cmath>

#include <torch/torch.h>

#include <chrono>
#include <utility>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "grpo/trainer.h"
#include "model/loader.h"
#include "tokenizer/text.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/file.h"
#include "util/log.h"
#include "util/progress.h"
#include "util/rng.h"

namespace brl::grpo {

namespace fs = std::filesystem;

namespace {
constexpr int kEos = 256;

void write_json(const fs::path& p, const nlohmann::json& j) { write_file(p.string(), j.dump(2) + "\n"); }

// The taught wrong answer (see PretrainOptions::habit). Integer answers only.
std::string habit_answer(const tasks::Example& e, Habit habit) {
  int64_t v;
  if (!tasks::parse_leading_int(e.answer, &v) || std::to_string(v) != e.answer)
    throw UserError(
        "pretrain label_error_rate > 0 needs integer answers; got '" + e.answer + "' for prompt '" + e.prompt + "'",
        "use the arithmetic task, or label_error_rate = 0");
  return std::to_string(habit == Habit::negate ? -v : v + 1);
}

// 1 when the completion states the taught wrong answer.
class HabitReward : public tasks::RewardFn {
 public:
  explicit HabitReward(Habit habit) : habit_(habit) {}
  std::string name() const override { return "habit"; }
  std::vector<double> score(const std::vector<const tasks::Example*>& ex,
                            const std::vector<std::string>& comp) override {
    std::vector<double> r(comp.size(), 0.0);
    for (size_t i = 0; i < comp.size(); ++i) {
      int64_t got;
      if (tasks::parse_leading_int(comp[i], &got) && std::to_string(got) == habit_answer(*ex[i], habit_)) r[i] = 1.0;
    }
    return r;
  }

 private:
  Habit habit_;
};

// The task's held-out set (or its validation set, as eval_set) scored by correctness and, with
// a habit, the habit: evaluate() then gives accuracy (the first reward) and skill (their sum;
// they never both fire) in one pass.
class ScoredView : public tasks::Task {
 public:
  ScoredView(tasks::Task& t, std::optional<Habit> habit, bool validation) : t_(t), validation_(validation) {
    rewards = {t.rewards.at(0)};
    if (habit) rewards.push_back(std::make_shared<HabitReward>(*habit));
  }
  std::string name() const override { return t_.name(); }
  tasks::Example train_example(uint64_t i, int shard, int n) const override { return t_.train_example(i, shard, n); }
  const std::vector<tasks::Example>& eval_set() const override {
    return validation_ ? t_.validation_set() : t_.eval_set();
  }
  const std::vector<tasks::Example>& validation_set() const override { return t_.validation_set(); }

 private:
  tasks::Task& t_;
  bool validation_;
};
}  // namespace

void write_byte_tokenizer(const std::string& dir) {
  fs::create_directories(dir);
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[tok::ByteMap::get().enc[b]] = b;  // GPT-2's byte symbols
  nlohmann::json bl = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  nlohmann::json tok = {{"version", "1.0"},
                        {"truncation", nullptr},
                        {"padding", nullptr},
                        {"added_tokens",
                         {{{"id", kEos},
                           {"content", "<|endoftext|>"},
                           {"single_word", false},
                           {"lstrip", false},
                           {"rstrip", false},
                           {"normalized", false},
                           {"special", true}}}},
                        {"normalizer", nullptr},
                        {"pre_tokenizer", bl},
                        {"post_processor", nullptr},
                        {"decoder", bl},
                        {"model",
                         {{"type", "BPE"},
                          {"dropout", nullptr},
                          {"unk_token", nullptr},
                          {"continuing_subword_prefix", nullptr},
                          {"end_of_word_suffix", nullptr},
                          {"fuse_unk", false},
                          {"byte_fallback", false},
                          {"vocab", vocab},
                          {"merges", nlohmann::json::array()}}}};
  write_json(fs::path(dir) / "tokenizer.json", tok);
  write_json(fs::path(dir) / "tokenizer_config.json", {{"eos_token", "<|endoftext|>"},
                                                       {"pad_token", "<|endoftext|>"},
                                                       {"bos_token", nullptr},
                                                       {"model_max_length", 512},
                                                       {"tokenizer_class", "PreTrainedTokenizerFast"}});
  write_json(fs::path(dir) / "generation_config.json", {{"eos_token_id", kEos}, {"pad_token_id", kEos}});
}

tasks::Example pretrain_example(const tasks::Task& task, uint64_t i, const PretrainOptions& o) {
  if (!(o.label_error_rate >= 0 && o.label_error_rate <= 1))
    throw UserError("pretrain label_error_rate (" + std::to_string(o.label_error_rate) + ") must be in [0, 1]");
  tasks::Example e = task.train_example(i, 0, 1);
  if (!e.messages.is_null())
    throw UserError("pretrain takes text prompts; this dataset's are lists of messages",
                    "pretrain on a text-prompt dataset (the demo's tasks are), then train on the conversational one");
  // A fresh draw per showing, so the model learns the habit's rate, not a list of problems.
  double u = static_cast<double>(splitmix64(o.seed ^ splitmix64(i)) >> 11) * 0x1.0p-53;  // [0, 1)
  if (u < o.label_error_rate) e.answer = habit_answer(e, o.habit);
  return e;
}

double pretrain_lr(const PretrainOptions& o, int step) {
  double warm = o.warmup_steps > 0 ? std::min(1.0, static_cast<double>(step) / o.warmup_steps) : 1.0;
  double t = std::clamp(static_cast<double>(step) / o.max_steps, 0.0, 1.0);
  double cosine = o.min_lr_ratio + (1 - o.min_lr_ratio) * 0.5 * (1 + std::cos(M_PI * t));
  return o.learning_rate * warm * (o.lr_scheduler_type == PretrainSchedule::cosine ? cosine : 1.0);
}

model::ModelConfig demo_model_config(const PretrainOptions& o) {
  model::ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 257;
  c.hidden_size = o.hidden_size;
  c.intermediate_size = o.intermediate_size;
  c.num_hidden_layers = o.num_layers;
  c.num_attention_heads = o.num_heads;
  c.num_key_value_heads = o.num_kv_heads;
  c.head_dim = o.hidden_size / o.num_heads;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 512;
  c.tie_word_embeddings = true;
  c.eos_token_ids = {kEos};
  c.validate("demo model");
  return c;
}

PretrainResult pretrain(tasks::Task& task, const PretrainOptions& o, bool progress) {
  auto t0 = std::chrono::steady_clock::now();
  if (o.pass_k < 0 || o.pass_k > 64)
    throw UserError("pretrain pass_k (" + std::to_string(o.pass_k) + ") must be in [0, 64]",
                    "give the group size GRPO will sample (e.g. 8), or 0 to stop on greedy skill only");
  if (o.snapshot_every < 0 || (o.snapshot_every > 0 && o.eval_every % o.snapshot_every != 0))
    throw UserError("pretrain snapshot_every (" + std::to_string(o.snapshot_every) + ") must divide eval_every (" +
                        std::to_string(o.eval_every) + ")",
                    "e.g. 10 with checks every 50 steps, or 0 for no snapshots");
  write_byte_tokenizer(o.out_dir);
  auto tk = tok::Tokenizer::from_dir(o.out_dir);
  auto m = model::random_model(demo_model_config(o), o.seed, 0.02);
  m.set_requires_grad(true);
  std::vector<torch::Tensor> params;
  for (auto& nt : m.named_tensors())
    if (nt.tensor->defined()) params.push_back(*nt.tensor);
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(o.learning_rate).weight_decay(o.weight_decay));
  const std::optional<Habit> habit = o.label_error_rate > 0 ? std::optional(o.habit) : std::nullopt;
  ScoredView validation(task, habit, true), held_out(task, habit, false);
  // One pass over a view's examples: greedy accuracy and skill, and with pass_k > 0 sampled
  // pass@1 / pass@k, always the same draws (seeded by o.seed), so a recount of the written model
  // agrees.
  PassAtKOptions pass;
  pass.k = o.pass_k;
  pass.seed = o.seed;
  auto score = [&](ScoredView& v) {
    torch::NoGradGuard ng;
    return evaluate(m, tk, v, o.eval_examples, 8, 0.0, 0, pass);
  };
  auto skill = [&](const EvalResult& ev) { return habit ? ev.reward_mean : ev.accuracy; };
  PretrainResult res;
  uint64_t cursor = 0;
  ProgressOptions po;
  po.label = "pretrain";
  po.total = o.max_steps;
  Progress bar(po, progress ? progress_mode() : ProgressMode::kOff, default_progress_io());
  auto stats = [&](double loss) {
    std::string s =
        fmt::format("loss {:.4f} validation accuracy {:.3f} skill {:.3f}", loss, res.val_accuracy, res.val_skill);
    if (o.pass_k > 0) s += fmt::format(" pass@1 {:.3f} pass@{} {:.3f}", res.val_pass_at_1, o.pass_k, res.val_pass_at_k);
    return s;
  };
  auto checked = [&](const EvalResult& v) {
    res.val_accuracy = v.accuracy, res.val_skill = skill(v), res.val_pass_at_1 = v.pass_at_1,
    res.val_pass_at_k = v.pass_at_k;
  };
  auto met = [&](const EvalResult& v) {
    return skill(v) >= o.target_accuracy ||
           (o.pass_k > 0 && (v.pass_at_k >= o.target_pass_at_k || v.pass_at_1 >= o.target_pass_at_1));
  };
  std::vector<std::pair<int, std::vector<torch::Tensor>>> snapshots;  // (step, weights) since the last check
  for (int step = 1; step <= o.max_steps; ++step) {
    // A batch of "prompt answer<eos>" sequences; loss on the answer and eos only.
    std::vector<std::vector<int32_t>> seqs;
    std::vector<size_t> prompt_len;
    size_t L = 0;
    for (int b = 0; b < o.batch_size; ++b) {
      auto e = pretrain_example(task, cursor++, o);
      auto p = tk.encode(e.prompt), a = tk.encode(e.answer);
      prompt_len.push_back(p.size());
      p.insert(p.end(), a.begin(), a.end());
      p.push_back(kEos);
      L = std::max(L, p.size());
      seqs.push_back(std::move(p));
    }
    auto ids = torch::full({o.batch_size, static_cast<int64_t>(L)}, kEos, torch::kLong);  // right padding
    auto w = torch::zeros({o.batch_size, static_cast<int64_t>(L) - 1});
    auto ia = ids.accessor<int64_t, 2>();
    auto wa = w.accessor<float, 2>();
    for (int b = 0; b < o.batch_size; ++b) {
      for (size_t k = 0; k < seqs[b].size(); ++k) ia[b][k] = seqs[b][k];
      for (size_t k = prompt_len[b]; k < seqs[b].size(); ++k) wa[b][k - 1] = 1.f;  // predicts token k
    }
    auto pos = torch::arange(static_cast<int64_t>(L), torch::kLong).unsqueeze(0).expand({o.batch_size, -1});
    auto h = m.forward(ids, pos);
    auto lp = m.token_logprobs(h.slice(1, 0, L - 1), ids.slice(1, 1, L));  // [B, L-1]
    auto loss = -(lp * w).sum() / w.sum();
    opt.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(params, 1.0);
    static_cast<torch::optim::AdamWOptions&>(opt.param_groups()[0].options()).lr(pretrain_lr(o, step));
    opt.step();
    res.steps = step;
    const double loss_now = loss.item<double>();
    const bool check = step % o.eval_every == 0 || step == o.max_steps;
    if (!check && o.snapshot_every > 0 && step % o.snapshot_every == 0) {
      torch::NoGradGuard ng;
      std::vector<torch::Tensor> w;
      for (auto& p : params) w.push_back(p.detach().clone());
      snapshots.emplace_back(step, std::move(w));
    }
    if (check) {
      const EvalResult v = score(validation);
      checked(v);
      if (progress)
        LOG_INFO("pretrain step {}/{}: {} (stop at skill {:.2f}{})", step, o.max_steps, stats(loss_now),
                 o.target_accuracy,
                 o.pass_k > 0
                     ? fmt::format(" or pass@{} {:.2f}{}", o.pass_k, o.target_pass_at_k,
                                   o.target_pass_at_1 < 1 ? fmt::format(" or pass@1 {:.2f}", o.target_pass_at_1) : "")
                     : std::string());
      if (met(v)) {
        // The oldest snapshot since the check before that meets it too replaces these weights;
        // if none does, these stay.
        torch::NoGradGuard ng;
        std::vector<torch::Tensor> now;
        if (!snapshots.empty())
          for (auto& p : params) now.push_back(p.detach().clone());
        bool earlier = false;
        for (auto& [at, w] : snapshots) {
          for (size_t i = 0; i < params.size(); ++i) params[i].copy_(w[i]);
          if (const EvalResult sv = score(validation); (earlier = met(sv))) {
            checked(sv);
            res.steps = at;
            if (progress) LOG_INFO("pretrain: the snapshot of step {} meets it already: {}", at, stats(loss_now));
            break;
          }
        }
        if (!earlier)
          for (size_t i = 0; i < now.size(); ++i) params[i].copy_(now[i]);
        bar.finish(stats(loss_now) + " (target reached)");
        break;
      }
      snapshots.clear();
    }
    bar.update(step, stats(loss_now));
  }
  bar.finish();
  m.set_requires_grad(false);
  // The held-out set is scored once, on the final weights; it decided nothing.
  const EvalResult h = score(held_out);
  res.accuracy = h.accuracy, res.skill = skill(h), res.pass_at_1 = h.pass_at_1, res.pass_at_k = h.pass_at_k;
  model::save_model(m, o.out_dir);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace brl::grpo
