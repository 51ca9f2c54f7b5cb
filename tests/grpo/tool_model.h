// A model that calls a tool on cue, for the tool-calling tests of the trainer and the CLI: a
// byte-level tokenizer whose one added token (id 257) is a whole call, a chat template that
// writes calls and tool results, and a bigram-table model (set_bigrams) that answers each
// generation prompt ("A:") with the call and then the end of sequence (256).
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "../test_files.h"
#include "grpo/pretrain.h"
#include "model/llama.h"

namespace brl::test {

// A model that is a bigram table: attention and MLP outputs zero, so each position's hidden
// state is its token's embedding, and the LM head maps `from`'s direction to `to`, far above
// every other token (margin ~70 nats). Tokens without a direction get uniform logits.
inline void set_bigrams(model::Model& m, const std::vector<std::pair<int64_t, int64_t>>& edges) {
  at::NoGradGuard ng;
  for (auto& nt : m.named_tensors()) {
    if (!nt.tensor->defined()) continue;
    const std::string& n = nt.name;
    if (n.find("o_proj") != std::string::npos || n.find("down_proj") != std::string::npos ||
        n == "model.embed_tokens.weight" || n == "lm_head.weight")
      nt.tensor->zero_();
    if (n == "model.norm.weight") nt.tensor->fill_(1.0);
  }
  at::Tensor emb = m.embed_tokens, head = m.lm_head;
  for (size_t k = 0; k < edges.size(); ++k) {
    emb[edges[k].first][static_cast<int64_t>(k)] = 1.0;
    head[edges[k].second][static_cast<int64_t>(k)] = 10.0;
  }
}

// The call the added token spells.
inline const std::string kToolCall = R"(<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>)";

// dir: the byte-level tokenizer with kToolCall as token 257, and the template.
inline void write_tool_tokenizer(const std::string& dir) {
  grpo::write_byte_tokenizer(dir);
  auto j = nlohmann::json::parse(read_file(dir + "/tokenizer.json"));
  j["added_tokens"].push_back({{"id", 257},
                               {"content", kToolCall},
                               {"single_word", false},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"normalized", false},
                               {"special", false}});
  write_file(dir + "/tokenizer.json", j.dump());
  write_file(dir + "/chat_template.jinja",
             "{% for m in messages %}{% if m.role == 'user' %}U:{{ m.content }}"
             "{% elif m.role == 'assistant' %}A:{{ m.content }}{% for c in m.tool_calls %}<tool_call>"
             "{{ c.function | tojson }}</tool_call>{% endfor %}<|endoftext|>"
             "{% elif m.role == 'tool' %}T:{{ m.content }}<|endoftext|>{% endif %}{% endfor %}"
             "{% if add_generation_prompt %}A:{% endif %}");
}

// m (vocab 258, eos 256) made to answer ':' with the call and the call with the end.
inline void make_tool_caller(model::Model& m) { set_bigrams(m, {{':', 257}, {257, 256}}); }

}  // namespace brl::test
