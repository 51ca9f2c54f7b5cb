// HF config.json <-> ModelConfig, with validation that quotes the offending values.
#include "model/config.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "util/error.h"
#include "util/json_int.h"

namespace brl::model {

namespace {
const std::vector<std::string> kSupported = {"llama", "mistral", "qwen2", "qwen3"};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

template <class T>
T get_or(const nlohmann::json& j, const char* key, T def, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return def;
  try {
    // Integers strictly (json_int.h): a plain cast of {"hidden_size": 1e300} is undefined.
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return json_int<T>(j[key]);
    else return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw UserError(source + ": field \"" + key + "\" has the wrong type (" + j[key].dump() + ")");
  }
}

// RoPE's base, rotary fraction and scaling (after max_position_embeddings, a default of the
// pretraining context), as transformers reads them: from rope_scaling
// (transformers 4's key) or else rope_parameters (5's, which also holds rope_theta and
// partial_rotary_factor); a value inside the dict wins over the top-level one.
void parse_rope(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  nlohmann::json rp = nlohmann::json::object();
  const char* key = nullptr;
  for (const char* k : {"rope_scaling", "rope_parameters"})
    if (j.contains(k) && !j[k].is_null() && !(j[k].is_object() && j[k].empty())) {
      key = k;
      rp = j[k];
      break;
    }
  if (!rp.is_object()) throw UserError(source + ": \"" + key + "\" must be an object (" + rp.dump() + ")");
  for (auto& [k, v] : rp.items())
    if (v.is_object())
      throw UserError(source + ": " + key + " per layer type (\"" + k + "\") is not supported",
                      "these model types take one RoPE for every layer: give one flat " + std::string(key));
  const std::string where = source + ": " + (key ? key : "config");
  c.rope_theta = get_or<double>(rp, "rope_theta", get_or<double>(j, "rope_theta", 10000.0, source), where);
  c.partial_rotary_factor =
      get_or<double>(rp, "partial_rotary_factor", get_or<double>(j, "partial_rotary_factor", 1.0, source), where);
  RopeScaling& r = c.rope_scaling;
  r.type = get_or<std::string>(rp, "rope_type", get_or<std::string>(rp, "type", "default", where), where);
  if (r.type == "default") return;
  static const std::vector<std::string> kRopeTypes = {"default", "linear", "llama3", "yarn"};
  if (std::find(kRopeTypes.begin(), kRopeTypes.end(), r.type) == kRopeTypes.end())
    throw UserError(where + " type \"" + r.type + "\" is not supported (" + rp.dump() + ")",
                    "supported RoPE types: " + join(kRopeTypes));
  auto required = [&](const char* k) {
    if (!rp.contains(k) || rp[k].is_null())
      throw UserError(where + ": RoPE type \"" + r.type + "\" needs \"" + k + "\" (" + rp.dump() + ")",
                      "fix the model's config.json");
    return get_or<double>(rp, k, 0.0, where);
  };
  // Where the pretraining context is not given, transformers takes max_position_embeddings.
  r.original_max_position_embeddings =
      get_or<int64_t>(rp, "original_max_position_embeddings",
                      get_or<int64_t>(j, "original_max_position_embeddings", c.max_position_embeddings, source), where);
  if (r.type == "linear") {
    r.factor = required("factor");
  } else if (r.type == "llama3") {
    r.factor = required("factor");
    r.low_freq_factor = required("low_freq_factor");
    r.high_freq_factor = required("high_freq_factor");
  } else {  // yarn; a null factor is the ratio of the two contexts
    r.factor = get_or<double>(
        rp, "factor", static_cast<double>(c.max_position_embeddings) / r.original_max_position_embeddings, where);
    // HF: `get("beta_fast") or 32`, so 0 means the default too.
    r.beta_fast = get_or<double>(rp, "beta_fast", 0.0, where);
    r.beta_slow = get_or<double>(rp, "beta_slow", 0.0, where);
    if (r.beta_fast == 0) r.beta_fast = 32.0;
    if (r.beta_slow == 0) r.beta_slow = 1.0;
    r.truncate = get_or<bool>(rp, "truncate", true, where);
    for (auto [k, v] : {std::pair{"attention_factor", &r.attention_factor}, std::pair{"mscale", &r.mscale},
                        std::pair{"mscale_all_dim", &r.mscale_all_dim}})
      if (rp.contains(k) && !rp[k].is_null()) *v = get_or<double>(rp, k, 0.0, where);
  }
}

// Mistral's window, kept (forward refuses sequences longer than it). Qwen2 / Qwen3 window only
// some layers (use_sliding_window, max_window_layers; transformers 5's layer_types): refused.
void parse_sliding_window(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  if (c.model_type == "mistral") {
    if (j.contains("sliding_window") && !j["sliding_window"].is_null())
      c.sliding_window = get_or<int64_t>(j, "sliding_window", 0, source);
    return;
  }
  // As transformers 5 reads it: layer_types when given, else the layers from max_window_layers on.
  bool windowed = false;
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    for (auto& t : j["layer_types"]) windowed = windowed || t != "full_attention";
  } else if (get_or<bool>(j, "use_sliding_window", false, source) && j.contains("sliding_window") &&
             !j["sliding_window"].is_null()) {
    windowed = get_or<int64_t>(j, "max_window_layers", 28, source) < c.num_hidden_layers;
  }
  if (windowed)
    throw UserError(source +
                        ": sliding-window attention on some layers (use_sliding_window / layer_types) is not "
                        "supported",
                    "use a config with use_sliding_window false (every published Qwen2.5 / Qwen3 model has it)");
}
}  // namespace

int64_t ModelConfig::n_rot() const {
  int64_t r = static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
  return r - r % 2;
}

int64_t ModelConfig::num_parameters() const {
  int64_t C = hidden_size, H = head_dim;
  int64_t attn = C * num_attention_heads * H * 2 + C * num_key_value_heads * H * 2;
  int64_t mlp = 3 * C * intermediate_size;
  int64_t layer = attn + mlp + 2 * C + (qk_norm ? 2 * H : 0);
  int64_t emb = vocab_size * C * (tie_word_embeddings ? 1 : 2);
  return num_hidden_layers * layer + emb + C;
}

void ModelConfig::validate(const std::string& source) const {
  auto bad = [&](const std::string& what) { throw UserError(source + ": " + what, "fix the model's config.json"); };
  if (std::find(kSupported.begin(), kSupported.end(), model_type) == kSupported.end())
    bad("unsupported model_type \"" + model_type + "\" (supported: " + join(kSupported) + ")");
  auto pos = [&](const char* name, int64_t v) {
    if (v <= 0) bad(std::string(name) + " (" + std::to_string(v) + ") must be positive");
  };
  pos("vocab_size", vocab_size);
  pos("hidden_size", hidden_size);
  pos("intermediate_size", intermediate_size);
  pos("num_hidden_layers", num_hidden_layers);
  pos("num_attention_heads", num_attention_heads);
  pos("num_key_value_heads", num_key_value_heads);
  pos("head_dim", head_dim);
  pos("max_position_embeddings", max_position_embeddings);
  if (num_attention_heads % num_key_value_heads != 0)
    bad("num_attention_heads (" + std::to_string(num_attention_heads) + ") must be divisible by num_key_value_heads (" +
        std::to_string(num_key_value_heads) + ")");
  if (!(rms_norm_eps > 0)) bad("rms_norm_eps (" + std::to_string(rms_norm_eps) + ") must be > 0");
  if (!(rope_theta > 0)) bad("rope_theta (" + std::to_string(rope_theta) + ") must be > 0");
  if (!(partial_rotary_factor > 0 && partial_rotary_factor <= 1))
    bad("partial_rotary_factor (" + std::to_string(partial_rotary_factor) + ") must be in (0, 1]");
  if (n_rot() < 2) bad("head_dim * partial_rotary_factor leaves no rotary dimensions");
  if (sliding_window && *sliding_window <= 0)
    bad("sliding_window (" + std::to_string(*sliding_window) + ") must be positive or null");
  const RopeScaling& r = rope_scaling;
  if (r.type != "default") {
    if (!(r.factor > 0)) bad("rope_scaling factor (" + std::to_string(r.factor) + ") must be > 0");
    if (r.original_max_position_embeddings <= 0)
      bad("rope_scaling original_max_position_embeddings (" + std::to_string(r.original_max_position_embeddings) +
          ") must be positive");
    if (r.type == "yarn" && !(rope_theta > 1))  // its correction range divides by log(theta)
      bad("rope_theta (" + std::to_string(rope_theta) + ") must be > 1 with yarn RoPE scaling");
    if (r.type == "llama3" && !(r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor))
      bad("rope_scaling low_freq_factor (" + std::to_string(r.low_freq_factor) + ") and high_freq_factor (" +
          std::to_string(r.high_freq_factor) + ") must satisfy 0 < low < high");
  }
  if (torch_dtype != "float32" && torch_dtype != "float16" && torch_dtype != "bfloat16")
    bad("torch_dtype \"" + torch_dtype + "\" (supported: float32, float16, bfloat16)");
}

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json j;
  static const std::map<std::string, std::string> arch = {{"llama", "LlamaForCausalLM"},
                                                          {"mistral", "MistralForCausalLM"},
                                                          {"qwen2", "Qwen2ForCausalLM"},
                                                          {"qwen3", "Qwen3ForCausalLM"}};
  j["architectures"] = {arch.count(model_type) ? arch.at(model_type) : model_type};
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  if (partial_rotary_factor != 1.0) j["partial_rotary_factor"] = partial_rotary_factor;
  // transformers 4's form, which 5 reads too.
  if (const RopeScaling& r = rope_scaling; r.type != "default") {
    nlohmann::json rs = {{"rope_type", r.type}, {"factor", r.factor}};
    if (r.type != "linear") rs["original_max_position_embeddings"] = r.original_max_position_embeddings;
    if (r.type == "llama3") rs["low_freq_factor"] = r.low_freq_factor, rs["high_freq_factor"] = r.high_freq_factor;
    if (r.type == "yarn") {
      rs["beta_fast"] = r.beta_fast, rs["beta_slow"] = r.beta_slow;
      if (!r.truncate) rs["truncate"] = false;
      if (r.attention_factor) rs["attention_factor"] = *r.attention_factor;
      if (r.mscale) rs["mscale"] = *r.mscale;
      if (r.mscale_all_dim) rs["mscale_all_dim"] = *r.mscale_all_dim;
    }
    j["rope_scaling"] = rs;
  }
  j["max_position_embeddings"] = max_position_embeddings;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["hidden_act"] = "silu";
  if (model_type == "llama" || model_type == "qwen3") j["attention_bias"] = attention_bias;
  if (model_type == "llama") j["mlp_bias"] = mlp_bias;
  if (model_type == "mistral") j["sliding_window"] = sliding_window ? nlohmann::json(*sliding_window) : nullptr;
  if (bos_token_id) j["bos_token_id"] = *bos_token_id;
  if (eos_token_ids.size() == 1) j["eos_token_id"] = eos_token_ids[0];
  else if (!eos_token_ids.empty()) j["eos_token_id"] = eos_token_ids;
  j["torch_dtype"] = torch_dtype;
  return j;
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw UserError(source + ": not a JSON object");
  ModelConfig c;
  if (!j.contains("model_type") || !j["model_type"].is_string())
    throw UserError(source + ": missing \"model_type\"", "supported: " + join(kSupported));
  c.model_type = j["model_type"].get<std::string>();
  if (std::find(kSupported.begin(), kSupported.end(), c.model_type) == kSupported.end())
    throw UserError(source + ": unsupported model_type \"" + c.model_type + "\"",
                    "supported model types: " + join(kSupported));
  auto req = [&](const char* key) -> int64_t {
    if (!j.contains(key)) throw UserError(source + ": missing required field \"" + key + "\"");
    return get_or<int64_t>(j, key, 0, source);
  };
  c.vocab_size = req("vocab_size");
  c.hidden_size = req("hidden_size");
  c.intermediate_size = req("intermediate_size");
  c.num_hidden_layers = req("num_hidden_layers");
  c.num_attention_heads = req("num_attention_heads");
  c.num_key_value_heads = get_or<int64_t>(j, "num_key_value_heads", c.num_attention_heads, source);
  c.head_dim =
      get_or<int64_t>(j, "head_dim", c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0, source);
  c.rms_norm_eps = get_or<double>(j, "rms_norm_eps", 1e-6, source);
  c.max_position_embeddings = get_or<int64_t>(j, "max_position_embeddings", 32768, source);
  c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", false, source);
  if (c.model_type == "qwen2") {
    c.attention_bias = true;               // Qwen2 always has q/k/v biases and no o_proj bias
  } else if (c.model_type != "mistral") {  // Mistral's projections have no biases
    c.attention_bias = get_or<bool>(j, "attention_bias", false, source);
    c.o_proj_bias = c.model_type == "llama" && c.attention_bias;
  }
  parse_sliding_window(j, source, c);
  if (c.model_type == "llama") c.mlp_bias = get_or<bool>(j, "mlp_bias", false, source);
  c.qk_norm = c.model_type == "qwen3";
  parse_rope(j, source, c);
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    throw UserError(source + ": hidden_act " + j["hidden_act"].dump() + " is not supported (silu only)");
  if (j.contains("bos_token_id") && json_int_fits<int64_t>(j["bos_token_id"]))
    c.bos_token_id = j["bos_token_id"].get<int64_t>();
  if (j.contains("eos_token_id")) {
    auto& e = j["eos_token_id"];
    if (json_int_fits<int64_t>(e)) c.eos_token_ids = {e.get<int64_t>()};
    else if (e.is_array())
      for (auto& x : e)
        if (json_int_fits<int64_t>(x)) c.eos_token_ids.push_back(x.get<int64_t>());
  }
  // transformers 5 writes "dtype" where 4 wrote "torch_dtype".
  c.torch_dtype = get_or<std::string>(j, "torch_dtype", get_or<std::string>(j, "dtype", "float32", source), source);
  c.validate(source);
  return c;
}

ModelConfig ModelConfig::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError("cannot read " + path, "a model folder needs a config.json");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": not valid JSON: " + e.what());
  }
  return from_json(j, path);
}

ModelConfig named_shape(const std::string& name) {
  ModelConfig c;
  c.model_type = "qwen2";
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  c.rope_theta = 1000000.0;
  c.vocab_size = 151936;
  if (name == "qwen2.5-0.5b") {
    c.hidden_size = 896, c.num_hidden_layers = 24, c.num_attention_heads = 14;
    c.num_key_value_heads = 2, c.intermediate_size = 4864;
  } else if (name == "qwen2.5-1.5b") {
    c.hidden_size = 1536, c.num_hidden_layers = 28, c.num_attention_heads = 12;
    c.num_key_value_heads = 2, c.intermediate_size = 8960;
  } else if (name == "qwen2.5-7b") {
    c.hidden_size = 3584, c.num_hidden_layers = 28, c.num_attention_heads = 28;
    c.num_key_value_heads = 4, c.intermediate_size = 18944, c.vocab_size = 152064;
    c.tie_word_embeddings = false;
  } else if (name == "small") {
    c.hidden_size = 512, c.num_hidden_layers = 8, c.num_attention_heads = 8;
    c.num_key_value_heads = 2, c.intermediate_size = 1408;
  } else if (name == "tiny") {
    c.hidden_size = 64, c.num_hidden_layers = 2, c.num_attention_heads = 4;
    c.num_key_value_heads = 2, c.intermediate_size = 128, c.vocab_size = 256;
  } else if (name == "thin24") {  // the 0.5B's 24 layers at tiny widths: a step's host-side cost
    c.hidden_size = 64, c.num_hidden_layers = 24, c.num_attention_heads = 4;
    c.num_key_value_heads = 2, c.intermediate_size = 128, c.vocab_size = 256;
  } else {
    std::string s;
    for (auto& n : named_shapes()) s += (s.empty() ? "" : ", ") + n;
    throw UserError("unknown model shape \"" + name + "\"", "known shapes: " + s);
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  c.validate("shape " + name);
  return c;
}

std::vector<std::string> named_shapes() {
  return {"qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b", "small", "tiny", "thin24"};
}

}  // namespace brl::model
