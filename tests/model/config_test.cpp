// ModelConfig from HF config.json: published Qwen2.5-0.5B / Qwen3 / Llama / Llama-3.2-1B /
// Mistral-7B-v0.3 fields, sliding windows (Mistral's kept, Qwen's per-layer ones refused),
// RoPE scaling in transformers 4's form (rope_scaling) and 5's (rope_parameters, holding
// rope_theta; dtype for torch_dtype), defaults, validation messages quoting values, unknown
// model_type and RoPE type.
#include "model/config.h"

#include <gtest/gtest.h>

#include "util/error.h"

using namespace brl::model;
using nlohmann::json;

namespace {
// Qwen2.5-0.5B's published config.json (the fields we read).
json qwen25_05b() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
    "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1", "use_cache": true, "use_sliding_window": false,
    "vocab_size": 151936})");
}
std::string error_of(const json& j) {
  try {
    ModelConfig::from_json(j, "cfg.json");
  } catch (const brl::UserError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(ModelConfig, ParsesQwen2) {
  auto c = ModelConfig::from_json(qwen25_05b());
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_EQ(c.hidden_size, 896);
  EXPECT_EQ(c.head_dim, 64);  // default hidden / heads
  EXPECT_EQ(c.n_groups(), 7);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151643});
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.n_rot(), 64);
  // Qwen2.5-0.5B has 494M parameters (published figure: 0.49B).
  EXPECT_NEAR(c.num_parameters() / 1e6, 494.0, 1.0);
}

TEST(ModelConfig, ParsesQwen3AndLlama) {
  auto q3 = qwen25_05b();
  q3["model_type"] = "qwen3";
  q3["head_dim"] = 128;
  q3["attention_bias"] = false;
  auto c = ModelConfig::from_json(q3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.head_dim, 128);

  auto ll = qwen25_05b();
  ll["model_type"] = "llama";
  ll["attention_bias"] = true;
  ll["eos_token_id"] = {128001, 128008, 128009};
  ll["partial_rotary_factor"] = 0.5;
  c = ModelConfig::from_json(ll);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.o_proj_bias);
  EXPECT_EQ(c.eos_token_ids.size(), 3u);
  EXPECT_EQ(c.n_rot(), 32);
}

TEST(ModelConfig, Errors) {
  auto j = qwen25_05b();
  j["model_type"] = "gpt2";
  auto e = error_of(j);
  EXPECT_NE(e.find("gpt2"), std::string::npos) << e;
  EXPECT_NE(e.find("llama, mistral, qwen2, qwen3"), std::string::npos) << e;

  j = qwen25_05b();
  j["num_key_value_heads"] = 3;
  e = error_of(j);
  EXPECT_NE(e.find("num_attention_heads (14) must be divisible by num_key_value_heads (3)"), std::string::npos) << e;

  j = qwen25_05b();
  j.erase("hidden_size");
  EXPECT_NE(error_of(j).find("\"hidden_size\""), std::string::npos);

  j = qwen25_05b();
  j["hidden_size"] = "big";
  EXPECT_NE(error_of(j).find("hidden_size"), std::string::npos);

  for (const char* type : {"dynamic", "longrope", "made-up"}) {
    j = qwen25_05b();
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 4.0}};
    EXPECT_NE(error_of(j).find(std::string("type \"") + type + "\" is not supported"), std::string::npos) << type;
  }
  j = qwen25_05b();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};  // no low/high_freq_factor
  EXPECT_NE(error_of(j).find("needs \"low_freq_factor\""), std::string::npos);
  j = qwen25_05b();
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  EXPECT_NE(error_of(j).find("per layer type"), std::string::npos);
  j = qwen25_05b();
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 0.0}};
  EXPECT_NE(error_of(j).find("factor (0.000000) must be > 0"), std::string::npos);

  for (json v : {json(1e300), json(896.5), json("896")}) {  // a float cast to int64 would be undefined
    j = qwen25_05b();
    j["hidden_size"] = v;
    EXPECT_NE(error_of(j).find("field \"hidden_size\" has the wrong type"), std::string::npos) << v;
  }
  j = qwen25_05b();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 1e300}};
  EXPECT_NE(error_of(j).find("\"original_max_position_embeddings\" has the wrong type"), std::string::npos);

  j = qwen25_05b();
  j["rms_norm_eps"] = -1.0;
  EXPECT_NE(error_of(j).find("rms_norm_eps"), std::string::npos);
}

// Llama-3.2-1B's published config.json (the RoPE fields; transformers 4's rope_scaling).
TEST(ModelConfig, ParsesLlama3RopeScaling) {
  auto j = json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
    "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "vocab_size": 128256})");
  auto c = ModelConfig::from_json(j);
  EXPECT_DOUBLE_EQ(c.rope_theta, 5e5);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  // Llama 3.2 1B: 1.24B parameters (published), embeddings tied.
  EXPECT_NEAR(c.num_parameters() / 1e9, 1.236, 0.001);
  auto d = ModelConfig::from_json(c.to_json());
  EXPECT_EQ(d.rope_scaling, c.rope_scaling);
  EXPECT_EQ(d.to_json(), c.to_json());
}

// transformers 5 writes rope_parameters (holding rope_theta and the type) and dtype, where 4
// wrote rope_theta, rope_scaling and torch_dtype; a value inside the dict wins, as there.
TEST(ModelConfig, ParsesTransformers5RopeParameters) {
  auto j = qwen25_05b();
  j.erase("rope_theta");
  j.erase("torch_dtype");
  j["dtype"] = "bfloat16";
  j["rope_parameters"] = {{"rope_theta", 1000000.0}, {"rope_type", "default"}};
  auto c = ModelConfig::from_json(j);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);  // was 10000 when only the top-level key was read
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  j["rope_theta"] = 10000.0;  // a stale top-level value loses to the dict's
  EXPECT_DOUBLE_EQ(ModelConfig::from_json(j).rope_theta, 1e6);
  j["rope_parameters"] = {{"rope_type", "yarn"},
                          {"factor", 4.0},
                          {"original_max_position_embeddings", 32768},
                          {"rope_theta", 1e6},
                          {"partial_rotary_factor", 0.5}};
  c = ModelConfig::from_json(j);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32);  // defaults as in transformers
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1);
  EXPECT_FALSE(c.rope_scaling.attention_factor.has_value());
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.5);
  EXPECT_EQ(c.n_rot(), 32);
  // The old key, when both are there, as transformers 5 takes it: rope_scaling first.
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  c = ModelConfig::from_json(j);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);  // the top-level one: rope_scaling holds none
}

// Mistral-7B-Instruct-v0.3's published config.json (sliding_window null, no biases).
TEST(ModelConfig, ParsesMistral) {
  auto j = json::parse(R"({
    "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32768})");
  auto c = ModelConfig::from_json(j);
  EXPECT_EQ(c.model_type, "mistral");
  EXPECT_FALSE(c.attention_bias || c.o_proj_bias || c.mlp_bias || c.qk_norm);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_NEAR(c.num_parameters() / 1e9, 7.248, 0.001);  // published: 7.25B
  j["sliding_window"] = 4096;                           // Mistral-7B-v0.1's
  c = ModelConfig::from_json(j);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(ModelConfig::from_json(c.to_json()).sliding_window, 4096);
  j["attention_bias"] = true;  // not a Mistral field: transformers' Mistral has no biases
  EXPECT_FALSE(ModelConfig::from_json(j).attention_bias);
}

// Qwen2 / Qwen3 window only the layers from max_window_layers on: not implemented, refused,
// where published models (use_sliding_window false) load.
TEST(ModelConfig, QwenSlidingWindowLayersRefused) {
  auto j = qwen25_05b();
  j["use_sliding_window"] = true;
  j["max_window_layers"] = 21;
  EXPECT_NE(error_of(j).find("sliding-window attention on some layers"), std::string::npos);
  j["max_window_layers"] = 24;  // no layer from 24 on: nothing windowed
  EXPECT_EQ(error_of(j), "");
  j = qwen25_05b();
  j["layer_types"] = json::array();
  for (int i = 0; i < 24; ++i) j["layer_types"].push_back(i < 20 ? "full_attention" : "sliding_attention");
  EXPECT_NE(error_of(j).find("sliding-window attention on some layers"), std::string::npos);
  for (auto& t : j["layer_types"]) t = "full_attention";  // transformers 5's form of Qwen2.5's
  EXPECT_EQ(error_of(j), "");
}

TEST(ModelConfig, JsonRoundTrip) {
  for (std::string type : {"llama", "qwen2", "qwen3", "mistral"}) {
    auto j = qwen25_05b();
    j["model_type"] = type;
    auto c = ModelConfig::from_json(j);
    auto d = ModelConfig::from_json(c.to_json());
    EXPECT_EQ(d.to_json(), c.to_json()) << type;
    EXPECT_EQ(d.attention_bias, c.attention_bias);
    EXPECT_EQ(d.qk_norm, c.qk_norm);
  }
}

TEST(ModelConfig, NamedShapes) {
  auto s = named_shape("small");
  EXPECT_EQ(s.hidden_size, 512);
  EXPECT_EQ(s.head_dim, 64);
  EXPECT_THROW(named_shape("huge"), brl::UserError);
}
