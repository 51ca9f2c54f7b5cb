// The demo's cached base model is reused only when it was made from the same recipe and task
// (OUT/base/bucketrl_base_recipe.json): a base pretrained for other problems would carry the
// new held-out set in its training data, or simply not fit the task.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../test_files.h"
#include "async/demo.h"
#include "grpo/demo_recipe.h"

using namespace brl;

TEST(DemoBase, CachedOnlyWhenMadeFromTheSameRecipeAndTask) {
  test::TempDir dir;
  const std::string base = dir.str("base");
  std::filesystem::create_directories(base);
  RunConfig cfg = demo_run_config();
  EXPECT_FALSE(async::demo_base_cached(base, cfg));  // nothing there
  test::write_file(base + "/model.safetensors", "weights");
  EXPECT_FALSE(async::demo_base_cached(base, cfg));  // a base of unknown origin (made before the recipe was recorded)
  test::write_file(base + "/bucketrl_base_recipe.json", async::demo_base_recipe(cfg).dump(2));
  EXPECT_TRUE(async::demo_base_cached(base, cfg));
  RunConfig other = cfg;
  other.task.max_operand = 50;
  EXPECT_FALSE(async::demo_base_cached(base, other));  // --set task.max_operand=50
  other = cfg;
  other.task.seed = cfg.task.seed + 1;
  EXPECT_FALSE(async::demo_base_cached(base, other));  // another held-out draw
  test::write_file(base + "/bucketrl_base_recipe.json", "{not json");
  EXPECT_FALSE(async::demo_base_cached(base, cfg));
}
