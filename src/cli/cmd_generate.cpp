// `bucketrl generate`: sample completions for a prompt from a Hugging Face model folder.
// Plain output prints each completion's text; --json prints one JSON object per completion
// with the text, the prompt's and the generated token ids and their log-probabilities (T=1,
// unfiltered). --chat sends the prompt as a user message through the model's chat template,
// as a worker renders a conversational dataset's prompt; --tools lists tools in it, and
// --tool-command runs the model's calls between its turns as a worker's tool loop does
// (grpo/tool_loop.h), printing the conversation.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <string>

#include "cli/command.h"
#include "model/model_load.h"
#include "generate/generate.h"
#include "grpo/prompts.h"
#include "grpo/tool_loop.h"
#include "lora/lora.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/rng.h"

namespace {
struct Args {
  std::string model_dir, adapter_dir, prompt, system, chat_kwargs, dtype = "auto", device = "auto";
  std::string tools_file, tool_command, response_template = "auto";
  int64_t max_tool_calling_iterations = std::numeric_limits<int64_t>::max();
  brl::gen::GenerateOptions gen;
  bool json = false, add_special = false, chat = false;
};

// --tools: a JSON list of tool schemas (as a dataset example's "tools").
nlohmann::ordered_json read_tools(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw brl::UserError("--tools " + path + ": cannot read the file");
  auto j = nlohmann::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array())
    throw brl::UserError("--tools " + path + ": not a JSON list of tool schemas",
                         "e.g. [{\"type\": \"function\", \"function\": {\"name\": \"add\", \"parameters\": {...}}}]");
  return j;
}

// A turn or a tool message, for reading: "assistant: ...", "  -> name(arguments)", "tool name: ...".
void print_messages(const nlohmann::ordered_json& messages) {
  for (const auto& m : messages) {
    const std::string role = m.value("role", std::string());
    const auto& c = m.contains("content") ? m["content"] : nlohmann::ordered_json("");
    const std::string content = c.is_string() ? c.get<std::string>() : c.dump();
    if (role == "tool") {
      std::printf("tool %s: %s\n", m.value("name", std::string()).c_str(), content.c_str());
      continue;
    }
    if (m.contains("reasoning_content")) std::printf("(reasoning) %s\n", m["reasoning_content"].dump().c_str());
    std::printf("%s: %s\n", role.c_str(), content.c_str());
    if (m.contains("tool_calls"))
      for (const auto& call : m["tool_calls"]) {
        const auto& f = call.contains("function") ? call["function"] : call;
        std::printf("  -> %s(%s)\n", f.value("name", std::string("?")).c_str(),
                    f.contains("arguments") ? f["arguments"].dump().c_str() : "");
      }
  }
}

// The prompt's token ids: the text as given, or (--chat) the conversation as a worker renders
// a conversational dataset's prompt (grpo/prompts.h).
brl::tasks::Example chat_example(const Args& a) {
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
  if (!a.tools_file.empty()) e.tools = read_tools(a.tools_file);
  return e;
}

std::vector<int32_t> prompt_ids(const brl::tok::Tokenizer& tok, const Args& a, const brl::tasks::Example& e) {
  if (!a.chat) return tok.encode(a.prompt, a.add_special);
  return brl::grpo::prompt_ids(tok, e, std::numeric_limits<int>::max());
}

int run(const Args& a) {
  brl::cli::init_compute();
  auto tok = brl::tok::Tokenizer::from_dir(a.model_dir);
  // Before the weights load: a prompt that cannot be rendered, or a format of tool calls that
  // cannot be told, stops the command at once.
  const brl::tasks::Example ex = a.chat ? chat_example(a) : brl::tasks::Example{};
  const auto ids = prompt_ids(tok, a, ex);
  if (ids.empty()) throw brl::UserError("--prompt encodes to no tokens", "pass a non-empty prompt");
  const bool with_tools = !a.tools_file.empty();
  std::optional<brl::grpo::TurnParser> parser;
  std::optional<brl::tasks::ToolCommand> tools;
  if (with_tools) parser.emplace(tok, a.response_template);
  if (!a.tool_command.empty()) tools.emplace(a.tool_command, a.response_template);
  auto model = brl::model::load_model_on(a.model_dir, a.device, a.dtype);
  if (!a.adapter_dir.empty()) brl::lora::load_peft(model, a.adapter_dir);  // attaches it (PEFT config) and loads it

  auto opts = a.gen;
  std::set<int64_t> stops(opts.stop_token_ids.begin(), opts.stop_token_ids.end());
  for (auto id : tok.eos_ids()) stops.insert(id);
  for (auto id : model.config.eos_token_ids) stops.insert(id);
  opts.stop_token_ids.assign(stops.begin(), stops.end());

  auto out = brl::gen::generate(model, {ids}, opts);
  // Each completion as a conversation: its turn parsed, and with a tool command the calls run and
  // the model generating on after their results (one continuation per completion, a round at a time).
  std::vector<nlohmann::ordered_json> conversations(out.size());
  if (tools) {
    std::vector<const brl::tasks::Example*> exs(out.size(), &ex);
    brl::grpo::ToolLoopOptions lo;
    lo.max_completion_length = opts.max_new_tokens;
    lo.max_iterations = a.max_tool_calling_iterations;
    lo.max_model_len = model.config.max_position_embeddings;
    lo.chat_template_kwargs =
        ex.chat_template_kwargs.is_object() ? ex.chat_template_kwargs : nlohmann::ordered_json::object();
    auto res = brl::grpo::run_tool_loop(
        tok, *parser, *tools, exs, {ids}, out,
        [&](const std::vector<std::vector<int32_t>>& prefixes, int64_t max_new, int64_t round) {
          auto o = opts;
          o.num_generations = 1;
          o.max_new_tokens = max_new;
          o.seed = brl::splitmix64(opts.seed ^ (0x746f6f6c73ULL + static_cast<uint64_t>(round)));  // as a worker's
          return brl::gen::generate(model, prefixes, o);
        },
        lo);
    conversations = std::move(res.messages);
  } else if (parser) {
    for (size_t i = 0; i < out.size(); ++i)
      conversations[i] = nlohmann::ordered_json::array({parser->parse(ids, out[i].tokens, ex.tools)});
  }
  for (size_t k = 0; k < out.size(); ++k) {
    auto& c = out[k];
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
      if (with_tools) {
        j["messages"] = nlohmann::json::parse(conversations[k].dump());
        if (!c.tool_mask.empty()) j["tool_mask"] = c.tool_mask;
      }
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      if (out.size() > 1)
        std::printf("--- completion %lld (%s)\n", (long long)c.sample_index, brl::gen::finish_reason_name(c.finish));
      if (with_tools) {
        print_messages(conversations[k]);
        continue;
      }
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
  auto* tools = app.add_option("--tools", a->tools_file,
                               "with --chat: a JSON file listing tool schemas for the template to show the model (as "
                               "a dataset example's \"tools\"); the reply is printed as parsed messages")
                    ->needs(chat);
  app.add_option("--tool-command", a->tool_command,
                 "with --tools: run the model's calls with this command (task.tool_command's protocol) and let it "
                 "generate on after their results, as a worker does")
      ->needs(tools);
  app.add_option("--max-tool-calling-iterations", a->max_tool_calling_iterations,
                 "with --tool-command: rounds of tool calls at most (default: until none calls a tool)")
      ->needs(tools);
  app.add_option("--response-template", a->response_template,
                 "with --tools: how the model's turns are parsed (task.response_template: auto, qwen3, llama3 or a "
                 "JSON file)")
      ->default_val("auto")
      ->needs(tools);
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
