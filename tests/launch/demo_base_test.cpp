// The demo's cached base model is reused only when it was made from the same recipe and task
// (OUT/base/bucketrl_base_recipe.json): a base pretrained for other problems would carry the
// new held-out set in its training data, or simply not fit the task.
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
  test::write_file(base + "/bucketrl_base_recipe.json", launch::demo_base_recipe(cfg, po).dump(2));
  EXPECT_TRUE(launch::demo_base_cached(base, cfg, po));
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
