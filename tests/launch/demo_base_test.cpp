// The demo's cached base model is reused only when it was made from the same recipe and task
// (OUT/base/bucketrl_base_recipe.json): a base pretrained for other problems would carry the
// new held-out set in its training data, or simply not fit the task. The recipes' default
// worker counts: the skill demo's workers get 2 threads each (one worker below 4 cores).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../test_files.h"
#include "launch/demo.h"
#include "grpo/demo_recipe.h"

using namespace brl;

TEST(DemoBase, CachedOnlyWhenMadeFromTheSameRecipeAndTask) {
  test::TempDir dir;
  const std::string base = dir.str("base");
  std::filesystem::create_directories(base);
  RunConfig cfg = demo_run_config();
  const grpo::PretrainOptions po = grpo::demo_pretrain_options();
  EXPECT_FALSE(launch::demo_base_cached(base, cfg, po));  // nothing there
  test::write_file(base + "/model.safetensors", "weights");
  EXPECT_FALSE(
      launch::demo_base_cached(base, cfg, po));  // a base of unknown origin (made before the recipe was recorded)
  launch::record_demo_base(base, cfg, po);       // as `bucketrl pretrain --recipe fast --out OUT/base` does
  EXPECT_TRUE(launch::demo_base_cached(base, cfg, po));
  // pretrain --recipe keeps only its own --out; the demo's run folder (and other train options)
  // are no part of a base's making.
  RunConfig demo_cfg = cfg;
  demo_cfg.train.output_dir = dir.str("run");
  EXPECT_TRUE(launch::demo_base_cached(base, demo_cfg, po));
  grpo::PretrainOptions out_elsewhere = po;
  out_elsewhere.out_dir = dir.str("elsewhere");
  EXPECT_TRUE(launch::demo_base_cached(base, cfg, out_elsewhere));
  grpo::PretrainOptions reseeded = po;
  reseeded.seed = po.seed + 1;  // pretrain --recipe fast --seed N: not the demo's base
  EXPECT_FALSE(launch::demo_base_cached(base, cfg, reseeded));
  RunConfig other = cfg;
  other.task.max_operand = 50;
  EXPECT_FALSE(launch::demo_base_cached(base, other, po));  // --set task.max_operand=50
  other = cfg;
  other.task.seed = cfg.task.seed + 1;
  EXPECT_FALSE(launch::demo_base_cached(base, other, po));  // another held-out draw
  // The other recipe's base (another task size, stopped early, no habit) is not this one's.
  EXPECT_FALSE(launch::demo_base_cached(base, cfg, demo_recipe("skill").pretrain));
  test::write_file(base + "/bucketrl_base_recipe.json", "{not json");
  EXPECT_FALSE(launch::demo_base_cached(base, cfg, po));
}

TEST(DemoRecipe, DefaultWorkersLeaveTheSkillDemoTwoThreadsEach) {
  const DemoRecipe fast = demo_recipe("fast"), skill = demo_recipe("skill");
  for (int cores : {1, 2, 3, 4, 8, 64}) {
    EXPECT_EQ(fast.default_workers(cores), cores >= 2 ? 2 : 1) << cores << " cores";
    EXPECT_EQ(skill.default_workers(cores), cores >= 4 ? 2 : 1) << cores << " cores";
  }
  EXPECT_EQ(skill.default_workers(0), 1);  // hardware_concurrency() may not know
}
