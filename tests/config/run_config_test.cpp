#include "config/run_config.h"

#include <gtest/gtest.h>

#include <cmath>

#include "util/error.h"

using namespace brl;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(RunConfig, TomlSectionsAndOverrides) {
  auto c = RunConfig::from_toml_string(R"(
[model]
path = "m"
[lora]
r = 16
lora_alpha = 32
target_modules = "all-linear"
use_rslora = true
[grpo]
num_generations = 4
learning_rate = 5e-5
epsilon_high = 0.28
reward_weights = [1.0, 0.5]
[task]
name = "countdown"
)",
                                       "run.toml");
  EXPECT_EQ(c.lora.r, 16);
  EXPECT_DOUBLE_EQ(c.lora.scale(), 32 / 4.0);  // rsLoRA: alpha / sqrt(16)
  EXPECT_EQ(c.lora.resolved_modules().size(), 7u);
  EXPECT_EQ(c.grpo.num_generations, 4);
  EXPECT_DOUBLE_EQ(c.grpo.eps_high(), 0.28);
  EXPECT_EQ(c.grpo.reward_weights, (std::vector<double>{1.0, 0.5}));
  EXPECT_EQ(c.task.name, "countdown");
  c.apply_overrides({"grpo.beta=0.04", "max_steps=7", "lora.target_modules=q,v"});
  EXPECT_DOUBLE_EQ(c.grpo.beta, 0.04);
  EXPECT_EQ(c.grpo.max_steps, 7);
  EXPECT_EQ(c.lora.resolved_modules(), (std::vector<std::string>{"q_proj", "v_proj"}));
  c.validate();
  auto j = c.to_json();
  EXPECT_EQ(j["grpo"]["beta"], 0.04);
  EXPECT_EQ(j["lora"]["r"], 16);
}

TEST(RunConfig, ErrorsNameTheKey) {
  EXPECT_NE(error_of([] { RunConfig::from_toml_string("[grpo]\nlearning_rat = 1\n", "run.toml"); })
                .find("run.toml: unknown key 'learning_rat' in [grpo]"),
            std::string::npos);
  EXPECT_NE(error_of([] { RunConfig::from_toml_string("[grpo]\nlearning_rat = 1\n", "run.toml"); }).find("learning_rate"),
            std::string::npos);  // the hint
  EXPECT_NE(error_of([] { RunConfig::from_toml_string("[gpro]\n", "run.toml"); }).find("unknown section [gpro]"),
            std::string::npos);
  EXPECT_NE(error_of([] { RunConfig::from_toml_string("[lora]\nr = \"x\"\n", "run.toml"); }).find("r = \"x\" is not an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { RunConfig::from_toml_string("[lora\n", "bad.toml"); }).find("bad.toml:1"), std::string::npos);
  RunConfig c;
  EXPECT_NE(error_of([&] { c.apply_overrides({"seed=3"}); }).find("in several sections"), std::string::npos);
  c.lora.target_modules = {"qq_proj"};
  EXPECT_NE(error_of([&] { c.validate(); }).find("unknown module 'qq_proj'"), std::string::npos);
  c = RunConfig();
  c.lora.r = 0;
  EXPECT_NE(error_of([&] { c.validate(); }).find("r (0) must be >= 1"), std::string::npos);
}

TEST(RunConfig, SyncModeIsAsyncOrABarrierOfKSteps) {
  RunConfig c;
  EXPECT_EQ(c.sync.mode, "async");
  EXPECT_NO_THROW(c.validate());
  c.apply_overrides({"sync.mode=barrier"});
  EXPECT_NE(error_of([&] { c.validate(); }).find("[sync] mode = \"barrier\": must be async or sync"), std::string::npos);
  c.apply_overrides({"sync.mode=sync"});
  // A barrier round is K steps: the time trigger alone cannot define one.
  EXPECT_NE(error_of([&] { c.validate(); }).find("sync_steps = 0: must be >= 1 with mode = \"sync\""), std::string::npos);
  c.apply_overrides({"sync.sync_steps=4"});
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(RunConfig::from_toml_string("[sync]\nmode = \"sync\"\nsync_steps = 2\n", "run.toml").sync.mode, "sync");
}
