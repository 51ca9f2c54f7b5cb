// `bucketrl generate`: sample completions for a prompt from a Hugging Face model folder.
// Plain output prints each completion's text; --json prints one JSON object per completion
// with the text, the prompt's and the generated token ids and their log-probabilities (T=1,
// unfiltered). --chat sends the prompt as a user message through the model's chat template,
// as a worker renders a conversational dataset's prompt.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <limits>
#include <set>
#include <string>

#include "cli/command.h"
#include "model/model_load.h"
#include "generate/generate.h"
#include "grpo/prompts.h"
#include "lora/lora.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {
struct Args {
  std::string model_dir, adapter_dir, prompt, system, chat_kwargs, dtype = "auto", device = "auto";
  brl::gen::GenerateOptions gen;
  bool json = false, add_special = false, chat = false;
};

// The prompt's token ids: the text as given, or (--chat) the conversation as a worker renders
// a conversational dataset's prompt (grpo/prompts.h).
std::vector<int32_t> prompt_ids(const brl::tok::Tokenizer& tok, const Args& a) {
  if (!a.chat) return tok.encode(a.prompt, a.add_special);
  brl::tasks::Example e;
  if (!a.chat_kwargs.empty()) {
    e.chat_template_kwargs = nlohmann::ordered_json::parse(a.chat_kwargs, nullptr, false);
    if (!e.chat_template_kwargs.is_object())
      throw brl::UserError("--chat-template-kwargs '" + a.chat_kwargs + "' is not a JSON object",
                           "e.g. --chat-template-kwargs '{\"enable_thinking\": false}'");
  }
  e.messages = nlohmann::ordered_json::array();
  if (!a.system.empty()) e.messages.push_back({{"role", "system"}, {"content", a.system}});
  e.messages.push_back({{"role", "user"}, {"content", a.prompt}});
  return brl::grpo::prompt_ids(tok, e, std::numeric_limits<int>::max());
}

int run(const Args& a) {
  brl::cli::init_compute();
  auto tok = brl::tok::Tokenizer::from_dir(a.model_dir);
  // Before the weights load: a prompt that cannot be rendered stops the command at once.
  const auto ids = prompt_ids(tok, a);
  if (ids.empty()) throw brl::UserError("--prompt encodes to no tokens", "pass a non-empty prompt");
  auto model = brl::model::load_model_on(a.model_dir, a.device, a.dtype);
  if (!a.adapter_dir.empty()) brl::lora::load_peft(model, a.adapter_dir);  // attaches it (PEFT config) and loads it

  auto opts = a.gen;
  std::set<int64_t> stops(opts.stop_token_ids.begin(), opts.stop_token_ids.end());
  for (auto id : tok.eos_ids()) stops.insert(id);
  for (auto id : model.config.eos_token_ids) stops.insert(id);
  opts.stop_token_ids.assign(stops.begin(), stops.end());

  auto out = brl::gen::generate(model, {ids}, opts);
  for (auto& c : out) {
    // The stop token is part of the completion (GRPO trains on it) but not of its text.
    std::vector<int32_t> shown = c.tokens;
    if (c.finish == brl::gen::FinishReason::kStop && !shown.empty()) shown.pop_back();
    const std::string text = tok.decode(shown, /*skip_special_tokens=*/true);
    if (a.json) {
      nlohmann::json j = {{"prompt_index", c.prompt_index},
                          {"sample_index", c.sample_index},
                          {"text", text},
                          {"prompt_token_ids", ids},
                          {"token_ids", c.tokens},
                          {"logprobs", c.logprobs},
                          {"finish_reason", brl::gen::finish_reason_name(c.finish)}};
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      if (out.size() > 1)
        std::printf("--- completion %lld (%s)\n", (long long)c.sample_index, brl::gen::finish_reason_name(c.finish));
      // A chat reply stands alone; a text completion continues the prompt.
      std::printf("%s%s\n", a.chat ? "" : a.prompt.c_str(), text.c_str());
    }
  }
  return 0;
}

brl::cli::RunFn setup_generate(CLI::App& app) {
  auto a = std::make_shared<Args>();
  app.add_option("--model", a->model_dir, "Hugging Face model folder (config.json, *.safetensors, tokenizer.json)")
      ->required();
  app.add_option("--adapter", a->adapter_dir,
                 "PEFT adapter folder to apply (adapter_model.safetensors + adapter_config.json)");
  app.add_option("--prompt", a->prompt, "prompt text (with --chat: the user's message)")->required();
  auto* chat = app.add_flag("--chat", a->chat,
                            "send the prompt as a user message through the model's chat template (with the generation "
                            "prompt), as a worker renders a conversational dataset's prompts");
  app.add_option("--system", a->system, "with --chat: a system message before the user's")->needs(chat);
  app.add_option("--chat-template-kwargs", a->chat_kwargs,
                 "with --chat: template variables as a JSON object, e.g. '{\"enable_thinking\": false}'")
      ->needs(chat);
  app.add_option("-n,--num-generations", a->gen.num_generations, "completions to sample")->default_val(1);
  app.add_option("--temperature", a->gen.temperature, "sampling temperature; 0 = greedy")->default_val(1.0);
  app.add_option("--top-k", a->gen.top_k, "keep the k most likely tokens; 0 = off")->default_val(0);
  app.add_option("--top-p", a->gen.top_p, "nucleus sampling mass; 1 = off")->default_val(1.0);
  app.add_option("--min-p", a->gen.min_p, "drop tokens less likely than min_p x the most likely one; 0 = off")
      ->default_val(0.0);
  app.add_option("--repetition-penalty", a->gen.repetition_penalty,
                 "penalise tokens already in the prompt or completion (> 1 discourages them); 1 = off")
      ->default_val(1.0);
  app.add_option("--max-new-tokens", a->gen.max_new_tokens, "tokens to generate at most")->default_val(128);
  app.add_option("--seed", a->gen.seed, "random seed (same seed, same samples)")->default_val(0);
  app.add_option("--stop-id", a->gen.stop_token_ids, "extra stop token ids (eos always stops)");
  app.add_option("--dtype", a->dtype, "weights: auto (bf16 on a GPU, f32 on the CPU) | f32 | bf16")
      ->default_val("auto");
  app.add_option("--device", a->device, "cpu | cuda | cuda:N | auto (a GPU when this machine has one)")
      ->default_val("auto");
  app.add_flag("--add-special-tokens", a->add_special,
               "let the tokenizer add BOS etc. to the prompt (not with --chat: the template writes them)")
      ->excludes(chat);
  app.add_flag("--json", a->json, "one JSON object per completion: text, prompt_token_ids, token_ids, logprobs");
  return [a] { return run(*a); };
}
brl::cli::Register reg("generate", "sample completions of a prompt from a model folder", setup_generate);
}  // namespace
