// Hugging Face tokenizer.json: byte-level BPE (GPT-2, Qwen2/3, Llama-3) and
// sentencepiece-style BPE with byte fallback (Llama-2, TinyLlama, Mistral), with added and
// special tokens. (Contract shared with the model/generation code; the implementation owns
// the private part.)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace brl::tok {

class ChatTemplate;

class Tokenizer {
 public:
  // tokenizer.json only.
  static Tokenizer from_file(const std::string& tokenizer_json_path);
  // The text of a tokenizer.json already in memory; `label` names it in errors.
  static Tokenizer from_json(std::string_view tokenizer_json, const std::string& label);
  // A model folder: tokenizer.json, plus tokenizer_config.json / generation_config.json /
  // config.json for bos/eos/pad where present.
  static Tokenizer from_dir(const std::string& model_dir);

  // add_special_tokens: the post-processor's additions (e.g. Llama's BOS); off by default.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  int32_t vocab_size() const;  // including added tokens (max id + 1)
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;
  std::optional<int32_t> bos_id() const;
  std::vector<int32_t> eos_ids() const;  // generation stops on any of these
  std::optional<int32_t> pad_id() const;
  // tokenizer.json's added tokens, as transformers' added_tokens_decoder lists them.
  struct Added {
    std::string content;
    int32_t id;
    bool special;
  };
  std::vector<Added> added_tokens() const;
  // The folder's chat template (from_dir only; chat_template.h says where it is read from),
  // or null when it has none. A template that does not parse is reported here, not at load,
  // so that a model with a broken template still serves text prompts.
  const ChatTemplate* chat_template() const;

  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&);
  Tokenizer& operator=(const Tokenizer&);

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;  // immutable after load: cheap to copy, thread-safe
  std::shared_ptr<const ChatTemplate> chat_;
  std::string chat_error_;
};

}  // namespace brl::tok
