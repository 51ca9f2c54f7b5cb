#include "grpo/trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "generate/generate.h"
#include "grpo/loss.h"
#include "grpo/optim.h"
#include "grpo/tool_loop.h"
#include "lora/lora.h"
#include "model/device.h"
#include "model/tensor_io.h"
#include "tasks/rewards.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/log.h"
#include "util/rng.h"
#include "util/safetensors.h"

namespace brl::grpo {

namespace {
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<int64_t> stop_ids(const tok::Tokenizer& tk) {
  std::vector<int64_t> s;
  for (int32_t e : tk.eos_ids()) s.push_back(e);
  return s;
}

using GenerateFn =
    std::function<std::vector<gen::Completion>(const std::vector<std::vector<int32_t>>&, gen::GenerateOptions&)>;

// TRL's tool-calling loop (task.tool_command) over completions sampled with `go`: each
// continuation one completion of its own prefix, from streams of its own in every round.
ToolLoopResult run_tools(const model::Model& m, const tok::Tokenizer& tk, const TurnParser& parser,
                         const tasks::Task& task, const std::vector<const tasks::Example*>& ex,
                         const std::vector<std::vector<int32_t>>& prompts, std::vector<gen::Completion>& comps,
                         const gen::GenerateOptions& go, std::optional<int> max_iterations,
                         const nlohmann::json& chat_template_kwargs, const GenerateFn& generate) {
  ToolLoopOptions lo;
  lo.max_completion_length = go.max_new_tokens;
  if (max_iterations) lo.max_iterations = *max_iterations;
  lo.max_model_len = m.config.max_position_embeddings;
  lo.chat_template_kwargs = chat_template_kwargs;
  return run_tool_loop(
      tk, parser, *task.tools, ex, prompts, comps,
      [&](const std::vector<std::vector<int32_t>>& prefixes, int64_t max_new_tokens, int64_t round) {
        gen::GenerateOptions o = go;
        o.num_generations = 1;
        o.max_new_tokens = max_new_tokens;
        o.seed = splitmix64(go.seed ^ (0x746f6f6c73ULL + static_cast<uint64_t>(round)));
        return generate(prefixes, o);
      },
      lo);
}

}  // namespace

std::string completion_text(const tok::Tokenizer& tk, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> t = tokens;
  auto eos = tk.eos_ids();
  while (!t.empty() && std::find(eos.begin(), eos.end(), t.back()) != eos.end()) t.pop_back();
  return tk.decode(t, /*skip_special_tokens=*/true);
}

std::vector<std::string> reward_texts(const tok::Tokenizer& tk, const std::vector<gen::Completion>& comps,
                                      const std::vector<nlohmann::ordered_json>& turns) {
  std::vector<std::string> texts;
  for (size_t i = 0; i < comps.size(); ++i) {
    // The last assistant turn (a continuation cut away entirely leaves a tool message last).
    const nlohmann::ordered_json* last = nullptr;
    if (i < turns.size() && turns[i].is_array())
      for (const auto& m : turns[i])
        if (m.value("role", std::string()) == "assistant") last = &m;
    const auto& content = last && last->contains("content") ? (*last)["content"] : nlohmann::ordered_json();
    texts.push_back(last ? (content.is_string() ? content.get<std::string>() : std::string())
                         : completion_text(tk, comps[i].tokens));
  }
  return texts;
}

std::vector<double> combined_rewards(tasks::Task& task, const std::vector<double>& weights,
                                     const std::vector<const tasks::Example*>& ex, const std::vector<std::string>& comp,
                                     std::vector<double>* first, std::vector<std::vector<double>>* per_func,
                                     const std::vector<nlohmann::ordered_json>* turns) {
  if (!weights.empty() && weights.size() != task.rewards.size())
    throw UserError("grpo.reward_weights has " + std::to_string(weights.size()) + " entries for " +
                    std::to_string(task.rewards.size()) + " reward functions");
  std::vector<double> total(comp.size(), 0.0);
  for (size_t k = 0; k < task.rewards.size(); ++k) {
    auto s = turns ? task.rewards[k]->score_turns(ex, comp, *turns) : task.rewards[k]->score(ex, comp);
    if (k == 0 && first) *first = s;
    double w = weights.empty() ? 1.0 : weights[k];
    for (size_t i = 0; i < s.size(); ++i) total[i] += w * s[i];
    if (per_func) per_func->push_back(std::move(s));
  }
  return total;
}

PassAtKOptions pass_at_k_options(const GrpoConfig& g, int eval_pass_k, int eval_pass_samples) {
  PassAtKOptions p;
  p.k = eval_pass_k < 0 ? g.eval_generations() : eval_pass_k;
  p.n = eval_pass_samples;
  p.temperature = g.temperature;
  p.top_k = g.top_k;
  p.top_p = g.top_p;
  p.min_p = g.min_p;
  p.repetition_penalty = g.repetition_penalty;
  p.seed = static_cast<uint64_t>(g.seed);
  return p;
}

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  if (n - c < k) return 1.0;
  // C(n-c, k) / C(n, k) = prod_{i = n-c+1}^{n} (1 - k / i), the numerically stable form.
  double fail = 1.0;
  for (int64_t i = n - c + 1; i <= n; ++i) fail *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - fail;
}

EvalResult evaluate(const model::Model& m, const tok::Tokenizer& tk, tasks::Task& task, int max_examples,
                    int max_new_tokens, double temperature, uint64_t seed, const PassAtKOptions& pass,
                    const nlohmann::json& chat_template_kwargs, std::optional<int> max_tool_calling_iterations) {
  const auto& set = task.eval_set();
  size_t n = std::min(set.size(), static_cast<size_t>(std::max(0, max_examples)));
  EvalResult r;
  std::optional<TurnParser> parser;
  if (task.tools) parser.emplace(tk, task.tools->response_template());
  // Scores `samples` answers to each of set[b, e): the correctness and combined reward of each.
  auto answers = [&](size_t b, size_t e, gen::GenerateOptions o, std::vector<double>* first) {
    std::vector<std::vector<int32_t>> prompts;
    std::vector<const tasks::Example*> ex;
    for (size_t i = b; i < e; ++i) {
      prompts.push_back(prompt_ids(tk, set[i], 1 << 20, chat_template_kwargs));
      for (int64_t s = 0; s < o.num_generations; ++s) ex.push_back(&set[i]);
    }
    o.max_new_tokens = max_new_tokens;
    o.stop_token_ids = stop_ids(tk);
    auto comps = gen::generate(m, prompts, o);
    std::vector<nlohmann::ordered_json> turns;
    if (parser)
      turns = run_tools(m, tk, *parser, task, ex, prompts, comps, o, max_tool_calling_iterations, chat_template_kwargs,
                        [&](const std::vector<std::vector<int32_t>>& ps, gen::GenerateOptions& go) {
                          return gen::generate(m, ps, go);
                        })
                  .messages;
    return combined_rewards(task, {}, ex, reward_texts(tk, comps, turns), first, nullptr,
                            turns.empty() ? nullptr : &turns);
  };
  const size_t kBatch = 64;
  double acc = 0, rew = 0;
  for (size_t b = 0; b < n; b += kBatch) {
    gen::GenerateOptions o;
    o.temperature = temperature;
    o.seed = seed;
    std::vector<double> first;
    auto total = answers(b, std::min(n, b + kBatch), o, &first);
    for (size_t i = 0; i < total.size(); ++i) acc += first[i], rew += total[i];
  }
  r.n = static_cast<int64_t>(n);
  if (n) r.accuracy = acc / n, r.reward_mean = rew / n;
  if (pass.k <= 0 || n == 0) return r;
  // Sampled as the rollouts are; prompts per batch so that a batch stays ~kBatch answers.
  const int64_t samples = std::max(pass.k, pass.n);
  const size_t per = std::max<size_t>(1, kBatch / static_cast<size_t>(samples));
  double p1 = 0, pk = 0;
  for (size_t b = 0; b < n; b += per) {
    gen::GenerateOptions o;
    o.num_generations = samples;
    o.temperature = pass.temperature;
    o.top_k = pass.top_k;
    o.top_p = pass.top_p;
    o.min_p = pass.min_p;
    o.repetition_penalty = pass.repetition_penalty;
    o.seed = pass.seed * 1000003ULL + b;  // streams are per (seed, prompt in batch, sample)
    std::vector<double> first;
    answers(b, std::min(n, b + per), o, &first);
    for (size_t i = 0; i * samples < first.size(); ++i) {
      int64_t c = 0;
      for (int64_t s = 0; s < samples; ++s) c += first[i * samples + s] >= 1.0;
      p1 += pass_at_k(samples, c, 1), pk += pass_at_k(samples, c, pass.k);
    }
  }
  r.k = pass.k;
  r.pass_at_1 = p1 / n, r.pass_at_k = pk / n;
  return r;
}

PolicyOptimizer::PolicyOptimizer(model::Model& m, const GrpoConfig& cfg)
    : m_(m), cfg_(cfg), mb_(cfg.per_device_train_batch_size), entropy_(cfg) {
  cfg_.validate();
  m_.set_requires_grad(false);  // the base stays frozen and shared
  params_ = lora::parameters(m_);
  if (params_.empty())
    throw UserError("GRPO trainer: the model has no LoRA adapter attached", "attach one (lora config)");
  for (auto& p : params_) p.set_requires_grad(true);
  torch::optim::AdamWOptions o(cfg_.learning_rate);
  o.betas({cfg_.adam_beta1, cfg_.adam_beta2}).eps(cfg_.adam_epsilon).weight_decay(cfg_.weight_decay);
  opt_ = std::make_unique<torch::optim::AdamW>(params_, o);
}

PolicyOptimizer::~PolicyOptimizer() = default;

void PolicyOptimizer::reset_state() {
  opt_->state().clear();
  since_momentum_reset_ = -1;
}

void PolicyOptimizer::reset_momentum() {
  for (auto& [key, st] : opt_->state()) static_cast<torch::optim::AdamWParamState&>(*st).exp_avg().zero_();
  if (!opt_->state().empty()) since_momentum_reset_ = 0;
}

std::vector<torch::Tensor> PolicyOptimizer::second_moments() const {
  std::vector<torch::Tensor> v;
  if (opt_->state().empty()) return v;
  for (auto& p : params_)
    v.push_back(static_cast<torch::optim::AdamWParamState&>(*opt_->state().at(p.unsafeGetTensorImpl())).exp_avg_sq());
  return v;
}

int64_t PolicyOptimizer::adam_step() const {
  if (opt_->state().empty()) return 0;
  return static_cast<torch::optim::AdamWParamState&>(*opt_->state().begin()->second).step();
}

void PolicyOptimizer::set_second_moments(const std::vector<torch::Tensor>& v, int64_t adam_step) {
  reset_state();
  if (v.empty()) return;
  TORCH_CHECK(v.size() == params_.size(), "second moments for ", v.size(), " parameters, the adapter has ",
              params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    auto st = std::make_unique<torch::optim::AdamWParamState>();
    st->step(adam_step);
    st->exp_avg(torch::zeros_like(params_[i]));
    st->exp_avg_sq(v[i].to(params_[i].options()).clone());
    opt_->state()[params_[i].unsafeGetTensorImpl()] = std::move(st);
  }
  since_momentum_reset_ = 0;
}

double fresh_momentum_lr_scale(double beta1, int64_t step, int64_t steps_since_reset) {
  if (steps_since_reset <= 0 || steps_since_reset >= step) return 1.0;
  return (1 - std::pow(beta1, static_cast<double>(step))) /
         (1 - std::pow(beta1, static_cast<double>(steps_since_reset)));
}

void add_optional_stats(nlohmann::json& line, const StepStats& s) {
  if (s.entropy) line["entropy"] = *s.entropy;
  if (s.entropy_coef) line["entropy_coef"] = *s.entropy_coef;
  if (const auto& w = s.sampling) {
    line["importance_sampling_ratio_min"] = w->is_ratio_min;
    line["importance_sampling_ratio_mean"] = w->is_ratio_mean;
    line["importance_sampling_ratio_max"] = w->is_ratio_max;
    line["sampling_logp_difference_mean"] = w->logp_diff_mean;
    line["sampling_logp_difference_max"] = w->logp_diff_max;
  }
  if (const auto& t = s.tools) {
    line["tool_call_frequency"] = t->call_frequency;
    line["tool_failure_frequency"] = t->failure_frequency;
  }
}

nlohmann::json completions_json(const StepStats& s, const tasks::Task& task, std::optional<int> limit) {
  nlohmann::json out = nlohmann::json::array();
  const size_t n = std::min(s.completions.size(), limit ? static_cast<size_t>(*limit) : s.completions.size());
  for (size_t i = 0; i < n; ++i) {
    const LoggedCompletion& c = s.completions[i];
    nlohmann::json r = nlohmann::json::object();
    for (size_t f = 0; f < c.rewards.size() && f < task.rewards.size(); ++f) {
      std::string name = task.rewards[f]->name();
      if (r.contains(name)) name += "_" + std::to_string(f);  // two functions of one name
      r[name] = c.rewards[f];
    }
    out.push_back({{"prompt", c.prompt},
                   {"completion", c.completion},
                   {"reward", c.reward},
                   {"rewards", r},
                   {"advantage", c.advantage}});
  }
  return out;
}

namespace {
int64_t round_up(int64_t n, int64_t k) { return (n + k - 1) / k * k; }
}  // namespace

PolicyBatch policy_batch(const std::vector<std::vector<int32_t>>& prompts, const std::vector<gen::Completion>& comps,
                         bool mask_truncated_completions, int64_t pad_to_multiple_of) {
  const int64_t N = static_cast<int64_t>(comps.size());
  const int64_t k = std::max<int64_t>(1, pad_to_multiple_of);
  int64_t Lp = 0, Lc = 1;
  for (auto& p : prompts) Lp = std::max<int64_t>(Lp, static_cast<int64_t>(p.size()));
  for (auto& c : comps) Lc = std::max<int64_t>(Lc, static_cast<int64_t>(c.tokens.size()));
  Lp = round_up(Lp, k), Lc = round_up(Lc, k);
  PolicyBatch b;
  b.pad_to_multiple_of = k;
  b.prompt_len = Lp;
  b.completion_len = Lc;
  b.ids = torch::zeros({N, Lp + Lc}, torch::kLong);
  b.attn = torch::zeros({N, Lp + Lc}, torch::kBool);
  b.completion_mask = torch::zeros({N, Lc}, torch::kFloat);
  b.old_logps = torch::zeros({N, Lc}, torch::kFloat);
  auto ida = b.ids.accessor<int64_t, 2>();
  auto ata = b.attn.accessor<bool, 2>();
  auto cma = b.completion_mask.accessor<float, 2>();
  auto ola = b.old_logps.accessor<float, 2>();
  for (int64_t i = 0; i < N; ++i) {
    const auto& p = prompts[static_cast<size_t>(comps[i].prompt_index)];
    int64_t off = Lp - static_cast<int64_t>(p.size());
    for (size_t k = 0; k < p.size(); ++k) ida[i][off + k] = p[k], ata[i][off + k] = true;
    const auto& c = comps[i];
    b.prompt_tokens.push_back(static_cast<int64_t>(p.size()));
    b.completion_tokens.push_back(static_cast<int64_t>(c.tokens.size()));
    bool drop = mask_truncated_completions && c.finish == gen::FinishReason::kLength;
    for (size_t k = 0; k < c.tokens.size(); ++k) {
      ida[i][Lp + k] = c.tokens[k];
      ata[i][Lp + k] = true;
      cma[i][k] = drop || (!c.tool_mask.empty() && !c.tool_mask[k]) ? 0.f : 1.f;  // TRL: completion x tool mask
      ola[i][k] = c.logprobs[k];
    }
  }
  b.pos = model::positions_from_mask(b.attn);
  return b;
}

namespace {
// b with f applied to each of its defined tensors.
template <class F>
PolicyBatch map_tensors(PolicyBatch b, const F& f) {
  for (at::Tensor* t :
       {&b.ids, &b.attn, &b.pos, &b.completion_mask, &b.old_logps, &b.sampling_logps, &b.advantages, &b.ref_logps})
    if (t->defined()) *t = f(*t);
  return b;
}
}  // namespace

PolicyBatch PolicyBatch::to(const at::Device& device) const {
  return map_tensors(*this, [&](const at::Tensor& t) { return t.to(device); });
}

PolicyBatch PolicyBatch::rows(const at::Tensor& index) const {
  PolicyBatch out = map_tensors(*this, [&](const at::Tensor& t) { return t.index_select(0, index.to(t.device())); });
  const at::Tensor host = index.to(at::kCPU, at::kLong).contiguous();
  const int64_t* ix = host.const_data_ptr<int64_t>();
  for (auto* v : {&out.prompt_tokens, &out.completion_tokens})
    if (!v->empty()) {
      std::vector<int64_t> picked(static_cast<size_t>(host.numel()));
      for (size_t i = 0; i < picked.size(); ++i) picked[i] = v->at(static_cast<size_t>(ix[i]));
      *v = std::move(picked);
    }
  return out;
}

std::vector<int64_t> length_grouped_order(const PolicyBatch& b, std::vector<int64_t> order, int64_t block) {
  const auto n = static_cast<int64_t>(order.size());
  block = std::max<int64_t>(1, block);
  const auto key = [&](int64_t i) {
    return std::pair{b.completion_tokens.at(static_cast<size_t>(i)), b.prompt_tokens.at(static_cast<size_t>(i))};
  };
  for (int64_t s = 0; s < n; s += block)
    std::stable_sort(order.begin() + s, order.begin() + std::min(n, s + block),
                     [&](int64_t x, int64_t y) { return key(x) < key(y); });
  return order;
}

namespace {
// Runs pass(size); while it runs out of memory, runs it again at half the size (auto_find_batch_size),
// down to 1, `size` keeping what fitted. Other errors pass through. `cleanup` undoes what a failed
// pass left; the UserError names `unit` and the fixes when halving is off (fix_off) or at 1 (fix_floor).
void halve_on_oom(int64_t& size, bool enabled, const c10::Device& dev, const std::string& where, const char* unit,
                  const char* fix_off, const char* fix_floor, const std::function<void(int64_t)>& pass,
                  const std::function<void()>& cleanup = {}) {
  for (;;) {
    try {
      pass(size);
      return;
    } catch (const c10::Error& e) {
      if (!model::is_out_of_memory(e)) throw;
      if (cleanup) cleanup();
      model::release_cached_memory(dev);
      const std::string what =
          fmt::format("out of memory on {} in {} at {} {}", model::device_label(dev), where, size, unit);
      if (!enabled) throw UserError(what, fix_off);
      if (size == 1) throw UserError(what, fix_floor);
      size = (size + 1) / 2;
      LOG_WARN("{}: retrying at {} (grpo.auto_find_batch_size; going on at that size)", what, size);
    }
  }
}
}  // namespace

std::pair<int64_t, int64_t> micro_batch_window(const PolicyBatch& b, int64_t begin, int64_t end) {
  const int64_t N = b.ids.defined() ? b.ids.size(0) : static_cast<int64_t>(b.prompt_tokens.size());
  TORCH_CHECK(0 <= begin && begin < end && end <= N, "completion_logprobs: rows [", begin, ", ", end, ") of ", N);
  TORCH_CHECK(b.prompt_tokens.empty() || (static_cast<int64_t>(b.prompt_tokens.size()) == N &&
                                          static_cast<int64_t>(b.completion_tokens.size()) == N),
              "PolicyBatch: prompt and completion lengths of ", b.prompt_tokens.size(), " and ",
              b.completion_tokens.size(), " rows, the batch has ", N);
  if (b.prompt_tokens.empty()) return {b.prompt_len, b.completion_len};
  const auto longest = [&](const std::vector<int64_t>& v) {
    return std::max<int64_t>(1, *std::max_element(v.begin() + begin, v.begin() + end));
  };
  // Rounded as the batch was (its widths are multiples, so a window never outgrows them).
  const int64_t k = std::max<int64_t>(1, b.pad_to_multiple_of);
  return {std::min(b.prompt_len, round_up(longest(b.prompt_tokens), k)),
          std::min(b.completion_len, round_up(longest(b.completion_tokens), k))};
}

at::Tensor completion_logprobs(const model::Model& m, const PolicyBatch& b, int64_t begin, int64_t end,
                               double temperature, at::Tensor* entropy, bool entropy_grad) {
  const int64_t Lp = b.prompt_len, Lc = b.completion_len;
  // The rows' window: micro-batches of a shuffled generation batch are padded to its longest
  // prompt and completion. Left-padding columns go (positions come from the whole batch and
  // padded keys are masked out), and so do completion columns after the rows' longest (the
  // attention is causal): the log-probs are those of the whole width.
  const auto window = micro_batch_window(b, begin, end);
  const int64_t lp = window.first, lc = window.second;  // not a structured binding: the lambda below captures them
  const auto cut = [&](const at::Tensor& t) { return t.slice(0, begin, end).slice(1, Lp - lp, Lp + lc).contiguous(); };
  // Hidden state at t predicts token t+1: completion tokens come from lp-1 .. lp+lc-2.
  at::Tensor h = m.forward(cut(b.ids), cut(b.pos), nullptr, cut(b.attn));
  at::Tensor logps = m.token_logprobs(h.slice(1, lp - 1, lp + lc - 1), b.ids.slice(0, begin, end).slice(1, Lp, Lp + lc),
                                      temperature, entropy, entropy_grad);
  if (lc == Lc) return logps;
  if (entropy && entropy->defined()) *entropy = at::constant_pad_nd(*entropy, {0, Lc - lc});
  return at::constant_pad_nd(logps, {0, Lc - lc});
}

namespace {
LossOptions loss_options(const GrpoConfig& g) {
  LossOptions lo;
  lo.loss_type = g.loss_type;
  lo.epsilon_low = g.epsilon;
  lo.epsilon_high = g.eps_high();
  lo.beta = g.beta;
  lo.use_bias_correction_kl = g.use_bias_correction_kl;
  lo.importance_sampling_level = g.importance_sampling_level;
  lo.delta = g.delta.value_or(0);
  lo.sapo_temperature_pos = g.sapo_temperature_pos;
  lo.sapo_temperature_neg = g.sapo_temperature_neg;
  lo.off_policy_mask_threshold = g.off_policy_mask_threshold.value_or(0);
  lo.vespo_k_pos = g.vespo_k_pos;
  lo.vespo_lambda_pos = g.vespo_lambda_pos;
  lo.vespo_k_neg = g.vespo_k_neg;
  lo.vespo_lambda_neg = g.vespo_lambda_neg;
  lo.top_entropy_quantile = g.top_entropy_quantile;
  lo.max_completion_length = g.max_completion_length;
  lo.sampling_correction = g.vllm_importance_sampling_correction;
  lo.sampling_correction_mode = g.vllm_importance_sampling_mode;
  lo.sampling_clip_min = g.vllm_importance_sampling_clip_min.value_or(0);
  lo.sampling_clip_max = g.vllm_importance_sampling_clip_max.value_or(std::numeric_limits<double>::infinity());
  return lo;
}
}  // namespace

at::Tensor PolicyOptimizer::no_grad_logps(const PolicyBatch& b, const char* what, bool adapters) {
  // In micro-batches, as the training pass (one pass over all rows held all their activations at once).
  const int64_t N = b.ids.size(0);
  at::Tensor out;
  with_micro_batch(what, [&](int64_t mb) {
    torch::NoGradGuard ng;
    m_.adapters_enabled = adapters;
    std::vector<at::Tensor> parts;
    try {
      for (int64_t s = 0; s < N; s += mb)
        parts.push_back(completion_logprobs(m_, b, s, std::min(N, s + mb), cfg_.temperature));
    } catch (...) {
      m_.adapters_enabled = true;
      throw;
    }
    m_.adapters_enabled = true;
    out = parts.size() == 1 ? parts[0] : at::cat(parts);
  });
  return out;
}

void PolicyOptimizer::reference_pass(PolicyBatch& b) {
  if (cfg_.beta <= 0) return;
  b.ref_logps = no_grad_logps(b, "reference pass", /*adapters=*/false);
  ++ref_passes_;
}

void PolicyOptimizer::old_policy_pass(PolicyBatch& b, bool on_policy) {
  if (!cfg_.vllm_importance_sampling_correction || b.sampling_logps.defined()) return;
  b.sampling_logps = b.old_logps;
  b.old_logps = at::Tensor();
  if (on_policy) return;
  b.old_logps = no_grad_logps(b, "old policy pass", /*adapters=*/true);
  ++old_passes_;
}

PolicyStats PolicyOptimizer::step(const std::vector<PolicySlice>& slices, double lr) {
  const auto dev = m_.device();
  m_.training = !cfg_.disable_dropout;  // the LoRA branch's dropout
  m_.gradient_checkpointing = cfg_.gradient_checkpointing;
  LossOptions lo = loss_options(cfg_);
  const bool need_entropy = lo.top_entropy_quantile < 1 || entropy_.enabled();
  lo.entropy_coef = entropy_.applied();  // the same for every micro-batch of the step
  const bool entropy_grad = lo.entropy_coef != 0.0;
  // The step's gradients and statistics, kept only when every micro-batch fitted.
  PolicyStats st;
  double entropy = 0, kept_entropy = 0, kept_tokens = 0;  // for the entropy control
  with_micro_batch("training pass", [&](int64_t mb) {
    opt_->zero_grad();
    st = PolicyStats{};
    if (lo.sampling_correction) st.sampling = SamplingStats{INFINITY, 0, -INFINITY, 0, 0};
    entropy = kept_entropy = kept_tokens = 0;
    double is_count = 0, diff_count = 0;  // the sampling means, weighted by their weights' and tokens' counts
    int64_t n_micro = 0;
    for (const PolicySlice& sl : slices) n_micro += (sl.end - sl.begin + mb - 1) / mb;
    lo.accumulation_steps = n_micro;
    for (const PolicySlice& sl : slices) {
      const PolicyBatch& b = *sl.batch;
      TORCH_CHECK(b.ids.device() == dev && (cfg_.beta <= 0 || b.ref_logps.defined()),
                  "PolicyOptimizer::step: a slice not on the model's device or without its reference pass");
      lo.num_items_in_batch = sl.num_items_in_batch;
      for (int64_t s = sl.begin; s < sl.end; s += mb) {
        const int64_t e = std::min(sl.end, s + mb);
        LossInputs in;
        in.logps =
            completion_logprobs(m_, b, s, e, cfg_.temperature, need_entropy ? &in.entropies : nullptr, entropy_grad);
        if (b.old_logps.defined()) in.old_logps = b.old_logps.slice(0, s, e);  // else the pass's own
        if (b.sampling_logps.defined()) in.sampling_logps = b.sampling_logps.slice(0, s, e);
        if (cfg_.beta > 0) in.ref_logps = b.ref_logps.slice(0, s, e);
        in.advantages = b.advantages.slice(0, s, e);
        in.mask = b.completion_mask.slice(0, s, e);
        LossStats ls;
        at::Tensor loss = grpo_loss(in, lo, &ls);  // this micro-batch's share of the step's loss
        loss.backward();
        st.loss += ls.loss;  // read with the statistics: no wait of its own
        st.kl += ls.kl / n_micro;
        st.clip_ratio += ls.clip_ratio / n_micro;
        entropy += ls.entropy / n_micro;
        kept_entropy += ls.kept_entropy_sum;
        kept_tokens += ls.kept_tokens;
        if (SamplingStats* w = st.sampling ? &*st.sampling : nullptr) {
          w->is_ratio_min = std::min(w->is_ratio_min, ls.is_ratio_min);
          w->is_ratio_max = std::max(w->is_ratio_max, ls.is_ratio_max);
          w->is_ratio_mean += ls.is_ratio_mean * ls.is_ratio_count;
          w->logp_diff_mean += ls.sampling_logp_diff_mean * ls.sampling_logp_diff_count;
          w->logp_diff_max = std::max(w->logp_diff_max, ls.sampling_logp_diff_max);
          is_count += ls.is_ratio_count, diff_count += ls.sampling_logp_diff_count;
        }
      }
    }
    if (SamplingStats* w = st.sampling ? &*st.sampling : nullptr) {  // over the step's tokens, as TRL's
      w->is_ratio_mean /= std::max(1.0, is_count);
      w->logp_diff_mean /= std::max(1.0, diff_count);
    }
  });
  if (need_entropy) st.entropy = entropy;
  entropy_.end_step(kept_entropy, kept_tokens);
  if (cfg_.max_grad_norm > 0) st.grad_norm = clip_grad_norm(params_, cfg_.max_grad_norm);
  double scale = 1;
  if (since_momentum_reset_ >= 0) {  // set only while AdamW has state (reset_momentum)
    const int64_t t = static_cast<torch::optim::AdamWParamState&>(*opt_->state().begin()->second).step() + 1;
    scale = fresh_momentum_lr_scale(cfg_.adam_beta1, t, ++since_momentum_reset_);
    if (scale == 1.0) since_momentum_reset_ = -1;  // 1 - beta1^k rounds to 1 (k ~ 370 at 0.9): corrected
  }
  for (auto& g : opt_->param_groups())
    static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr * scale).weight_decay(cfg_.weight_decay / scale);
  fused_adamw_step(*opt_);
  m_.training = false;
  if (entropy_.enabled()) st.entropy_coef = entropy_.coef();
  return st;
}

PolicyStats PolicyOptimizer::optimize(const PolicyBatch& batch, double lr) {
  const auto dev = m_.device();
  PolicyBatch b = batch.ids.device() == dev ? batch : batch.to(dev);
  if (!b.ref_logps.defined()) reference_pass(b);
  old_policy_pass(b, /*on_policy=*/cfg_.num_iterations == 1);
  const PolicySlice all{&b, 0, b.ids.size(0), tokens_per_optimizer_step(b.completion_mask.sum().item<double>(), 1, 1)};
  PolicyStats st;
  const int mu = cfg_.num_iterations;
  for (int it = 0; it < mu; ++it) {
    PolicyStats p = step({all}, lr);
    st.loss += p.loss / mu;
    st.kl += p.kl / mu;
    st.clip_ratio += p.clip_ratio / mu;
    if (p.entropy) st.entropy = st.entropy.value_or(0) + *p.entropy / mu;
    st.grad_norm = p.grad_norm;
    st.entropy_coef = p.entropy_coef;
    st.sampling = p.sampling;  // the last pass's (the first's weights are 1 on-policy)
  }
  return st;
}

void PolicyOptimizer::with_micro_batch(const char* what, const std::function<void(int64_t)>& pass) {
  const std::string where = std::string("the GRPO step's ") + what;
  halve_on_oom(mb_, cfg_.auto_find_batch_size, m_.device(), where, "sequences per micro-batch",
               "lower grpo.per_device_train_batch_size, set grpo.auto_find_batch_size = true, or set "
               "grpo.gradient_checkpointing = true",
               "set grpo.gradient_checkpointing = true, lower grpo.max_completion_length, or use a device with more "
               "memory",
               pass, [&] { opt_->zero_grad(); });  // what the failed pass accumulated
}

GrpoTrainer::GrpoTrainer(model::Model& m, const tok::Tokenizer& tk, tasks::Task& task, GrpoConfig cfg, int shard,
                         int num_shards, std::vector<double> weights)
    : m_(m),
      tk_(tk),
      task_(task),
      cfg_(std::move(cfg)),
      shard_(shard),
      num_shards_(num_shards),
      gen_prompts_(cfg_.prompts_per_generation()) {
  cfg_.validate();
  weights_ = cfg_.reward_weights.empty() ? weights : cfg_.reward_weights;
  policy_ = std::make_unique<PolicyOptimizer>(m_, cfg_);
  // A conversational dataset without a usable template fails here, not mid-run.
  prompt_ids(tk_, task_.train_example(0, shard_, num_shards_), cfg_.max_prompt_length, cfg_.chat_template_kwargs);
  // So does a tool task whose model's format for tool calls cannot be told.
  if (task_.tools) turns_ = std::make_unique<TurnParser>(tk_, task_.tools->response_template());
}

GrpoTrainer::~GrpoTrainer() = default;

double GrpoTrainer::current_lr() const {
  double total = std::max(1, cfg_.max_steps), s = static_cast<double>(step_);
  double warm = std::ceil(cfg_.warmup_ratio * total);
  if (warm > 0 && s < warm) return cfg_.learning_rate * (s + 1) / warm;
  double p = std::clamp((s - warm) / std::max(1.0, total - warm), 0.0, 1.0);
  switch (cfg_.lr_scheduler_type) {
    case LrSchedulerType::constant: return cfg_.learning_rate;
    case LrSchedulerType::cosine: return cfg_.learning_rate * 0.5 * (1 + std::cos(M_PI * p));
    case LrSchedulerType::linear: break;
  }
  return cfg_.learning_rate * (1 - p);
}

// A generation batch: the rollouts and what the steps that train on it report.
struct GrpoTrainer::Rollouts {
  PolicyBatch batch;           // on the model's device, rows shuffled, after the reference and old policy passes
  double tokens_per_step = 0;  // the token normalizer of its micro-batches (tokens_per_optimizer_step)
  std::vector<double> rewards, first;                   // per completion: combined, the first function's (accuracy)
  int64_t groups = 0, zero_std_groups = 0, tokens = 0;  // tokens: the model's, not the tools'
  int64_t tool_calls = 0, tool_failures = 0;            // with task.tool_command
  std::vector<LoggedCompletion> completions;            // with log_completions
  double gen_seconds = 0, score_seconds = 0, pass_seconds = 0;  // pass: reference and old policy
};

bool GrpoTrainer::at_generation_boundary() const {
  const int64_t cycle = int64_t{cfg_.micro_batches_per_generation()} * cfg_.num_iterations;
  return !rollouts_ || (step_ * cfg_.gradient_accumulation_steps) % cycle == 0;
}

std::shared_ptr<GrpoTrainer::Rollouts> GrpoTrainer::generate(int64_t micro_batch) {
  auto out = std::make_shared<Rollouts>();
  Rollouts& r = *out;
  const int G = cfg_.num_generations, P = cfg_.prompts_per_generation();
  // 1. Prompts of this worker's shard.
  std::vector<tasks::Example> examples;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> prompt_texts;  // kept for log_completions
  for (int i = 0; i < P; ++i) {
    examples.push_back(task_.train_example(cursor_ + i, shard_, num_shards_));
    std::string text = prompt_text(tk_, examples.back(), cfg_.chat_template_kwargs);
    prompts.push_back(prompt_ids_of_text(tk_, examples.back(), text, cfg_.max_prompt_length));
    if (log_completions_) prompt_texts.push_back(std::move(text));
  }
  cursor_ += P;
  // 2. Generate G completions per prompt with the current policy.
  auto t0 = Clock::now();
  m_.training = false;
  gen::GenerateOptions go;
  go.num_generations = G;
  go.max_new_tokens = cfg_.max_completion_length;
  go.temperature = cfg_.temperature;
  go.top_k = cfg_.top_k;
  go.top_p = cfg_.top_p;
  go.min_p = cfg_.min_p;
  go.repetition_penalty = cfg_.repetition_penalty;
  go.stop_token_ids = stop_ids(tk_);
  // A second generation inside one optimizer step (steps_per_generation < gradient_accumulation_steps)
  // draws other streams.
  go.seed = static_cast<uint64_t>(cfg_.seed) * 1000003ULL + static_cast<uint64_t>(step_) * 7919ULL + shard_ +
            static_cast<uint64_t>(micro_batch % cfg_.gradient_accumulation_steps) * 1000033ULL;
  // All prompts in one call, or in parts of gen_prompts_ after one ran out of memory: each
  // completion draws from its own prompt's streams, so the parts give what one call would.
  auto generate_all = [&](const std::vector<std::vector<int32_t>>& ps, gen::GenerateOptions& o, int64_t& at_once) {
    std::vector<gen::Completion> out;
    const auto n_ps = static_cast<int64_t>(ps.size());
    halve_on_oom(
        at_once, cfg_.auto_find_batch_size, m_.device(), "generation", "prompts at once",
        "set grpo.auto_find_batch_size = true, or lower grpo.per_device_train_batch_size (prompts per step) or "
        "grpo.max_completion_length",
        "lower grpo.max_completion_length or grpo.num_generations, or use a device with more memory", [&](int64_t n) {
          out.clear();
          for (int64_t s = 0; s < n_ps; s += n) {
            std::vector<std::vector<int32_t>> part(ps.begin() + s, ps.begin() + std::min<int64_t>(n_ps, s + n));
            o.first_prompt_index = s;
            auto c = gen::generate(m_, part, o);
            out.insert(out.end(), std::make_move_iterator(c.begin()), std::make_move_iterator(c.end()));
          }
        });
    return out;
  };
  std::vector<gen::Completion> comps = generate_all(prompts, go, gen_prompts_);
  std::vector<const tasks::Example*> ex;
  for (auto& c : comps) ex.push_back(&examples[static_cast<size_t>(c.prompt_index)]);
  // 2b. With a tool command, TRL's tool-calling loop: calls run, the model generates on.
  std::vector<nlohmann::ordered_json> turns;
  if (task_.tools) {
    auto res =
        run_tools(m_, tk_, *turns_, task_, ex, prompts, comps, go, cfg_.max_tool_calling_iterations,
                  cfg_.chat_template_kwargs, [&](const std::vector<std::vector<int32_t>>& ps, gen::GenerateOptions& o) {
                    int64_t at_once = static_cast<int64_t>(ps.size());
                    return generate_all(ps, o, at_once);
                  });
    turns = std::move(res.messages);
    r.tool_calls = res.calls, r.tool_failures = res.failures;
  }
  r.gen_seconds = seconds_since(t0);
  const auto ts = Clock::now();
  // 3. Rewards and group-relative advantages: a completion that called tools is scored on its
  // last turn's content (a reward command gets all its turns).
  const std::vector<std::string> texts = reward_texts(tk_, comps, turns);
  std::vector<std::vector<double>> per_func;  // [function][completion]
  r.rewards = combined_rewards(task_, weights_, ex, texts, &r.first, &per_func, turns.empty() ? nullptr : &turns);
  at::Tensor rt = torch::tensor(r.rewards, torch::kDouble);
  at::Tensor adv;  // [P*G]
  if (cfg_.multi_objective_aggregation == MultiObjectiveAggregation::normalize_then_sum) {
    std::vector<double> flat;
    for (auto& s : per_func) flat.insert(flat.end(), s.begin(), s.end());
    const auto K = static_cast<int64_t>(per_func.size());
    std::vector<double> w = weights_.empty() ? std::vector<double>(per_func.size(), 1.0) : weights_;
    adv = decoupled_advantages(torch::tensor(flat, torch::kDouble).view({K, -1}).t(), w, G);
  } else {
    adv = group_advantages(rt, G, cfg_.scale_rewards);
  }
  {
    at::Tensor groups = rt.view({-1, G});
    r.groups = groups.size(0);
    r.zero_std_groups = (std::get<0>(groups.max(1)) == std::get<0>(groups.min(1))).sum().item<int64_t>();
  }
  if (log_completions_) {
    const at::Tensor a = adv.to(at::kDouble).contiguous();  // on the host: from the rewards
    const double* av = a.const_data_ptr<double>();
    for (size_t i = 0; i < comps.size(); ++i) {
      LoggedCompletion l{prompt_texts[static_cast<size_t>(comps[i].prompt_index)],
                         comps[i].tool_mask.empty() ? texts[i] : completion_text(tk_, comps[i].tokens),
                         r.rewards[i],
                         av[i],
                         {}};
      for (auto& f : per_func) l.rewards.push_back(f[i]);
      r.completions.push_back(std::move(l));
    }
  }
  for (auto& c : comps)
    r.tokens += c.tool_mask.empty() ? static_cast<int64_t>(c.tokens.size())
                                    : std::accumulate(c.tool_mask.begin(), c.tool_mask.end(), int64_t{0});

  // 4. The training batch, its rows shuffled (TRL's shuffle_sequence_dict): each micro-batch a
  // sample of the whole generation batch.
  PolicyBatch b = policy_batch(prompts, comps, cfg_.mask_truncated_completions, cfg_.pad_to_multiple_of.value_or(1));
  b.advantages = adv;
  const auto perm = permutation(comps.size(), splitmix64(go.seed ^ 0x726f77734f726465ULL));
  std::vector<int64_t> order(perm.begin(), perm.end());
  if (cfg_.group_by_length) {
    // Only among rows that share an optimizer step: blocks of gcd(grad_acc, steps_per_generation)
    // slices of the generation batch never straddle two steps.
    const int64_t slices = std::gcd(cfg_.gradient_accumulation_steps, cfg_.micro_batches_per_generation());
    order = length_grouped_order(b, std::move(order), slices * cfg_.per_device_train_batch_size);
  }
  r.batch = b.rows(torch::tensor(order, torch::kLong)).to(m_.device());
  r.tokens_per_step = tokens_per_optimizer_step(r.batch.completion_mask.sum().item<double>(),
                                                cfg_.gradient_accumulation_steps, cfg_.micro_batches_per_generation());
  r.score_seconds = seconds_since(ts);
  // 5. The reference pass (adapter off) and the old policy's, once per generation batch.
  const auto t1 = Clock::now();
  policy_->reference_pass(r.batch);
  policy_->old_policy_pass(r.batch, cfg_.trains_on_policy());
  r.pass_seconds = seconds_since(t1);
  return out;
}

StepStats GrpoTrainer::step() {
  StepStats st;
  st.step = step_ + 1;
  const int GA = cfg_.gradient_accumulation_steps, spg = cfg_.micro_batches_per_generation();
  const int64_t pd = cfg_.per_device_train_batch_size, cycle = int64_t{spg} * cfg_.num_iterations;
  // TRL's _prepare_inputs: micro-batch i trains on slice i mod steps_per_generation of the
  // generation batch, which is made anew every steps_per_generation x num_iterations micro-batches
  // (and after a restart, which keeps no rollouts).
  std::vector<std::shared_ptr<Rollouts>> made, used;
  std::vector<PolicySlice> slices;
  for (int k = 0; k < GA; ++k) {
    const int64_t micro = step_ * GA + k;
    if (!rollouts_ || micro % cycle == 0) made.push_back(rollouts_ = generate(micro));
    const int64_t j = micro % spg;
    slices.push_back({&rollouts_->batch, j * pd, (j + 1) * pd, rollouts_->tokens_per_step});
    used.push_back(rollouts_);  // alive until the step is done
  }
  // The rollout statistics: of the batches made in this step, else of the one trained on.
  std::vector<double> rewards, first;
  int64_t groups = 0, zero_std = 0, tokens = 0, samples = 0, tool_calls = 0, tool_failures = 0;
  double train_extra = 0;  // the reference and old policy passes of the batches made
  for (const auto& r : made.empty() ? std::vector{rollouts_} : made) {
    rewards.insert(rewards.end(), r->rewards.begin(), r->rewards.end());
    first.insert(first.end(), r->first.begin(), r->first.end());
    groups += r->groups, zero_std += r->zero_std_groups, tokens += r->tokens;
    tool_calls += r->tool_calls, tool_failures += r->tool_failures;
    samples += static_cast<int64_t>(r->rewards.size());
  }
  for (const auto& r : made) {
    st.gen_seconds += r->gen_seconds, st.score_seconds += r->score_seconds, train_extra += r->pass_seconds;
    st.completions.insert(st.completions.end(), r->completions.begin(), r->completions.end());
  }
  const double n = static_cast<double>(rewards.size());
  for (size_t i = 0; i < rewards.size(); ++i) st.reward_mean += rewards[i] / n, st.accuracy += first[i] / n;
  double ss = 0;
  for (double x : rewards) ss += (x - st.reward_mean) * (x - st.reward_mean);
  st.reward_std = std::sqrt(ss / std::max(1.0, n - 1));  // Bessel-corrected, as torch.std
  st.frac_reward_zero_std = static_cast<double>(zero_std) / std::max<int64_t>(1, groups);
  st.completion_length = static_cast<double>(tokens) / std::max<int64_t>(1, samples);
  if (!made.empty()) st.samples = samples, st.tokens = tokens;
  if (task_.tools)  // TRL's tools/call_frequency (per completion) and tools/failure_frequency (per call)
    st.tools = ToolStats{static_cast<double>(tool_calls) / std::max<int64_t>(1, samples),
                         tool_calls ? static_cast<double>(tool_failures) / static_cast<double>(tool_calls) : 0.0};

  // 6. One optimizer step over the micro-batches.
  auto t1 = Clock::now();
  const double lr = current_lr();
  PolicyStats ps = policy_->step(slices, lr);
  st.loss = ps.loss;
  st.kl = ps.kl;
  st.clip_ratio = ps.clip_ratio;
  st.grad_norm = ps.grad_norm;
  st.entropy = ps.entropy;
  st.entropy_coef = ps.entropy_coef;
  st.sampling = ps.sampling;
  st.lr = lr;
  st.train_seconds = seconds_since(t1) + train_extra;
  ++step_;
  return st;
}

void GrpoTrainer::save_state(const std::string& path) {
  torch::serialize::OutputArchive a;
  policy_->adamw().save(a);
  a.write("step", torch::tensor(step_));
  a.write("cursor", torch::tensor(static_cast<int64_t>(cursor_)));
  const EntropyControl& ec = policy_->entropy_control();
  a.write("entropy_coef", torch::tensor(ec.coef(), torch::kDouble));
  a.write("last_entropy", torch::tensor(ec.last_entropy(), torch::kDouble));
  a.save_to(path);
}

void GrpoTrainer::load_state(const std::string& path) {
  torch::serialize::InputArchive a;
  try {
    a.load_from(path, m_.device());  // AdamW's moments where the adapter is
  } catch (const c10::Error& e) {
    throw UserError("cannot read trainer state '" + path + "'", "delete it to start the optimizer afresh");
  }
  policy_->adamw().load(a);
  at::Tensor s, c;
  a.read("step", s);
  a.read("cursor", c);
  step_ = s.item<int64_t>();
  cursor_ = static_cast<uint64_t>(c.item<int64_t>());
  rollouts_.reset();  // sampled before the state: the next step samples anew
  // Adaptive entropy control's state (TRL's entropy_ctrl_state.json); states from before it keep
  // the configured start.
  at::Tensor coef, last;
  if (a.try_read("entropy_coef", coef) && a.try_read("last_entropy", last))
    policy_->entropy_control().restore(coef.item<double>(), last.item<double>());
}

namespace {
constexpr const char* kPortableStateFormat = "bucketrl-trainer-state-1";
}

std::string GrpoTrainer::portable_state() const {
  std::vector<torch::Tensor> v;
  std::vector<st::TensorData> td;
  for (auto& t : policy_->second_moments()) v.push_back(t.to(torch::kCPU, torch::kBFloat16).contiguous());
  for (size_t i = 0; i < v.size(); ++i) td.push_back(model::tensor_data("exp_avg_sq." + std::to_string(i), v[i]));
  const EntropyControl& ec = policy_->entropy_control();
  return st::serialize_safetensors(td, {{"format", kPortableStateFormat},
                                        {"step", std::to_string(step_)},
                                        {"cursor", std::to_string(cursor_)},
                                        {"adam_step", std::to_string(policy_->adam_step())},
                                        {"entropy_coef", fmt::format("{}", ec.coef())},
                                        {"last_entropy", fmt::format("{}", ec.last_entropy())}});
}

namespace {
// A non-negative integer from the state's metadata; nullopt if absent or not one.
std::optional<int64_t> state_counter(const st::SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  if (it == f.metadata().end() || it->second.empty() || it->second.size() > 18 ||
      it->second.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoll(it->second);
}
// A number from the state's metadata (fmt's shortest round-trip form; "inf" allowed); nullopt if
// absent, NaN or not one.
std::optional<double> state_number(const st::SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  if (it == f.metadata().end() || it->second.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (*end != '\0' || std::isnan(v)) return std::nullopt;
  return v;
}
std::string state_format(const st::SafetensorsFile& f) {
  auto it = f.metadata().find("format");
  return it == f.metadata().end() ? std::string() : it->second;
}
}  // namespace

std::optional<int64_t> GrpoTrainer::portable_state_step(const std::string& bytes) {
  try {
    auto f = st::SafetensorsFile::from_buffer(bytes.data(), bytes.size(), "trainer state");
    if (state_format(f) != kPortableStateFormat) return std::nullopt;
    return state_counter(f, "step");
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void GrpoTrainer::load_portable_state(const std::string& bytes, const std::string& label) {
  const std::string fix = "delete it: the worker then starts its optimizer afresh";
  auto f = st::SafetensorsFile::from_buffer(bytes.data(), bytes.size(), label);
  if (const std::string fmt = state_format(f); fmt != kPortableStateFormat)
    throw UserError(label + " is not a bucketrl trainer state (metadata format '" + fmt + "', expected " +
                        kPortableStateFormat + ")",
                    fix);
  auto step = state_counter(f, "step"), cursor = state_counter(f, "cursor"), adam = state_counter(f, "adam_step");
  if (!step || !cursor || !adam) throw UserError(label + ": its metadata lacks a step, cursor or adam_step count", fix);
  auto params = lora::parameters(m_);
  const size_t n = *adam > 0 ? params.size() : 0;
  if (f.names().size() != n)
    throw UserError(label + " holds " + std::to_string(f.names().size()) + " second moments, this adapter has " +
                        std::to_string(n) + " parameters (another lora config?)",
                    fix);
  std::vector<torch::Tensor> v;
  for (size_t i = 0; i < n; ++i) {
    const auto& view = f.get("exp_avg_sq." + std::to_string(i));
    auto t = model::copy_tensor(view, torch::kFloat);
    if (t.sizes() != params[i].sizes())
      throw UserError(label + ": exp_avg_sq." + std::to_string(i) + " has shape " + c10::str(t.sizes()) +
                          ", the adapter's parameter " + c10::str(params[i].sizes()),
                      fix);
    if (!torch::isfinite(t).all().item<bool>() || (t < 0).any().item<bool>())
      throw UserError(label + ": exp_avg_sq." + std::to_string(i) + " holds negative or non-finite values", fix);
    v.push_back(std::move(t));
  }
  // Adaptive entropy control's state; a state from before it keeps the configured start.
  const auto coef = state_number(f, "entropy_coef"), last = state_number(f, "last_entropy");
  if ((coef || last) && !(coef && std::isfinite(*coef) && last && *last >= 0))
    throw UserError(label +
                        ": its entropy_coef or last_entropy metadata is not a number (a finite coefficient, an "
                        "entropy >= 0 or inf)",
                    fix);
  policy_->set_second_moments(v, *adam);
  if (coef) policy_->entropy_control().restore(*coef, *last);
  step_ = *step;
  cursor_ = static_cast<uint64_t>(*cursor);
  rollouts_.reset();
}

}  // namespace brl::grpo
