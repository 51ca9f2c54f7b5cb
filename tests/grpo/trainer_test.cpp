// The GRPO step on a real (tiny) model: base stays bit-identical, the adapter moves, the
// reference pass runs only with beta > 0, the loss gradient through the model matches
// finite differences, and the optimizer state resumes; the step's clipping and AdamW in
// multi-tensor kernels (grpo/optim.h) equal libtorch's per-tensor clip_grad_norm_ and AdamW.
#include "grpo/trainer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <sstream>

#include "../model/test_util.h"
#include "tool_model.h"
#include "optim_check.h"
#include "config/lora_config.h"
#include "generate/generate.h"
#include "grpo/loss.h"
#include "grpo/pretrain.h"
#include "lora/lora.h"
#include "model/loader.h"
#include "model/tensor_io.h"
#include "tasks/rewards.h"
#include "tasks/task.h"
#include "util/error.h"
#include "util/safetensors.h"

using namespace brl;

namespace {
const int kThreads = test::init_threads();

model::ModelConfig byte_config() {
  auto c = test::tiny_config("llama");
  c.vocab_size = 257;
  c.eos_token_ids = {256};
  return c;
}

// A random model almost never answers correctly, so correctness rewards are all zero and
// every advantage vanishes; reward the completion's length instead so the groups vary.
struct LengthReward : tasks::RewardFn {
  std::string name() const override { return "length"; }
  std::vector<double> score(const std::vector<const tasks::Example*>&, const std::vector<std::string>& c) override {
    std::vector<double> r;
    for (auto& s : c) r.push_back(static_cast<double>(s.size()));
    return r;
  }
};

grpo::GrpoConfig small_grpo(double beta) {
  grpo::GrpoConfig g;
  g.num_generations = 4;
  g.per_device_train_batch_size = 4;
  g.gradient_accumulation_steps = 2;  // 2 prompts x 4 completions, 2 micro-batches
  g.max_completion_length = 4;
  g.learning_rate = 1e-2;
  g.beta = beta;
  g.max_steps = 10;
  return g;
}

// The byte-level tokenizer and a task rewarded by completion length, shared by the step tests.
std::unique_ptr<tasks::Task> length_task() {
  tasks::TaskOptions to;
  to.num_eval = 8;
  auto task = tasks::make_task(to);
  task->rewards = {std::make_shared<LengthReward>()};
  return task;
}
struct StepEnv {
  test::TempDir tmp;
  tok::Tokenizer tk = (grpo::write_byte_tokenizer(tmp.str("tok")), tok::Tokenizer::from_dir(tmp.str("tok")));
  std::unique_ptr<tasks::Task> task = length_task();
};

// A random byte-level model with an r = 2 adapter on every linear module (B = 0).
void attach_small_lora(model::Model& m) {
  LoraConfig lc;
  lc.r = 2;
  lc.target_modules = {"all-linear"};
  lora::attach(m, lc);
}

// Every lora_B of the adapter, flattened into one tensor.
torch::Tensor lora_b(model::Model& m) {
  std::vector<torch::Tensor> b;
  for (auto& [k, t] : lora::adapter_tensors(m))
    if (k.find("lora_B") != std::string::npos) b.push_back(t.flatten().clone());
  return torch::cat(b);
}
}  // namespace

TEST(GrpoTrainer, StepTrainsAdapterOnlyAndSkipsReferenceWhenBetaZero) {
  StepEnv env;
  auto& [tmp, tk, task] = env;
  for (double beta : {0.0, 0.1}) {
    auto m = model::random_model(byte_config(), 11, 0.2);
    attach_small_lora(m);
    std::vector<torch::Tensor> base;
    for (auto& nt : m.named_tensors())
      if (nt.tensor->defined()) base.push_back(nt.tensor->clone());
    grpo::GrpoTrainer tr(m, tk, *task, small_grpo(beta));
    auto s = tr.step();
    EXPECT_EQ(s.samples, 8);
    EXPECT_EQ(tr.reference_passes(), beta > 0 ? 1 : 0);
    size_t i = 0;
    for (auto& nt : m.named_tensors())
      if (nt.tensor->defined()) {
        EXPECT_TRUE(torch::equal(*nt.tensor, base[i++])) << nt.name;
      }
    // B starts at zero; after a step with non-zero advantages it is not.
    ASSERT_GT(s.reward_std, 0.0);  // non-zero advantages, so the update is not vacuous
    EXPECT_GE(s.frac_reward_zero_std, 0.0);
    EXPECT_LT(s.frac_reward_zero_std, 1.0);  // some group varied, or reward_std would be 0
    EXPECT_GT(lora_b(m).abs().sum().item<double>(), 0.0);
    EXPECT_TRUE(std::isfinite(s.loss));
    // Resume: state round trip keeps the step and example counters.
    tr.save_state(tmp.str("state.pt"));
    grpo::GrpoTrainer tr2(m, tk, *task, small_grpo(beta));
    tr2.load_state(tmp.str("state.pt"));
    EXPECT_EQ(tr2.global_step(), 1);
    EXPECT_EQ(tr2.example_cursor(), tr.example_cursor());
  }
}

// vespo and the entropy mask through the trainer (the entropies come from the LM head's pass):
// each trains the adapter, and a mask that keeps one token per micro-batch moves it differently
// from one that keeps all.
TEST(GrpoTrainer, VespoAndTopEntropyQuantileTrainTheAdapter) {
  StepEnv env;
  auto run = [&](const std::string& type, double rho) {
    auto m = model::random_model(byte_config(), 11, 0.2);
    attach_small_lora(m);
    auto g = small_grpo(0.0);
    g.loss_type = grpo::kLossTypes.value(type);
    g.top_entropy_quantile = rho;
    grpo::GrpoTrainer tr(m, env.tk, *env.task, g);
    auto s = tr.step();
    EXPECT_TRUE(std::isfinite(s.loss)) << type << " " << rho;
    EXPECT_GT(s.reward_std, 0.0);
    return lora_b(m);
  };
  auto vespo = run("vespo", 1.0), all = run("dapo", 1.0), top = run("dapo", 0.0);
  EXPECT_GT(vespo.abs().sum().item<double>(), 0.0);
  EXPECT_GT(top.abs().sum().item<double>(), 0.0);
  EXPECT_GT((top - all).abs().max().item<double>(), 0.0);
}

// d loss / d lora_B through the whole model (double precision) vs central differences.
TEST(GrpoTrainer, LossGradientThroughModelMatchesFiniteDifferences) {
  auto m = model::random_model(test::tiny_config("qwen2"), 12, 0.2, torch::kDouble);
  LoraConfig lc;
  lc.r = 2;
  lc.target_modules = {"q", "v", "down"};
  lora::attach(m, lc);
  {
    torch::NoGradGuard ng;
    for (auto& [k, t] : lora::adapter_tensors(m)) t.normal_(0, 0.1);
  }
  m.set_requires_grad(false);
  auto ids = torch::tensor({{5, 17, 3, 42, 8, 61}, {9, 2, 33, 7, 70, 11}}, torch::kLong);
  auto pos = torch::arange(6, torch::kLong).unsqueeze(0).expand({2, -1});
  grpo::LossInputs in;
  in.old_logps = torch::full({2, 3}, -4.0, torch::kDouble);
  in.ref_logps = torch::full({2, 3}, -4.5, torch::kDouble);
  in.advantages = torch::tensor({0.7, -1.3}, torch::kDouble);
  in.mask = torch::tensor({{1.0, 1.0, 1.0}, {1.0, 1.0, 0.0}}, torch::kDouble);
  grpo::LossOptions lo;
  lo.loss_type = grpo::LossType::grpo;
  lo.beta = 0.05;
  lo.epsilon_low = lo.epsilon_high = 10.0;  // no clipping kinks near the evaluation point
  auto loss_fn = [&] {
    auto h = m.forward(ids, pos);
    in.logps = m.token_logprobs(h.slice(1, 2, 5), ids.slice(1, 3, 6));
    return grpo::grpo_loss(in, lo);
  };
  auto tensors = lora::adapter_tensors(m);
  torch::Tensor B = tensors[1].second;  // layer 0 q_proj lora_B
  ASSERT_NE(tensors[1].first.find("q_proj.lora_B"), std::string::npos);
  B.set_requires_grad(true);
  if (B.grad().defined()) B.grad().zero_();
  loss_fn().backward();
  auto g = B.grad().clone();
  const double h = 1e-6;
  for (int64_t k : {0, 5, 17, 40}) {
    torch::NoGradGuard ng;
    double orig = B.view({-1})[k].item<double>();
    B.view({-1})[k] = orig + h;
    double lp = loss_fn().item<double>();
    B.view({-1})[k] = orig - h;
    double lm = loss_fn().item<double>();
    B.view({-1})[k] = orig;
    EXPECT_NEAR(g.view({-1})[k].item<double>(), (lp - lm) / (2 * h), 1e-6) << "element " << k;
  }
}

// The pass@k estimator against hand-derived values: 1 - C(n-c, k) / C(n, k).
TEST(Evaluate, PassAtKEstimator) {
  EXPECT_DOUBLE_EQ(grpo::pass_at_k(8, 0, 8), 0.0);
  EXPECT_DOUBLE_EQ(grpo::pass_at_k(8, 8, 1), 1.0);
  EXPECT_NEAR(grpo::pass_at_k(8, 3, 1), 3.0 / 8.0, 1e-12);           // k = 1: c / n
  EXPECT_NEAR(grpo::pass_at_k(8, 1, 8), 1.0, 1e-12);                 // any pass among all n
  EXPECT_NEAR(grpo::pass_at_k(10, 3, 2), 1.0 - 21.0 / 45.0, 1e-12);  // C(7,2) = 21, C(10,2) = 45
  EXPECT_NEAR(grpo::pass_at_k(8, 2, 4), 1.0 - 15.0 / 70.0, 1e-12);   // C(6,4) = 15, C(8,4) = 70
}

// A correctness reward that passes answers whose first byte is even, and remembers every
// answer it scored, per example: the counts evaluate() must have turned into pass@1 / pass@k.
struct EvenFirstByte : tasks::RewardFn {
  std::map<const tasks::Example*, std::vector<double>> seen;
  std::string name() const override { return "even"; }
  std::vector<double> score(const std::vector<const tasks::Example*>& ex, const std::vector<std::string>& c) override {
    std::vector<double> r;
    for (size_t i = 0; i < c.size(); ++i) {
      r.push_back(!c[i].empty() && static_cast<unsigned char>(c[i][0]) % 2 == 0 ? 1.0 : 0.0);
      seen[ex[i]].push_back(r.back());
    }
    return r;
  }
};

// TRL's num_generations_eval: the evaluator's sampled answers per prompt (k of pass@k) when
// train.eval_pass_k is -1; an explicit k still wins.
TEST(Evaluate, NumGenerationsEvalIsTheDefaultK) {
  grpo::GrpoConfig g;
  g.num_generations = 8;
  EXPECT_EQ(grpo::pass_at_k_options(g, -1).k, 8);
  g.num_generations_eval = 4;
  EXPECT_EQ(grpo::pass_at_k_options(g, -1).k, 4);
  EXPECT_EQ(grpo::pass_at_k_options(g, 2).k, 2);
  EXPECT_EQ(grpo::pass_at_k_options(g, 0).k, 0);
}

TEST(Evaluate, PassAtKCountsTheSampledAnswers) {
  StepEnv env;
  auto m = model::random_model(byte_config(), 11, 0.2);
  auto even = std::make_shared<EvenFirstByte>();
  env.task->rewards = {even};
  grpo::PassAtKOptions pk;
  pk.k = 4;
  pk.temperature = 1.0;
  pk.seed = 5;
  auto ev = grpo::evaluate(m, env.tk, *env.task, 8, 3, 0.0, 0, pk);
  ASSERT_EQ(ev.n, 8);
  EXPECT_EQ(ev.k, 4);
  // Each example was scored once greedily, then k times sampled.
  ASSERT_EQ(even->seen.size(), 8u);
  double p1 = 0, pk_any = 0;
  for (auto& [ex, r] : even->seen) {
    ASSERT_EQ(r.size(), 5u);
    double c = r[1] + r[2] + r[3] + r[4];
    p1 += c / 4, pk_any += c > 0;
  }
  EXPECT_NEAR(ev.pass_at_1, p1 / 8, 1e-12);
  EXPECT_NEAR(ev.pass_at_k, pk_any / 8, 1e-12);
  EXPECT_GT(ev.pass_at_1, 0.0);  // the random model's first byte is even about half the time
  EXPECT_LT(ev.pass_at_1, ev.pass_at_k);
  // Sampling at temperature 0 gives k copies of the greedy answer: pass@1 = pass@k = accuracy.
  pk.temperature = 0.0;
  auto greedy = grpo::evaluate(m, env.tk, *env.task, 8, 3, 0.0, 0, pk);
  EXPECT_DOUBLE_EQ(greedy.pass_at_1, greedy.accuracy);
  EXPECT_DOUBLE_EQ(greedy.pass_at_k, greedy.accuracy);
  // k = 0: not measured.
  EXPECT_EQ(grpo::evaluate(m, env.tk, *env.task, 8, 3).k, 0);
}

// n > k samples: pass@1 = c / n and pass@k = 1 - C(n - c, k) / C(n, k) per example, with the
// binomials counted here from Pascal's triangle (exact integers), not the product form.
TEST(Evaluate, PassAtKFromMoreSamplesThanK) {
  StepEnv env;
  auto m = model::random_model(byte_config(), 11, 0.2);
  auto even = std::make_shared<EvenFirstByte>();
  env.task->rewards = {even};
  grpo::PassAtKOptions pk;
  pk.k = 4, pk.n = 12;
  pk.temperature = 1.0;
  pk.seed = 5;
  auto ev = grpo::evaluate(m, env.tk, *env.task, 8, 3, 0.0, 0, pk);
  ASSERT_EQ(ev.n, 8);
  EXPECT_EQ(ev.k, 4);
  std::vector<std::vector<uint64_t>> C(13, std::vector<uint64_t>(13, 0));
  for (int a = 0; a <= 12; ++a) {
    C[a][0] = 1;
    for (int b = 1; b <= a; ++b) C[a][b] = C[a - 1][b - 1] + C[a - 1][b];
  }
  ASSERT_EQ(even->seen.size(), 8u);
  double p1 = 0, p4 = 0;
  bool between = false;  // some example with 0 < c < n, where the estimator differs from "any"
  for (auto& [ex, r] : even->seen) {
    ASSERT_EQ(r.size(), 13u);  // once greedy, then n sampled
    int c = 0;
    for (size_t i = 1; i < r.size(); ++i) c += r[i] >= 1.0;
    between |= c > 0 && c < 9;  // with c >= 9 of 12, every 4 of them hold a pass
    p1 += c / 12.0;
    p4 += 1.0 - static_cast<double>(C[12 - c][4]) / static_cast<double>(C[12][4]);
  }
  EXPECT_TRUE(between);
  EXPECT_NEAR(ev.pass_at_1, p1 / 8, 1e-12);
  EXPECT_NEAR(ev.pass_at_k, p4 / 8, 1e-12);
}

// A reward that is the same for every answer leaves every group uniform: frac_reward_zero_std = 1
// (TRL's metric), zero advantages, and the adapter's B stays at zero.
struct ConstantReward : tasks::RewardFn {
  std::string name() const override { return "constant"; }
  std::vector<double> score(const std::vector<const tasks::Example*>&, const std::vector<std::string>& c) override {
    return std::vector<double>(c.size(), 1.0);
  }
};

TEST(GrpoTrainer, UniformGroupsAreCountedAndTrainNothing) {
  StepEnv env;
  env.task->rewards = {std::make_shared<ConstantReward>()};
  auto m = model::random_model(byte_config(), 11, 0.2);
  attach_small_lora(m);
  grpo::GrpoTrainer tr(m, env.tk, *env.task, small_grpo(0.0));
  auto s = tr.step();
  EXPECT_DOUBLE_EQ(s.frac_reward_zero_std, 1.0);
  EXPECT_DOUBLE_EQ(s.reward_std, 0.0);
  EXPECT_EQ(lora_b(m).abs().sum().item<double>(), 0.0);
}

// grpo.chat_template_kwargs reach every prompt the trainer and the evaluation render, and an
// example's own chat_template_kwargs override them key by key. The template refuses to render
// unless `must_be_set` is true, so any prompt rendered without the run's kwargs stops the test.
TEST(GrpoTrainer, RunChatTemplateKwargsReachEveryPromptAndExamplesOverrideThem) {
  StepEnv env;
  test::write_file(env.tmp.str("tok/chat_template.jinja"),
                   "{% if not must_be_set %}{{ raise_exception('must_be_set is not true') }}{% endif %}"
                   "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}={% endif %}");
  const auto tk = tok::Tokenizer::from_dir(env.tmp.str("tok"));
  std::string jsonl;
  for (int i = 0; i < 20; ++i)
    jsonl += nlohmann::json{{"prompt", {{{"role", "user"}, {"content", std::to_string(i) + "+1"}}}},
                            {"answer", std::to_string(i + 1)}}
                 .dump() +
             "\n";
  test::write_file(env.tmp.str("train.jsonl"), jsonl);
  tasks::TaskOptions to;
  to.name = "jsonl";
  to.dataset_path = env.tmp.str("train.jsonl");
  auto task = tasks::make_task(to);
  auto m = model::random_model(byte_config(), 11, 0.2);
  attach_small_lora(m);
  auto g = small_grpo(0.0);
  auto refused = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const UserError& e) {
      return std::string(e.what()).find("must_be_set is not true") != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(refused([&] { grpo::GrpoTrainer{m, tk, *task, g}; }));
  g.chat_template_kwargs = {{"must_be_set", true}};
  grpo::GrpoTrainer tr(m, tk, *task, g);
  EXPECT_EQ(tr.step().samples, 8);  // every prompt of the step rendered
  EXPECT_TRUE(refused([&] { grpo::evaluate(m, tk, *task, 2, 2); }));
  EXPECT_EQ(grpo::evaluate(m, tk, *task, 2, 2, 0.0, 0, {}, g.chat_template_kwargs).n, 2);
  // Key by key: the example's false beats the run's true; the run's key holds where the
  // example's kwargs lack it.
  tasks::Example e = task->eval_set().at(0);
  e.chat_template_kwargs = {{"must_be_set", false}};
  EXPECT_TRUE(refused([&] { grpo::prompt_ids(tk, e, 100, g.chat_template_kwargs); }));
  e.chat_template_kwargs = {{"other", 1}};
  EXPECT_EQ(grpo::prompt_ids(tk, e, 100, g.chat_template_kwargs),
            tk.encode(e.messages[0]["content"].get<std::string>() + "=", /*add_special_tokens=*/false));
}

// grpo.max_prompt_length keeps a long prompt's last tokens (the question, the generation
// prompt), as TRL's left truncation did; shorter prompts are whole.
TEST(Prompts, LongPromptsKeepTheirLastTokens) {
  StepEnv env;
  tasks::Example e;
  e.prompt = "Instructions first, then the question: 12+30=";
  const auto whole = env.tk.encode(e.prompt, /*add_special_tokens=*/true);
  ASSERT_GT(whole.size(), 10u);
  EXPECT_EQ(grpo::prompt_ids(env.tk, e, 10), std::vector<int32_t>(whole.end() - 10, whole.end()));
  EXPECT_EQ(grpo::prompt_ids(env.tk, e, static_cast<int>(whole.size())), whole);
}

// The entropy bonus through the trainer (entropies with their gradient from the LM head):
// the step trains the adapter, differently from the same step without it.
TEST(GrpoTrainer, EntropyBonusChangesTheStep) {
  StepEnv env;
  auto train = [&](double coef) {
    auto m = model::random_model(byte_config(), 11, 0.2);
    attach_small_lora(m);
    auto g = small_grpo(0.0);
    g.entropy_coef = coef;
    g.top_entropy_quantile = 0.5;
    grpo::GrpoTrainer tr(m, env.tk, *env.task, g);
    EXPECT_TRUE(std::isfinite(tr.step().loss));
    return lora_b(m);
  };
  const at::Tensor without = train(0.0), with = train(0.5);
  EXPECT_GT(with.abs().sum().item<double>(), 0.0);
  EXPECT_GT((with - without).abs().max().item<double>(), 1e-6);
}

// Adaptive entropy control through the trainer: the first step applies no bonus (trains as
// entropy_coef 0 would), the coefficient then rises by delta per step while the entropy is under
// the target, the second step applies it; the controller's state resumes from save_state and from
// the portable state (a restarted worker), and a static run keeps its configured coefficient.
TEST(GrpoTrainer, AdaptiveEntropyControlStepsTheCoefficientAndResumes) {
  StepEnv env;
  auto adaptive = [] {
    auto g = small_grpo(0.0);
    g.use_adaptive_entropy = true;
    g.entropy_coef = 0.5;
    g.entropy_coef_delta = 0.25;
    g.entropy_target = 100;  // above any entropy over 257 tokens (ln 257 = 5.5): always applied
    return g;
  };
  auto run = [&](const grpo::GrpoConfig& g, int steps, std::vector<grpo::StepStats>* stats = nullptr) {
    auto m = model::random_model(byte_config(), 11, 0.2);
    attach_small_lora(m);
    grpo::GrpoTrainer tr(m, env.tk, *env.task, g);
    for (int i = 0; i < steps; ++i) {
      auto s = tr.step();
      if (stats) stats->push_back(s);
    }
    return lora_b(m);
  };
  std::vector<grpo::StepStats> st;
  const at::Tensor one = run(adaptive(), 1, &st), none = run(small_grpo(0.0), 1);
  EXPECT_TRUE(torch::allclose(one, none, 1e-5, 1e-7)) << "the first step has no measurement: no bonus";
  ASSERT_TRUE(st[0].entropy && st[0].entropy_coef);
  EXPECT_GT(*st[0].entropy, 0.5);
  EXPECT_LT(*st[0].entropy, std::log(257.0));
  EXPECT_DOUBLE_EQ(*st[0].entropy_coef, 0.75);
  st.clear();
  const at::Tensor two = run(adaptive(), 2, &st), two_none = run(small_grpo(0.0), 2);
  EXPECT_DOUBLE_EQ(*st[1].entropy_coef, 1.0);  // 0.75 + 0.25, at entropy_coef_max (1)
  EXPECT_GT((two - two_none).abs().max().item<double>(), 1e-5) << "the second step applies the bonus";

  // Resume: a trainer loading the state of one that took two steps goes on from 1.0 (capped), not
  // from 0.5 + 0.25; lowering the target below any entropy turns it down from there.
  auto m = model::random_model(byte_config(), 11, 0.2);
  attach_small_lora(m);
  grpo::GrpoTrainer tr(m, env.tk, *env.task, adaptive());
  tr.step();
  tr.step();
  test::TempDir tmp;
  tr.save_state(tmp.str("state.pt"));
  const std::string portable = tr.portable_state();
  auto low = adaptive();
  low.entropy_target = 0;  // now above it: the coefficient steps down, the bonus is not applied
  for (int how = 0; how < 2; ++how) {
    auto m2 = model::random_model(byte_config(), 11, 0.2);
    attach_small_lora(m2);
    grpo::GrpoTrainer tr2(m2, env.tk, *env.task, low);
    if (how == 0) tr2.load_state(tmp.str("state.pt"));
    else tr2.load_portable_state(portable, "state");
    EXPECT_DOUBLE_EQ(*tr2.step().entropy_coef, 0.75) << (how ? "portable state" : "save_state");
  }
  // Static control ignores a saved controller: its coefficient is the configured one.
  auto stat = small_grpo(0.0);
  stat.entropy_coef = 0.1;
  auto m3 = model::random_model(byte_config(), 11, 0.2);
  attach_small_lora(m3);
  grpo::GrpoTrainer tr3(m3, env.tk, *env.task, stat);
  tr3.load_portable_state(portable, "state");
  EXPECT_DOUBLE_EQ(*tr3.step().entropy_coef, 0.1);
  // A state whose controller entry is not a number is refused by name.
  auto f = st::SafetensorsFile::from_buffer(portable.data(), portable.size(), "state");
  auto md = f.metadata();
  md["entropy_coef"] = "nan";
  std::vector<torch::Tensor> keep;
  std::vector<st::TensorData> td;
  for (auto& name : f.names()) {
    keep.push_back(model::copy_tensor(f.get(name), torch::kBFloat16));
    td.push_back(model::tensor_data(name, keep.back()));
  }
  try {
    tr3.load_portable_state(st::serialize_safetensors(td, md), "bad-state");
    ADD_FAILURE() << "a NaN coefficient was loaded";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("bad-state: its entropy_coef"), std::string::npos) << e.what();
  }
}

// GDPO (multi_objective_aggregation = normalize_then_sum) through the trainer, with a reward
// that never varies beside one that does: each function is normalised in its group, so the
// constant one adds nothing, and the step trains as on the varying reward alone.
// TRL's steps_per_generation: one generation batch of generation_batch_size completions feeds
// several optimizer steps. Derivation: at learning rate 0 the policy stays put, so two steps of one
// micro-batch each over a generation batch of two micro-batches (steps_per_generation 2) take the
// mean of the losses one step over both (gradient_accumulation_steps 2) takes (dapo: TRL's
// num_items_in_batch x grad_acc / steps_per_generation; bnpo: the micro-batch mean over grad_acc).
// With a moving policy the second step's rollouts are off-policy: the clip acts there, not on the
// first.
TEST(GrpoTrainer, StepsPerGenerationTrainsOptimizerStepsOnOneGenerationBatch) {
  StepEnv env;
  auto config = [](int ga, std::optional<int> spg, grpo::LossType type, double lr) {
    auto g = small_grpo(0.0);
    g.gradient_accumulation_steps = ga;
    g.steps_per_generation = spg;
    g.loss_type = type;
    g.learning_rate = lr;
    return g;
  };
  auto trainer = [&](model::Model& m, const grpo::GrpoConfig& g) {
    attach_small_lora(m);
    return std::make_unique<grpo::GrpoTrainer>(m, env.tk, *env.task, g);
  };
  for (auto type : {grpo::LossType::dapo, grpo::LossType::bnpo}) {
    SCOPED_TRACE(grpo::kLossTypes(type));
    auto ma = model::random_model(byte_config(), 11, 0.2), mb = model::random_model(byte_config(), 11, 0.2);
    auto one = trainer(ma, config(2, std::nullopt, type, 0.0));  // 2 micro-batches per step and generation
    auto split = trainer(mb, config(1, 2, type, 0.0));           // 1 per step, 2 per generation
    const auto whole = one->step();
    EXPECT_EQ(whole.samples, 8);
    EXPECT_TRUE(split->at_generation_boundary());
    const auto s1 = split->step();
    EXPECT_FALSE(split->at_generation_boundary());
    EXPECT_EQ(split->example_cursor(), 2u);  // both prompts of the generation batch at once
    const auto s2 = split->step();
    EXPECT_TRUE(split->at_generation_boundary());
    EXPECT_EQ(s1.samples, 8);
    EXPECT_EQ(s2.samples, 0) << "the second step trains on the first's rollouts";
    EXPECT_EQ(s2.gen_seconds, 0.0);
    EXPECT_EQ(split->example_cursor(), 2u);
    EXPECT_EQ(s2.reward_mean, s1.reward_mean) << "a step that made none reports the batch it trained on";
    EXPECT_EQ(s1.reward_mean, whole.reward_mean) << "the same rollouts (seeded by step and micro-batch)";
    ASSERT_NE(whole.loss, 0.0);
    EXPECT_NEAR((s1.loss + s2.loss) / 2, whole.loss, 1e-5 * std::abs(whole.loss));
    EXPECT_GT(std::abs(s1.loss - s2.loss), 1e-4 * std::abs(whole.loss)) << "two different halves";
    EXPECT_EQ(split->step().samples, 8) << "the third step generates again";
    EXPECT_EQ(split->example_cursor(), 4u);
  }
  // Off-policy steps: a tight clip acts only once the policy moved since the rollouts.
  auto m = model::random_model(byte_config(), 11, 0.2);
  auto g = config(1, std::nullopt, grpo::LossType::dapo, 0.1);
  g.generation_batch_size = 8;  // = steps_per_generation 2
  g.epsilon = 1e-3;
  auto tr = trainer(m, g);
  const auto on = tr->step(), off = tr->step();
  EXPECT_EQ(on.clip_ratio, 0.0) << "on-policy: ratio 1 up to rounding";
  EXPECT_GT(off.clip_ratio, 0.0);
  EXPECT_LT(off.lr, on.lr) << "the schedule moves per optimizer step";
  // A restart keeps no rollouts: it generates at once, from the next prompts.
  test::TempDir tmp;
  tr->step();  // a new generation batch; its second half is left
  ASSERT_FALSE(tr->at_generation_boundary());
  tr->save_state(tmp.str("state.pt"));
  auto m2 = model::random_model(byte_config(), 11, 0.2);
  auto tr2 = trainer(m2, g);
  tr2->load_state(tmp.str("state.pt"));
  EXPECT_TRUE(tr2->at_generation_boundary());
  EXPECT_EQ(tr2->step().samples, 8);
  EXPECT_EQ(tr2->example_cursor(), 6u);
  // So does a trainer that loads a state over rollouts of its own.
  tr->load_portable_state(tr->portable_state(), "state");
  EXPECT_TRUE(tr->at_generation_boundary());
  EXPECT_EQ(tr->step().samples, 8);
}

// TRL's disable_dropout: with it an adapter that has lora_dropout trains as one without; without
// it the dropout masks change the step.
TEST(GrpoTrainer, DisableDropoutTrainsAsWithoutDropout) {
  StepEnv env;
  auto run = [&](double dropout, bool disable) {
    auto m = model::random_model(byte_config(), 11, 0.2);
    LoraConfig lc;
    lc.r = 2;
    lc.target_modules = {"all-linear"};
    lc.lora_dropout = dropout;
    lora::attach(m, lc);
    auto g = small_grpo(0.0);
    g.disable_dropout = disable;
    grpo::GrpoTrainer tr(m, env.tk, *env.task, g);
    tr.step();
    tr.step();  // the second step's forward passes go through a nonzero B, where dropout shows
    return lora_b(m);
  };
  const at::Tensor plain = run(0.0, false);
  EXPECT_TRUE(torch::equal(run(0.5, true), plain));
  EXPECT_FALSE(torch::allclose(run(0.5, false), plain, 1e-4, 1e-6));
}

// num_iterations (TRL's mu) counts optimizer steps: each pass over a generation batch is a step.
TEST(GrpoTrainer, NumIterationsReusesTheGenerationBatchOverSteps) {
  StepEnv env;
  auto m = model::random_model(byte_config(), 11, 0.2);
  attach_small_lora(m);
  auto g = small_grpo(0.1);
  g.num_iterations = 2;
  grpo::GrpoTrainer tr(m, env.tk, *env.task, g);
  std::vector<int64_t> samples;
  for (int i = 0; i < 4; ++i) samples.push_back(tr.step().samples);
  EXPECT_EQ(samples, (std::vector<int64_t>{8, 0, 8, 0}));
  EXPECT_EQ(tr.global_step(), 4);
  EXPECT_EQ(tr.reference_passes(), 2) << "one reference pass per generation batch";
}

TEST(GrpoTrainer, NormalizeThenSumTrainsOnTheVaryingReward) {
  StepEnv env;
  auto train = [&](std::vector<std::shared_ptr<tasks::RewardFn>> rewards) {
    env.task->rewards = std::move(rewards);
    auto m = model::random_model(byte_config(), 11, 0.2);
    attach_small_lora(m);
    auto g = small_grpo(0.0);
    g.multi_objective_aggregation = grpo::MultiObjectiveAggregation::normalize_then_sum;
    grpo::GrpoTrainer tr(m, env.tk, *env.task, g);
    EXPECT_GT(tr.step().reward_std, 0.0);
    return lora_b(m);
  };
  const at::Tensor both = train({std::make_shared<ConstantReward>(), std::make_shared<LengthReward>()});
  const at::Tensor alone = train({std::make_shared<LengthReward>()});
  EXPECT_GT(both.abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(torch::allclose(both, alone, 1e-5, 1e-7)) << (both - alone).abs().max();
}

// A trainer on a random byte-level model with the small adapter, at a constant learning rate:
// the optimizer-state tests.
struct OptimizerEnv {
  StepEnv env;
  model::Model m = model::random_model(byte_config(), 11, 0.2);
  grpo::GrpoConfig g;
  grpo::GrpoTrainer tr;
  explicit OptimizerEnv(double weight_decay)
      : g(constant_lr(small_grpo(0.0), weight_decay)),
        tr((attach_small_lora(m), m), env.tk, *env.task, g) {}  // the adapter before the trainer sees m
  static grpo::GrpoConfig constant_lr(grpo::GrpoConfig c, double weight_decay) {
    c.lr_scheduler_type = grpo::LrSchedulerType::constant;
    c.weight_decay = weight_decay;
    return c;
  }
};

// reset_optimizer() makes AdamW fresh: its first bias-corrected step moves every parameter
// that has a gradient by lr * g / (|g| + eps), i.e. by lr (weight decay 0). A step with kept
// moments does not: their ratio m / sqrt(v) varies from parameter to parameter.
TEST(GrpoTrainer, ResetOptimizerMakesTheNextStepAFreshAdamStep) {
  OptimizerEnv e(0.0);
  auto& [env, m, g, tr] = e;
  // Median |change| of the lora_B entries that moved in one step.
  auto step_size = [&] {
    auto before = lora_b(m);
    tr.step();
    auto d = (lora_b(m) - before).abs();
    d = d.index({d > 0});
    EXPECT_GT(d.numel(), 100);
    return d.median().item<double>();
  };
  const double first = step_size();
  EXPECT_NEAR(first, g.learning_rate, 1e-3 * g.learning_rate);  // fresh: a sign step
  const double kept = step_size();
  EXPECT_GT(std::abs(kept - g.learning_rate), 0.05 * g.learning_rate);
  tr.reset_optimizer();
  EXPECT_NEAR(step_size(), g.learning_rate, 1e-3 * g.learning_rate);
}

// reset_momentum() zeroes AdamW's first moment and keeps its second moment and step count; the
// first moment's bias correction restarts, as Adam's does for a moment that starts at zero. So
// the k-th step after it is AdamW's rule (Loshchilov & Hutter; torch.optim.AdamW's
// documentation) with the first moment counted from the reset, derived here in double:
// m_k = b1 m_{k-1} + (1 - b1) g (m_0 = 0), v' = b2 v + (1 - b2) g^2, t' = t + 1,
// p' = p (1 - lr wd) - lr (m_k / (1 - b1^k)) / (sqrt(v' / (1 - b2^t')) + eps).
// Before the restart (stock AdamW, correction 1 - b1^t' ~ 1) the first step after a sync was a
// tenth of this one.
TEST(GrpoTrainer, ResetMomentumRestartsTheFirstMomentsBiasCorrection) {
  OptimizerEnv e(0.01);
  auto& [env, m, g, tr] = e;
  for (int i = 0; i < 3; ++i) tr.step();
  auto& opt = tr.optimizer();
  auto state = [&](const torch::Tensor& p) -> torch::optim::AdamWParamState& {
    return static_cast<torch::optim::AdamWParamState&>(*opt.state().at(p.unsafeGetTensorImpl()));
  };
  const auto params = opt.param_groups().at(0).params();
  std::vector<torch::Tensor> v, mom;
  std::vector<int64_t> t;
  for (auto& p : params) {
    v.push_back(state(p).exp_avg_sq().to(torch::kDouble));
    t.push_back(state(p).step());
    EXPECT_GT(state(p).exp_avg().abs().max().item<double>(), 0.0);
  }
  tr.reset_momentum();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(state(params[i]).exp_avg().abs().max().item<double>(), 0.0);
    EXPECT_TRUE(torch::equal(state(params[i]).exp_avg_sq().to(torch::kDouble), v[i]));
    EXPECT_EQ(state(params[i]).step(), 3);
    mom.push_back(torch::zeros_like(v[i]));
  }
  const double lr = g.learning_rate, b1 = g.adam_beta1, b2 = g.adam_beta2, eps = g.adam_epsilon;
  for (int k = 1; k <= 2; ++k) {
    std::vector<torch::Tensor> before;
    for (auto& p : params) before.push_back(p.detach().to(torch::kDouble));
    tr.step();
    double worst = 0;
    std::vector<torch::Tensor> moves;
    for (size_t i = 0; i < params.size(); ++i) {
      auto gr = params[i].grad().to(torch::kDouble);
      const double tn = static_cast<double>(t[i] + k);
      mom[i] = b1 * mom[i] + (1 - b1) * gr;
      v[i] = b2 * v[i] + (1 - b2) * gr * gr;
      auto want = before[i] * (1 - lr * g.weight_decay) -
                  lr * (mom[i] / (1 - std::pow(b1, k))) / ((v[i] / (1 - std::pow(b2, tn))).sqrt() + eps);
      worst = std::max(worst, (params[i].detach().to(torch::kDouble) - want).abs().max().item<double>());
      moves.push_back((want - before[i]).abs().flatten());
    }
    EXPECT_LT(worst, 1e-7) << "step " << k << " after the reset";  // f32 arithmetic vs the double derivation
    auto d = torch::cat(moves);
    d = d.index({d > 0});
    const double median = d.median().item<double>();
    std::printf("    step %d after the reset: median |move| %.3f x lr\n", k, median / lr);
    EXPECT_GT(median, 0.2 * lr);  // a full-size step, not (1 - b1) = a tenth of one
  }
}

// The state a worker keeps across machines: AdamW's second moment rounded to bf16, its step
// count and the trainer's counters come back; the first moment comes back zero, corrected as
// after reset_momentum (the test above derives that step). What does not fit is refused by
// name and changes nothing.
TEST(GrpoTrainer, PortableStateKeepsTheSecondMomentAndCounters) {
  OptimizerEnv a(0.01);
  for (int i = 0; i < 3; ++i) a.tr.step();
  const std::string bytes = a.tr.portable_state();
  EXPECT_EQ(grpo::GrpoTrainer::portable_state_step(bytes), 3);
  EXPECT_EQ(grpo::GrpoTrainer::portable_state_step("garbage"), std::nullopt);
  auto state = [](grpo::GrpoTrainer& tr, const torch::Tensor& p) -> torch::optim::AdamWParamState& {
    return static_cast<torch::optim::AdamWParamState&>(*tr.optimizer().state().at(p.unsafeGetTensorImpl()));
  };
  OptimizerEnv b(0.01);
  b.tr.load_portable_state(bytes, "state");
  EXPECT_EQ(b.tr.global_step(), 3);
  EXPECT_EQ(b.tr.example_cursor(), a.tr.example_cursor());
  const auto pa = a.tr.optimizer().param_groups().at(0).params(), pb = b.tr.optimizer().param_groups().at(0).params();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    auto va = state(a.tr, pa[i]).exp_avg_sq();
    ASSERT_GT(va.max().item<double>(), 0.0);
    EXPECT_TRUE(torch::equal(state(b.tr, pb[i]).exp_avg_sq(), va.to(torch::kBFloat16).to(torch::kFloat)));
    EXPECT_EQ(state(b.tr, pb[i]).exp_avg().abs().max().item<double>(), 0.0);
    EXPECT_EQ(state(b.tr, pb[i]).step(), 3);
  }
  b.tr.step();  // and trains on from it
  EXPECT_EQ(state(b.tr, pb[0]).step(), 4);

  // A trainer that has not stepped: a fresh optimizer, counters at zero.
  OptimizerEnv fresh(0.01), c(0.01);
  c.tr.load_portable_state(fresh.tr.portable_state(), "fresh");
  EXPECT_EQ(c.tr.global_step(), 0);
  EXPECT_TRUE(c.tr.optimizer().state().empty());

  auto refused = [&](const std::string& what, const std::string& body, const std::string& says) {
    OptimizerEnv d(0.01);
    d.tr.step();
    try {
      d.tr.load_portable_state(body, what);
      ADD_FAILURE() << what << " was loaded";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_EQ(d.tr.global_step(), 1);  // unchanged
  };
  refused("not-safetensors", "garbage", "not-safetensors");
  refused("an adapter", st::serialize_safetensors({}, {{"format", "pt"}}), "not a bucketrl trainer state");
  {
    auto m = model::random_model(byte_config(), 11, 0.2);
    LoraConfig lc;
    lc.r = 3;  // another rank: every shape differs
    lc.target_modules = {"all-linear"};
    lora::attach(m, lc);
    grpo::GrpoTrainer other(m, a.env.tk, *a.env.task, a.g);
    other.step();
    refused("rank 3", other.portable_state(), "has shape");
  }
  {
    auto m = model::random_model(byte_config(), 11, 0.2);
    LoraConfig lc;
    lc.r = 2;
    lc.target_modules = {"q_proj"};  // fewer modules
    lora::attach(m, lc);
    grpo::GrpoTrainer other(m, a.env.tk, *a.env.task, a.g);
    other.step();
    refused("q_proj only", other.portable_state(), "parameters");
  }
  // A negative second moment (its square root would be NaN), made from the real state.
  auto f = st::SafetensorsFile::from_buffer(bytes.data(), bytes.size(), "state");
  std::vector<torch::Tensor> keep;
  std::vector<st::TensorData> td;
  for (auto& name : f.names()) {
    keep.push_back(model::copy_tensor(f.get(name), torch::kBFloat16));
    if (td.empty()) keep.back().view(-1)[0] = -1.0;
    td.push_back(model::tensor_data(name, keep.back()));
  }
  refused("negative", st::serialize_safetensors(td, f.metadata()), "negative or non-finite");
  auto md = f.metadata();
  md.erase("cursor");
  refused("no cursor", st::serialize_safetensors({}, md), "lacks a step, cursor or adam_step");
}

// [grpo] gradient_checkpointing reaches the model in the optimizer's passes and changes no
// step: two trainers from the same model and seed, one checkpointing, end at the same adapter
// (tests/lora/gradient_checkpointing_test.cpp compares the gradients themselves).
TEST(GrpoTrainer, GradientCheckpointingTakesTheSameSteps) {
  OptimizerEnv plain(0.01);
  auto g = plain.g;
  g.gradient_checkpointing = true;
  auto m = model::random_model(byte_config(), 11, 0.2);
  attach_small_lora(m);
  grpo::GrpoTrainer ckpt(m, plain.env.tk, *plain.env.task, g);
  for (int i = 0; i < 2; ++i) {
    auto a = plain.tr.step(), b = ckpt.step();
    EXPECT_NEAR(a.loss, b.loss, 1e-6 * std::max(1.0, std::abs(a.loss)));
  }
  EXPECT_TRUE(m.gradient_checkpointing);
  EXPECT_FALSE(plain.m.gradient_checkpointing);
  const double diff = (lora_b(m) - lora_b(plain.m)).abs().max().item<double>();
  EXPECT_GT(lora_b(m).abs().max().item<double>(), 0.0);
  EXPECT_LT(diff, 1e-6);
}

// group_by_length regroups rows only among those that share an optimizer step, so the steps are
// those without it (dapo: one normalizer per step). Here 4 slices of 2 rows per generation
// batch and 2 micro-batches per step: blocks of 4 rows; sorting the whole generation batch
// would move rows between the two steps it feeds, and the second step would differ.
TEST(GrpoTrainer, GroupByLengthTakesTheSameSteps) {
  StepEnv env;
  auto run = [&](bool group, grpo::LossType loss = grpo::LossType::dapo) {
    auto m = model::random_model(byte_config(), 11, 0.2);
    attach_small_lora(m);
    auto g = small_grpo(0.0);
    g.per_device_train_batch_size = 2;
    g.steps_per_generation = 4;
    g.max_completion_length = 12;
    g.loss_type = loss;
    g.group_by_length = group;
    grpo::GrpoTrainer tr(m, env.tk, *env.task, g);
    std::vector<double> losses;
    for (int i = 0; i < 4; ++i) losses.push_back(tr.step().loss);
    return std::pair{losses, lora_b(m)};
  };
  const auto [plain_loss, plain] = run(false);
  const auto [grouped_loss, grouped] = run(true);
  for (size_t i = 0; i < plain_loss.size(); ++i)
    EXPECT_NEAR(grouped_loss[i], plain_loss[i], 1e-6 * std::max(1.0, std::abs(plain_loss[i]))) << "step " << i + 1;
  EXPECT_GT(plain.abs().max().item<double>(), 0.0);
  EXPECT_LT((grouped - plain).abs().max().item<double>(), 1e-6);
  // bnpo normalizes per micro-batch: there the regrouping shows (so it happened).
  const at::Tensor bnpo = run(false, grpo::LossType::bnpo).second;
  EXPECT_GT((run(true, grpo::LossType::bnpo).second - bnpo).abs().max().item<double>(), 1e-5);
}

TEST(GrpoTrainer, LengthGroupedOrderSortsEachBlockStably) {
  grpo::PolicyBatch b;
  b.completion_tokens = {3, 1, 2, 1, 5, 4, 2};
  b.prompt_tokens = {7, 7, 7, 7, 7, 9, 8};
  EXPECT_EQ(grpo::length_grouped_order(b, {0, 1, 2, 3, 4, 5, 6}, 4), (std::vector<int64_t>{1, 3, 2, 0, 6, 5, 4}));
  // A shuffled order: blocks are of its entries, ties keep its order (rows 3 and 1 here).
  EXPECT_EQ(grpo::length_grouped_order(b, {6, 3, 0, 1, 5, 4, 2}, 4), (std::vector<int64_t>{3, 1, 6, 0, 2, 5, 4}));
  b.completion_tokens = {2, 2, 1};
  b.prompt_tokens = {5, 3, 9};  // equal completions: the shorter prompt first
  EXPECT_EQ(grpo::length_grouped_order(b, {0, 1, 2}, 8), (std::vector<int64_t>{2, 1, 0}));
  EXPECT_EQ(grpo::length_grouped_order(b, {0, 1, 2}, 1), (std::vector<int64_t>{0, 1, 2}));
}

// A micro-batch's window comes from the rows' lengths: the batch must have one per row, and the
// rows asked for must exist.
TEST(GrpoTrainer, CompletionLogprobsRefusesLengthsThatDoNotFitTheBatch) {
  auto m = model::random_model(byte_config(), 11, 0.2);
  std::vector<gen::Completion> comps(2);
  comps[0].tokens = {5, 6, 7}, comps[0].logprobs = {-1, -1, -1};
  comps[1].tokens = {8}, comps[1].logprobs = {-1}, comps[1].prompt_index = 1;
  grpo::PolicyBatch b = grpo::policy_batch({{1, 2}, {3}}, comps, false);
  at::NoGradGuard ng;
  EXPECT_EQ(grpo::completion_logprobs(m, b, 1, 2, 1.0).sizes(), (std::vector<int64_t>{1, 3}));
  EXPECT_THROW(grpo::completion_logprobs(m, b, 1, 3, 1.0), c10::Error);
  b.completion_tokens.pop_back();
  EXPECT_THROW(grpo::completion_logprobs(m, b, 0, 2, 1.0), c10::Error);
}

TEST(GrpoTrainer, FreshMomentumScaleByHand) {
  // (1 - 0.9^t) / (1 - 0.9^k): t = 10, k = 1 -> 0.6513215599 / 0.1; k >= t or k <= 0 -> 1.
  EXPECT_NEAR(grpo::fresh_momentum_lr_scale(0.9, 10, 1), 6.513215599, 1e-9);
  EXPECT_NEAR(grpo::fresh_momentum_lr_scale(0.9, 10, 2), 0.6513215599 / 0.19, 1e-9);
  EXPECT_EQ(grpo::fresh_momentum_lr_scale(0.9, 10, 10), 1.0);
  EXPECT_EQ(grpo::fresh_momentum_lr_scale(0.9, 10, 0), 1.0);
}

// The optimizer step in few kernels (grpo/optim.h) against libtorch's per-tensor AdamW and
// clip_grad_norm_.
TEST(Optim, FusedAdamWMatchesLibtorchAdamW) {
  test::expect_fused_adamw_matches_libtorch(at::kCPU, at::kFloat, 2e-6);
  test::expect_fused_adamw_matches_libtorch(at::kCPU, at::kDouble, 1e-12);
}

TEST(Optim, ClipGradNormMatchesLibtorch) { test::expect_clip_grad_norm_matches_libtorch(at::kCPU); }

// The sampler's mismatch correction (vllm_importance_sampling_correction) through the model. Rows
// whose sampler log-probs are made 2 nats per token higher than the policy's get the weight
// e^(-2 x length) < clip_min 0.5, so sequence_mask drops them: the step's gradient is the one
// without the correction on the same batch with those rows' advantages 0 (the others' weights are
// 1 up to rounding: the sampler is this model, in this precision). Without the correction they
// would train (clipped), so the gradient differs.
TEST(GrpoTrainer, SamplerCorrectionDropsRowsTheSamplerDisagreesOn) {
  auto m = model::random_model(byte_config(), 11, 0.2);
  attach_small_lora(m);
  gen::GenerateOptions go;
  go.num_generations = 4;
  go.max_new_tokens = 6;
  go.seed = 5;
  auto comps = gen::generate(m, {{1, 2, 3}, {4, 5}}, go);
  ASSERT_EQ(comps.size(), 8u);
  const std::vector<int64_t> shifted = {1, 4, 6};
  for (int64_t i : shifted)
    for (float& lp : comps[static_cast<size_t>(i)].logprobs) lp += 2.0f;
  const at::Tensor adv = torch::tensor({0.5, -1.0, 1.5, -0.7, 1.0, 0.3, -1.2, 0.8}, torch::kFloat);
  auto gradient = [&](bool correction, bool zero_shifted, grpo::SamplingCorrectionMode mode) {
    auto g = small_grpo(0.0);
    g.per_device_train_batch_size = 4;  // two micro-batches
    g.max_grad_norm = 0;
    g.vllm_importance_sampling_correction = correction;
    g.vllm_importance_sampling_mode = mode;
    g.vllm_importance_sampling_clip_min = 0.5;
    grpo::PolicyBatch b = grpo::policy_batch({{1, 2, 3}, {4, 5}}, comps, false);
    b.advantages = adv.clone();
    if (zero_shifted)
      for (int64_t i : shifted) b.advantages[i].fill_(0.0);
    grpo::PolicyOptimizer po(m, g);
    const grpo::PolicyStats st = po.optimize(b, /*lr=*/0.0);  // gradients, no update
    EXPECT_EQ(st.sampling.has_value(), correction);
    if (correction) EXPECT_EQ(st.sampling->is_ratio_min, 0.0) << "some rows dropped";
    std::vector<at::Tensor> gs;
    for (auto& p : lora::parameters(m)) gs.push_back(p.grad().flatten().clone());
    return at::cat(gs);
  };
  const auto seq = grpo::SamplingCorrectionMode::sequence_mask;
  const at::Tensor expected = gradient(false, true, seq);
  const at::Tensor corrected = gradient(true, false, seq);
  const double scale = expected.abs().max().item<double>();
  ASSERT_GT(scale, 0.0);
  EXPECT_LT((corrected - expected).abs().max().item<double>(), 1e-5 * scale);
  EXPECT_GT((gradient(false, false, seq) - expected).abs().max().item<double>(), 1e-2 * scale)
      << "the shifted rows train without the correction";
  // token_mask drops each of their tokens (e^-2 < 0.5): the same gradient.
  EXPECT_LT((gradient(true, false, grpo::SamplingCorrectionMode::token_mask) - expected).abs().max().item<double>(),
            1e-5 * scale);
}

// With the correction the old policy's log-probs come from the trainer: when each generation
// batch trains one optimizer step, its own first pass (no extra pass); when one feeds two steps, a
// no-grad pass per generation batch before the first. Either way they equal the sampler's up to
// rounding here (the same model and precision): weights 1 and tiny logged differences, also in the
// second, off-policy step, whose old log-probs are from before the first update (after it they
// would be the moved policy's: a tight clip acts there, so the policy did move).
TEST(GrpoTrainer, SamplerCorrectionTakesOldLogprobsFromTheTrainer) {
  StepEnv env;
  auto run = [&](std::optional<int> generation_batch_size) {
    auto m = model::random_model(byte_config(), 11, 0.2);
    attach_small_lora(m);
    auto g = small_grpo(0.0);
    g.vllm_importance_sampling_correction = true;
    g.gradient_accumulation_steps = generation_batch_size ? 1 : 2;
    g.generation_batch_size = generation_batch_size;
    g.learning_rate = 0.1;
    g.epsilon = 1e-3;
    grpo::GrpoTrainer tr(m, env.tk, *env.task, g);
    std::vector<grpo::StepStats> steps{tr.step(), tr.step()};
    for (auto& s : steps) {
      EXPECT_TRUE(s.sampling.has_value());
      if (!s.sampling) continue;
      EXPECT_NEAR(s.sampling->is_ratio_min, 1.0, 1e-4);
      EXPECT_NEAR(s.sampling->is_ratio_max, 1.0, 1e-4);
      EXPECT_NEAR(s.sampling->is_ratio_mean, 1.0, 1e-4);
      EXPECT_LT(s.sampling->logp_diff_max, 1e-4);
      EXPECT_LE(s.sampling->logp_diff_mean, s.sampling->logp_diff_max);
    }
    return std::pair{steps, tr.old_policy_passes()};
  };
  const auto [aligned, aligned_passes] = run(std::nullopt);
  EXPECT_EQ(aligned_passes, 0) << "on-policy: the first pass's log-probs, detached";
  EXPECT_EQ(aligned[0].clip_ratio, 0.0);
  EXPECT_EQ(aligned[1].clip_ratio, 0.0) << "each step on-policy: the ratio is exactly 1";
  const auto [split, split_passes] = run(8);  // steps_per_generation 2
  EXPECT_EQ(split_passes, 1) << "one pass for the generation batch that feeds two steps";
  EXPECT_EQ(split[0].clip_ratio, 0.0);
  EXPECT_GT(split[1].clip_ratio, 0.0) << "the second step is off-policy";
}

// The step's sampling statistics are over its tokens, as TRL's are over the generation batch's,
// not a mean of micro-batch means: rows whose sampler log-probs sit delta_i below the trainer's
// have weight exp(delta_i) on each of their len_i tokens, so with micro-batches of 5 and 4 tokens
// the mean weight is sum(len_i exp(delta_i)) / sum(len_i) (a mean of the two means is 1% off).
TEST(GrpoTrainer, SamplerCorrectionStatisticsAreOverTheStepsTokens) {
  auto m = model::random_model(byte_config(), 11, 0.2);
  attach_small_lora(m);
  const std::vector<int64_t> lens = {1, 4, 2, 2};
  const std::vector<double> delta = {0.1, 0.2, 0.3, 0.4};
  std::vector<gen::Completion> comps(lens.size());
  for (size_t i = 0; i < lens.size(); ++i) {
    for (int64_t k = 0; k < lens[i]; ++k) comps[i].tokens.push_back(static_cast<int32_t>(65 + i + k));
    comps[i].logprobs.assign(comps[i].tokens.size(), 0.f);
    comps[i].finish = gen::FinishReason::kStop;
  }
  auto b = grpo::policy_batch({{1, 2, 3}}, comps, false);
  b.advantages = torch::tensor({1.0, -1.0, 0.5, -0.5});
  auto g = small_grpo(0.0);
  g.per_device_train_batch_size = 2;
  g.vllm_importance_sampling_correction = true;
  g.vllm_importance_sampling_mode = grpo::SamplingCorrectionMode::token_truncate;
  g.vllm_importance_sampling_clip_max = 10.0;
  grpo::PolicyOptimizer po(m, g);
  po.old_policy_pass(b, /*on_policy=*/false);  // old: the trainer's; the sampler's: zeros
  b.sampling_logps = b.old_logps - torch::tensor(delta, torch::kFloat).unsqueeze(1);
  const auto st = po.step({{&b, 0, 4, 9.0}}, 1e-3);
  ASSERT_TRUE(st.sampling.has_value());
  double w = 0, d = 0, n = 0;
  for (size_t i = 0; i < lens.size(); ++i)
    w += static_cast<double>(lens[i]) * std::exp(delta[i]), d += static_cast<double>(lens[i]) * delta[i],
        n += static_cast<double>(lens[i]);
  EXPECT_NEAR(st.sampling->is_ratio_mean, w / n, 1e-6);
  EXPECT_NEAR(st.sampling->logp_diff_mean, d / n, 1e-6);
  EXPECT_NEAR(st.sampling->is_ratio_min, std::exp(0.1), 1e-6);
  EXPECT_NEAR(st.sampling->is_ratio_max, std::exp(0.4), 1e-6);
}

// TRL's pad_to_multiple_of: the generation batch's prompt and completion widths, and each
// micro-batch's window, are multiples of it; the extra columns are padding, so the log-probs of
// the real tokens are those without it (to float rounding: other shapes, other summation orders),
// and the steps are the same.
TEST(GrpoTrainer, PadToMultipleOfPadsWindowsAndTakesTheSameSteps) {
  auto m = model::random_model(byte_config(), 11, 0.2);
  std::vector<gen::Completion> comps(3);
  comps[0].tokens = {5, 6, 7}, comps[0].logprobs = {-1, -1, -1};
  comps[1].tokens = {8}, comps[1].logprobs = {-1}, comps[1].prompt_index = 1;
  comps[2].tokens = {9, 10, 11, 12, 13}, comps[2].logprobs = {-1, -1, -1, -1, -1}, comps[2].prompt_index = 1;
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5, 6, 7, 8, 9}, {3}};
  const grpo::PolicyBatch plain = grpo::policy_batch(prompts, comps, false);
  const grpo::PolicyBatch padded = grpo::policy_batch(prompts, comps, false, 4);
  EXPECT_EQ(plain.prompt_len, 9);
  EXPECT_EQ(plain.completion_len, 5);
  EXPECT_EQ(padded.prompt_len, 12);
  EXPECT_EQ(padded.completion_len, 8);
  EXPECT_EQ(padded.completion_mask.sum().item<double>(), 9.0);
  using Window = std::pair<int64_t, int64_t>;
  EXPECT_EQ(grpo::micro_batch_window(plain, 1, 2), Window(1, 1));
  EXPECT_EQ(grpo::micro_batch_window(padded, 1, 2), Window(4, 4));
  EXPECT_EQ(grpo::micro_batch_window(plain, 1, 3), Window(1, 5));
  EXPECT_EQ(grpo::micro_batch_window(padded, 1, 3), Window(4, 8));
  EXPECT_EQ(grpo::micro_batch_window(padded, 0, 3), Window(12, 8));
  at::NoGradGuard ng;
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 3}, {1, 2}, {1, 3}};
  for (const auto& [begin, end] : ranges) {
    SCOPED_TRACE(begin);
    const at::Tensor a = grpo::completion_logprobs(m, plain, begin, end, 1.0);
    const at::Tensor b = grpo::completion_logprobs(m, padded, begin, end, 1.0);
    ASSERT_EQ(b.size(1), 8);
    EXPECT_TRUE(at::allclose(b.slice(1, 0, 5) * padded.completion_mask.slice(0, begin, end).slice(1, 0, 5),
                             a * plain.completion_mask.slice(0, begin, end), 1e-5, 1e-6));
  }
}

TEST(GrpoTrainer, PadToMultipleOfTakesTheSameSteps) {
  StepEnv env;
  auto run = [&](std::optional<int> pad) {
    auto m = model::random_model(byte_config(), 11, 0.2);
    attach_small_lora(m);
    auto g = small_grpo(0.0);
    g.max_completion_length = 12;
    g.pad_to_multiple_of = pad;
    grpo::GrpoTrainer tr(m, env.tk, *env.task, g);
    std::vector<double> losses;
    for (int i = 0; i < 3; ++i) losses.push_back(tr.step().loss);
    return std::pair{losses, lora_b(m)};
  };
  const auto [plain_loss, plain] = run(std::nullopt);
  const auto [padded_loss, padded] = run(16);
  for (size_t i = 0; i < plain_loss.size(); ++i)
    EXPECT_NEAR(padded_loss[i], plain_loss[i], 1e-5 * std::max(1.0, std::abs(plain_loss[i]))) << "step " << i + 1;
  EXPECT_GT(plain.abs().max().item<double>(), 0.0);
  EXPECT_LT((padded - plain).abs().max().item<double>(), 1e-5);
}

// A completion's tool_mask (tool results: 0) zeroes those tokens in the loss mask; they stay in
// the sequence (attended to, forwarded) with the sampler's log-probs as given.
TEST(GrpoTrainer, PolicyBatchMasksToolTokensOutOfTheLoss) {
  gen::Completion a, b;
  a.tokens = {5, 6, 7, 8, 9};
  a.logprobs = {-1, -2, 0, 0, -3};
  a.tool_mask = {1, 1, 0, 0, 1};
  a.finish = gen::FinishReason::kStop;
  b.prompt_index = 0;
  b.tokens = {5, 6};
  b.logprobs = {-1, -1};
  b.finish = gen::FinishReason::kStop;
  const auto pb = grpo::policy_batch({{1, 2}}, {a, b}, /*mask_truncated_completions=*/true);
  EXPECT_TRUE(torch::equal(pb.completion_mask, torch::tensor({{1.f, 1.f, 0.f, 0.f, 1.f}, {1.f, 1.f, 0.f, 0.f, 0.f}})));
  EXPECT_TRUE(torch::equal(pb.attn.slice(1, 2), torch::tensor({{1, 1, 1, 1, 1}, {1, 1, 0, 0, 0}}).to(torch::kBool)));
  EXPECT_TRUE(torch::equal(pb.old_logps[0], torch::tensor({-1.f, -2.f, 0.f, 0.f, -3.f})));
  a.finish = gen::FinishReason::kLength;  // truncated: the whole row out, tool mask or not
  EXPECT_EQ(grpo::policy_batch({{1, 2}}, {a}, true).completion_mask.sum().item<float>(), 0.f);
}

// What the built-in rewards score: a completion's text without tool calling; with it, the last
// assistant turn's content, never a tool's result or a call's arguments (a turn whose calls were
// dropped for want of budget, a continuation cut away entirely after the results).
TEST(GrpoTrainer, RewardTextsAreTheLastAssistantTurnsContent) {
  test::TempDir tmp;
  tok::Tokenizer tk = (grpo::write_byte_tokenizer(tmp.str("tok")), tok::Tokenizer::from_dir(tmp.str("tok")));
  gen::Completion c;
  c.tokens = tk.encode("7 <call 3>");
  using ojson = nlohmann::ordered_json;
  const ojson call = ojson::parse(R"({"role": "assistant", "content": "Let me see.", "tool_calls": [{"type":
      "function", "function": {"name": "f", "arguments": {"a": 3}}}]})");
  const ojson result = ojson::parse(R"({"role": "tool", "name": "f", "content": "99"})");
  const ojson answer = ojson::parse(R"({"role": "assistant", "content": "It is 8."})");
  const auto texts = grpo::reward_texts(tk, {c, c, c, c, c},
                                        {ojson(), ojson::array({call}), ojson::array({call, result}),
                                         ojson::array({call, result, answer}), ojson::array({answer})});
  EXPECT_EQ(texts, (std::vector<std::string>{"7 <call 3>", "Let me see.", "Let me see.", "It is 8.", "It is 8."}));
}

// TRL's tool calling through the trainer (task.tool_command): the model calls `add` after every
// generation prompt ("A:"), the command answers, the template writes the result and a new
// generation prompt, and the model calls again, max_tool_calling_iterations times. Each
// completion then holds 3 model turns of 2 tokens (call, end of turn) and 2 tool results of 6
// (T : 3 <eos> A :); the step counts only the model's tokens, logs the calls, and the reward
// command sees TRL's messages; the evaluation runs the calls as well. The whole loop's tokens are
// checked against TRL's own in trl_tool_oracle_test.
TEST(GrpoTrainer, ToolCallsRunThroughTheTrainer) {
  test::TempDir tmp;
  test::write_tool_tokenizer(tmp.str("tok"));
  const std::string& call = test::kToolCall;
  const auto tk = tok::Tokenizer::from_dir(tmp.str("tok"));
  ASSERT_EQ(tk.encode(call), std::vector<int32_t>{257});
  std::string jsonl;
  for (int i = 0; i < 20; ++i)
    jsonl += nlohmann::json{{"prompt", {{{"role", "user"}, {"content", std::to_string(i) + "+1"}}}},
                            {"answer", std::to_string(i + 1)},
                            {"tools", {{{"type", "function"}, {"function", {{"name", "add"}}}}}}}
                 .dump() +
             "\n";
  test::write_file(tmp.str("train.jsonl"), jsonl);
  tasks::TaskOptions to;
  to.name = "jsonl";
  to.dataset_path = tmp.str("train.jsonl");
  to.tool_command = "tee '" + tmp.str("calls.jsonl") + "' | while read l; do echo 3; done";
  auto task = tasks::make_task(to);
  task->rewards = {std::make_shared<tasks::CommandReward>("tee '" + tmp.str("rewarded.jsonl") +
                                                          "' | while read l; do echo 1; done")};
  auto cfg = byte_config();
  cfg.vocab_size = 258;
  auto m = model::random_model(cfg, 5, 0.2);
  test::make_tool_caller(m);
  attach_small_lora(m);
  auto g = small_grpo(0.0);
  g.max_completion_length = 32;
  g.max_tool_calling_iterations = 2;
  g.temperature = 1.0;
  grpo::GrpoTrainer tr(m, tk, *task, g);
  const auto st = tr.step();
  EXPECT_EQ(st.samples, 8);
  EXPECT_DOUBLE_EQ(st.completion_length, 6.0);  // the model's tokens only
  EXPECT_EQ(st.tokens, 8 * 6);
  ASSERT_TRUE(st.tools.has_value());
  EXPECT_DOUBLE_EQ(st.tools->call_frequency, 2.0);
  EXPECT_DOUBLE_EQ(st.tools->failure_frequency, 0.0);
  nlohmann::json line;
  grpo::add_optional_stats(line, st);
  EXPECT_EQ(line["tool_call_frequency"], 2.0);
  // The command got 8 calls in each of 2 rounds (the second run overwrote the first's file).
  const auto calls = test::read_file(tmp.str("calls.jsonl"));
  EXPECT_EQ(std::count(calls.begin(), calls.end(), '\n'), 8);
  EXPECT_NE(calls.find(R"("arguments":{"a":1})"), std::string::npos) << calls;
  std::istringstream rewarded(test::read_file(tmp.str("rewarded.jsonl")));
  std::string first;
  std::getline(rewarded, first);
  const auto turn = nlohmann::json::parse(R"({"role": "assistant", "content": "", "tool_calls": [{"type":
      "function", "function": {"name": "add", "arguments": {"a": 1}}}]})");
  const auto result = nlohmann::json::parse(R"({"role": "tool", "name": "add", "content": "3"})");
  EXPECT_EQ(nlohmann::json::parse(first)["completion"], nlohmann::json::array({turn, result, turn, result, turn}));
  // The evaluation's answers get their tool calls too.
  const auto ev = grpo::evaluate(m, tk, *task, 1, 32, 0.0, 0, {}, nlohmann::json::object(), 2);
  EXPECT_EQ(ev.n, 1);
  std::istringstream evaluated(test::read_file(tmp.str("rewarded.jsonl")));
  std::getline(evaluated, first);
  EXPECT_EQ(nlohmann::json::parse(first)["completion"], nlohmann::json::array({turn, result, turn, result, turn}));
}
