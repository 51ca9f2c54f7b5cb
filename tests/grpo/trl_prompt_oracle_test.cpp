// The prompt tokens GRPO generates from, against TRL's own: GRPOTrainer._tokenize_prompts run
// live by tools/trl/prompt_ids.py (.venv) on the real Qwen3 and Llama 3 tokenizers of the shared
// test data. A JSONL dataset in TRL's conversational form (read by tasks::load_jsonl) goes
// through the model's chat template with the generation prompt and chat_template_kwargs, then is
// encoded without special tokens; text prompts are encoded with them. Ids must be equal, with
// the kwargs given per example, run-wide (grpo.chat_template_kwargs) or both, and with tools.
// A missing oracle is a failure naming scripts/setup.sh --test, not a skip.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../model/test_util.h"
#include "grpo/trainer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

using namespace brl;
using nlohmann::json;
using test::TempDir;
namespace hf = test::hf;

namespace {

std::string testdata(const std::string& model) { return std::string(BRL_TESTDATA_DIR) + "/tokenizers/" + model; }

struct Batch {
  std::string model_dir;
  json prompts, kwargs;  // kwargs: TRL's GRPOConfig.chat_template_kwargs
  json tools = nullptr;  // GRPOTrainer's tools (JSON schemas); ours come per example
};
// How our side gets the kwargs: as each example's chat_template_kwargs, as grpo's run-wide
// chat_template_kwargs, or the run's {"enable_thinking": true} under each example's own
// {"enable_thinking": false} (which must win: TRL sees only the example's).
enum class Via { example, run, example_over_run };

// TRL's ids for each batch, in one Python process.
std::vector<std::vector<std::vector<int32_t>>> trl_ids(TempDir& dir, const std::vector<Batch>& batches) {
  json req = json::array();
  for (auto& b : batches)
    req.push_back(
        {{"model_dir", b.model_dir}, {"prompts", b.prompts}, {"chat_template_kwargs", b.kwargs}, {"tools", b.tools}});
  test::write_file(dir.str("req.json"), req.dump());
  EXPECT_TRUE(hf::run_command("'" BRL_PYTHON "' '" + hf::source("tools/trl/prompt_ids.py") + "' < '" +
                              dir.str("req.json") + "' > '" + dir.str("out.json") + "'"));
  std::vector<std::vector<std::vector<int32_t>>> out;
  for (auto& r : json::parse(test::read_file(dir.str("out.json"))))
    out.push_back(r["ids"].get<std::vector<std::vector<int32_t>>>());
  EXPECT_EQ(out.size(), batches.size());
  return out;
}

const char* kConversations = R"([
  [{"role": "user", "content": "What is 17 * 3?"}],
  [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "12 + 30 ="}],
  [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! é 日本 😀"},
   {"role": "user", "content": "  Count to 3.\n"}],
  [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "think"},
   {"role": "user", "content": "again"}]
])";

}  // namespace

TEST(TrlPromptOracle, PromptsTokenizeAsTrlDoes) {
  ASSERT_TRUE(hf::python_installed());
  TempDir dir;
  const json convs = json::parse(kConversations);
  const json texts = {"12+30=", "Question: what is 2+2?\nAnswer:", " leading space é"};
  std::vector<Batch> batches;
  std::vector<std::vector<tasks::Example>> ours;
  std::vector<json> run_kwargs;  // grpo.chat_template_kwargs on our side, per batch
  const json no_thinking = {{"enable_thinking", false}};
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "The weather in a city", "parameters": {"type": "object", "properties":
      {"city": {"type": "string", "description": "the city"}, "unit": {"type": "string", "enum": ["c", "f"]}},
      "required": ["city"]}}}, {"type": "function", "function": {"name": "noop", "parameters": {}}}])");
  for (const char* model : {"qwen3", "llama3"}) {
    for (const auto& [kwargs, via] : std::vector<std::pair<json, Via>>{{json::object(), Via::example},
                                                                       {no_thinking, Via::example},
                                                                       {no_thinking, Via::run},
                                                                       {no_thinking, Via::example_over_run}}) {
      // The dataset as a user writes it, read by the jsonl loader.
      std::string jsonl;
      for (auto& c : convs) {
        json line = {{"prompt", c}, {"answer", "51"}};
        if (!kwargs.empty() && via != Via::run) line["chat_template_kwargs"] = kwargs;
        jsonl += line.dump() + "\n";
      }
      test::write_file(dir.str("train.jsonl"), jsonl);
      ours.push_back(tasks::load_jsonl(dir.str("train.jsonl")));
      batches.push_back({testdata(model), convs, kwargs});
      run_kwargs.push_back(via == Via::run                ? kwargs
                           : via == Via::example_over_run ? json{{"enable_thinking", true}}
                                                          : json::object());
    }
    std::vector<tasks::Example> plain;  // text prompts keep the tokenizer's special tokens
    for (auto& t : texts) {
      plain.emplace_back();
      plain.back().prompt = t.get<std::string>();
    }
    ours.push_back(plain);
    batches.push_back({testdata(model), texts, json::object()});
    run_kwargs.push_back(no_thinking);  // no template for text prompts: the kwargs change nothing
    // Tools the template lists for the model to call (the Llama 3 template here ignores them).
    std::string jsonl;
    for (auto& c : convs) jsonl += json{{"prompt", c}, {"answer", "51"}, {"tools", tools}}.dump() + "\n";
    test::write_file(dir.str("tools.jsonl"), jsonl);
    ours.push_back(tasks::load_jsonl(dir.str("tools.jsonl")));
    batches.push_back({testdata(model), convs, json::object(), tools});
    run_kwargs.push_back(json::object());
  }
  auto ref = trl_ids(dir, batches);
  ASSERT_EQ(ref.size(), batches.size());
  for (size_t b = 0; b < batches.size(); ++b) {
    SCOPED_TRACE(batches[b].model_dir + " chat_template_kwargs=" + batches[b].kwargs.dump());
    auto tk = tok::Tokenizer::from_dir(batches[b].model_dir);
    ASSERT_EQ(ref[b].size(), ours[b].size());
    for (size_t i = 0; i < ours[b].size(); ++i)
      EXPECT_EQ(grpo::prompt_ids(tk, ours[b][i], 1 << 20, run_kwargs[b]), ref[b][i])
          << batches[b].prompts[i].dump() << " grpo.chat_template_kwargs=" << run_kwargs[b].dump();
  }
}

TEST(TrlPromptOracle, NoChatTemplateIsAClearError) {
  // A conversational prompt for a model without a template is refused with the fix.
  TempDir bare;
  test::write_file(bare.str("tokenizer.json"), test::read_file(testdata("qwen3") + "/tokenizer.json"));
  tasks::Example e;
  e.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])");
  try {
    grpo::prompt_ids(tok::Tokenizer::from_dir(bare.str("")), e, 100);
    ADD_FAILURE() << "no error without a chat template";
  } catch (const UserError& err) {
    EXPECT_NE(std::string(err.what()).find("has no chat template"), std::string::npos) << err.what();
  }
}
