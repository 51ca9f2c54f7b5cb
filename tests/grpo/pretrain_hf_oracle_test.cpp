// The base model `bucketrl pretrain` writes, read by Hugging Face's own libraries (tools/hf/oracle.py,
// .venv): AutoModelForCausalLM's logits equal ours (full forward and decoded through our KV
// cache), and AutoTokenizer's ids equal our tokenizer's for the demo task's prompts and answers,
// countdown prompts and a few harder strings.
// The base comes from grpo::pretrain itself (the code behind `bucketrl pretrain` and the demo)
// with the demo's options (demo_pretrain_options: model shape, habit, schedule) except 20 steps
// of 8 sequences instead of up to 2,500 of 256, and a constant learning rate without warmup so
// that 20 steps move the weights: the files (config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json, generation_config.json) are written by the same code whatever the steps.
// Tolerance: max |ours - HF| <= 1e-4 * max |HF logit| (brl::test::hf::kLogitTol); token ids exact.
// A missing oracle is a failure naming scripts/setup.sh --test, not a skip.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../model/test_util.h"
#include "grpo/demo_recipe.h"
#include "grpo/pretrain.h"
#include "model/loader.h"
#include "tasks/task.h"
#include "tokenizer/tokenizer.h"

using namespace brl;
using test::TempDir;
namespace hf = test::hf;

namespace {
const int kThreads = test::init_threads();

// The demo's base, trained briefly (see the header).
std::string pretrain_base(const TempDir& dir) {
  grpo::PretrainOptions o = grpo::demo_pretrain_options();
  o.out_dir = dir.str("base");
  o.batch_size = 8;
  o.max_steps = 20;
  o.eval_every = 20;
  o.eval_examples = 8;
  o.target_accuracy = 2.0;  // never reached: runs all steps
  o.lr_scheduler_type = grpo::PretrainSchedule::constant;
  o.warmup_steps = 0;
  tasks::TaskOptions to;  // the demo's task: addition of operands in [0, 99]
  to.max_operand = 99;
  to.operations = "+";
  to.num_eval = 16;
  auto task = tasks::make_task(to);
  EXPECT_EQ(grpo::pretrain(*task, o, /*progress=*/false).steps, 20);
  return o.out_dir;
}

// Prompts and answers as the demo shows them (answers with the taught sign habit too),
// countdown prompts, and strings that stress the byte-level pre-tokenizer and the special token.
std::vector<std::string> texts() {
  tasks::TaskOptions add;
  add.max_operand = 99;
  add.operations = "+";
  add.num_eval = 4;
  tasks::TaskOptions cd;
  cd.name = "countdown";
  cd.num_eval = 3;
  auto addition = tasks::make_task(add), countdown = tasks::make_task(cd);
  std::vector<std::string> out;
  for (auto& e : addition->eval_set()) {
    out.push_back(e.prompt);
    out.push_back(e.prompt + e.answer);
    out.push_back(e.prompt + "-" + e.answer + "<|endoftext|>");
  }
  for (auto& e : countdown->eval_set()) out.push_back(e.prompt);
  for (const char* s : {"héllo wörld 日本語 🤖", "a  b\n\tc   \n", " 12 + 34 = 46", "don't I'll 3.14159"})
    out.push_back(s);
  return out;
}
}  // namespace

TEST(PretrainHfOracle, PretrainedBaseLoadsInTransformersWithOurLogitsAndTokens) {
  ASSERT_TRUE(hf::python_installed());
  TempDir dir;
  const std::string base = pretrain_base(dir);
  auto tk = tok::Tokenizer::from_dir(base);
  const auto cases = texts();
  std::vector<std::vector<int64_t>> ours_ids;
  for (auto& t : cases) {
    auto v = tk.encode(t);
    ours_ids.emplace_back(v.begin(), v.end());
  }
  // A sequence of ~50 tokens from the demo's own text: prompts with answers and eos.
  std::vector<int64_t> seq;
  for (size_t i = 2; i < 12; i += 3) seq.insert(seq.end(), ours_ids[i].begin(), ours_ids[i].end());

  hf::OracleBatch batch;
  batch.tokenize(base, cases);
  batch.logits(base, seq, dir.str("logits.f32"));
  std::vector<std::string> lines;
  ASSERT_TRUE(batch.run(dir, &lines));

  ASSERT_EQ(lines.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(ours_ids[i], nlohmann::json::parse(lines[i]).get<std::vector<int64_t>>()) << "text: " << cases[i];

  auto theirs = hf::read_logits(dir.str("logits.f32"), static_cast<int64_t>(seq.size()));
  auto m = model::load_model(base);
  EXPECT_LE(hf::rel_diff(hf::model_logits(m, seq), theirs, "pretrained base full"), hf::kLogitTol);
  EXPECT_LE(hf::rel_diff(hf::decode_logits(m, seq), theirs, "pretrained base decoded"), hf::kLogitTol);
  EXPECT_GT(theirs.abs().max().item<double>(), 0.5) << "the logits must carry signal";
  std::printf("    %zu texts tokenized alike; logits over %zu tokens, max |logit| %.2f\n", cases.size(), seq.size(),
              theirs.abs().max().item<double>());
}
