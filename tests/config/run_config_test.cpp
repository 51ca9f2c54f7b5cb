// run.toml: TRL/PEFT-named sections, --set overrides, errors that name the key and the nearest
// one, validation of every section, key files, JSON round trips, and the printed TOML and
// Markdown reference (`bucketrl config`) reading back as the same config.
#include "config/run_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "util/ed25519.h"
#include "util/error.h"
#include "util/hash.h"
#include "../test_files.h"

using namespace brl;
using test::error_of;

namespace {
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    char t[] = "/tmp/brl_keys_XXXXXX";
    int fd = mkstemp(t);
    close(fd);
    path = t;
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
};
}  // namespace

TEST(RunConfig, TomlSectionsAndOverrides) {
  auto c = RunConfig::from_toml_string(R"(
[model]
path = "m"
[lora]
r = 16
lora_alpha = 32
target_modules = "all-linear"
use_rslora = true
[grpo]
num_generations = 4
learning_rate = 5e-5
epsilon_high = 0.28
reward_weights = [1.0, 0.5]
[task]
name = "countdown"
)",
                                       "run.toml");
  EXPECT_EQ(c.lora.r, 16);
  EXPECT_DOUBLE_EQ(c.lora.scale(), 32 / 4.0);  // rsLoRA: alpha / sqrt(16)
  EXPECT_EQ(c.lora.resolved_modules().size(), 7u);
  EXPECT_EQ(c.grpo.num_generations, 4);
  EXPECT_DOUBLE_EQ(c.grpo.eps_high(), 0.28);
  EXPECT_EQ(c.grpo.reward_weights, (std::vector<double>{1.0, 0.5}));
  EXPECT_EQ(c.task.name, "countdown");
  c.apply_overrides({"grpo.beta=0.04", "max_steps=7", "lora.target_modules=q,v"});
  EXPECT_DOUBLE_EQ(c.grpo.beta, 0.04);
  EXPECT_EQ(c.grpo.max_steps, 7);
  EXPECT_EQ(c.lora.resolved_modules(), (std::vector<std::string>{"q_proj", "v_proj"}));
  c.validate();
  auto j = c.to_json();
  EXPECT_EQ(j["grpo"]["beta"], 0.04);
  EXPECT_EQ(j["lora"]["r"], 16);
}

TEST(RunConfig, ErrorsNameTheKey) {
  EXPECT_NE(error_of([] {
              RunConfig::from_toml_string("[grpo]\nlearning_rat = 1\n", "run.toml");
            }).find("run.toml: unknown key 'learning_rat' in [grpo]"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { RunConfig::from_toml_string("[grpo]\nlearning_rat = 1\n", "run.toml"); }).find("learning_rate"),
      std::string::npos);                                             // the hint
  EXPECT_EQ(nearest_name("seq", {"token", "sequence"}), "sequence");  // an abbreviation first, though both are 5 edits
  EXPECT_EQ(nearest_name("trim", {"fedavg", "trimmed_mean", "median"}), "trimmed_mean");  // a prefix
  EXPECT_EQ(nearest_name("fedvag", {"fedavg", "trimmed_mean", "median"}), "fedavg");      // edits: 2, 9, 3
  EXPECT_NE(error_of([] { RunConfig::from_toml_string("[gpro]\n", "run.toml"); }).find("unknown section [gpro]"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              RunConfig::from_toml_string("[lora]\nr = \"x\"\n", "run.toml");
            }).find("r = \"x\" is not an integer"),
            std::string::npos);
  // 2^32 + 16 wrapped to r = 16 through get<int>(); now refused with the range.
  EXPECT_NE(error_of([] {
              RunConfig::from_toml_string("[lora]\nr = 4294967312\n", "run.toml");
            }).find("r = 4294967312 is not an integer in [-2^31, 2^31)"),
            std::string::npos);
  EXPECT_NE(error_of([] { RunConfig::from_toml_string("[lora\n", "bad.toml"); }).find("bad.toml:1"), std::string::npos);
  RunConfig c;
  EXPECT_NE(error_of([&] { c.apply_overrides({"seed=3"}); }).find("in several sections"), std::string::npos);
  c.lora.target_modules = {"qq_proj"};
  EXPECT_NE(error_of([&] { c.validate(); }).find("unknown module 'qq_proj'"), std::string::npos);
  c = RunConfig();
  c.lora.r = 0;
  EXPECT_NE(error_of([&] { c.validate(); }).find("r (0) must be >= 1"), std::string::npos);
  // Adaptive entropy control: bounds in order, a step that is not negative.
  c = RunConfig();
  c.apply_overrides({"grpo.use_adaptive_entropy=true", "grpo.entropy_coef_min=0.5", "grpo.entropy_coef_max=0.1"});
  EXPECT_NE(error_of([&] { c.validate(); }).find("entropy_coef_min (0.5) must be <= entropy_coef_max (0.1)"),
            std::string::npos);
  c.apply_overrides({"grpo.entropy_coef_min=0", "grpo.entropy_coef_delta=-0.01"});
  EXPECT_NE(error_of([&] { c.validate(); }).find("entropy_coef_delta (-0.01) must be >= 0"), std::string::npos);
  c.apply_overrides({"grpo.entropy_coef_delta=0.01"});
  EXPECT_NO_THROW(c.validate());
  // Sampling: min_p a fraction, the repetition penalty positive.
  c.apply_overrides({"grpo.min_p=1.5"});
  EXPECT_NE(error_of([&] { c.validate(); }).find("min_p (1.5) must be in [0, 1]"), std::string::npos);
  c.apply_overrides({"grpo.min_p=0.1", "grpo.repetition_penalty=0"});
  EXPECT_NE(error_of([&] { c.validate(); }).find("repetition_penalty (0) must be a number > 0"), std::string::npos);
  c.apply_overrides({"grpo.repetition_penalty=1.1"});
  EXPECT_NO_THROW(c.validate());
}

// TRL's GRPOConfig.__post_init__: steps_per_generation defaults to gradient_accumulation_steps,
// generation_batch_size = per_device_train_batch_size x steps_per_generation; one or the other.
TEST(RunConfig, GenerationBatchResolvesAsTrl) {
  RunConfig c;
  c.apply_overrides(
      {"grpo.per_device_train_batch_size=4", "grpo.num_generations=4", "grpo.gradient_accumulation_steps=2"});
  EXPECT_EQ(c.grpo.micro_batches_per_generation(), 2);
  EXPECT_EQ(c.grpo.prompts_per_generation(), 2);
  c.apply_overrides({"grpo.steps_per_generation=3"});
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.grpo.completions_per_generation(), 12);
  EXPECT_EQ(c.grpo.prompts_per_generation(), 3);
  c.apply_overrides({"grpo.generation_batch_size=16"});
  EXPECT_TRUE(
      has(error_of([&] { c.validate(); }), "steps_per_generation (3) and generation_batch_size (16) are both set"));
  c = RunConfig();
  c.apply_overrides({"grpo.per_device_train_batch_size=4", "grpo.num_generations=4", "grpo.generation_batch_size=16"});
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.grpo.micro_batches_per_generation(), 4);
  c.apply_overrides({"grpo.generation_batch_size=6"});
  EXPECT_TRUE(has(error_of([&] { c.validate(); }),
                  "generation_batch_size (6) must be a positive multiple of per_device_train_batch_size (4)"));
  c.apply_overrides({"grpo.per_device_train_batch_size=2"});
  EXPECT_TRUE(
      has(error_of([&] { c.validate(); }), "generation_batch_size (6) must be divisible by num_generations (4)"));
  // A generation batch of whole groups may be cut into micro-batches that are not.
  c.apply_overrides({"grpo.generation_batch_size=8"});
  EXPECT_NO_THROW(c.validate());
  c = RunConfig();
  c.apply_overrides({"grpo.steps_per_generation=0"});
  EXPECT_TRUE(has(error_of([&] { c.validate(); }), "steps_per_generation (0) must be >= 1"));
}

// TRL's generation_kwargs: the keys with a [grpo] knob set it and take precedence over it (TRL
// updates its GenerationConfig with them last); the others are refused by name.
TEST(RunConfig, GenerationKwargsSetTheSamplingKnobs) {
  auto c = RunConfig::from_toml_string(
      "[grpo]\ntemperature = 1.0\ngeneration_kwargs = {top_k = 50, temperature = 0.7, max_new_tokens = 64, "
      "do_sample = true}\n",
      "run.toml");
  EXPECT_EQ(c.grpo.top_k, 50);
  EXPECT_DOUBLE_EQ(c.grpo.temperature, 0.7);
  EXPECT_EQ(c.grpo.max_completion_length, 64);
  c.apply_overrides({"grpo.temperature=1.0"});
  EXPECT_DOUBLE_EQ(c.grpo.temperature, 0.7) << "generation_kwargs take precedence";
  // The resolved config reads back the same (run.json).
  RunConfig back;
  back.apply_json(c.to_json(), "run.json");
  EXPECT_DOUBLE_EQ(back.grpo.temperature, 0.7);
  EXPECT_EQ(back.grpo.top_k, 50);
  RunConfig n;
  n.apply_json({{"grpo", {{"top_k", 20}, {"generation_kwargs", {{"top_k", 0}, {"min_p", 0.05}}}}}}, "run.json");
  EXPECT_EQ(n.grpo.top_k, 0);
  EXPECT_EQ(n.grpo.min_p, 0.05);
  std::string e =
      error_of([] { RunConfig::from_toml_string("[grpo]\ngeneration_kwargs = {num_beams = 4}\n", "run.toml"); });
  EXPECT_TRUE(has(e, "run.toml: grpo.generation_kwargs.num_beams = 4: not a setting")) << e;
  e = error_of([] { RunConfig::from_toml_string("[grpo]\ngeneration_kwargs = {do_sample = false}\n", "run.toml"); });
  EXPECT_TRUE(has(e, "GRPO samples its completions")) << e;
  e = error_of([&] { c.apply_overrides({R"(grpo.generation_kwargs={"top_p": "high"})"}); });
  EXPECT_TRUE(has(e, "grpo.generation_kwargs.top_p = \"high\" is not a number")) << e;
}

TEST(RunConfig, NumGenerationsEvalBoundsTheEvaluatorsSamples) {
  RunConfig c;
  c.apply_overrides({"grpo.num_generations_eval=4", "train.eval_pass_samples=3"});
  EXPECT_TRUE(has(error_of([&] { c.validate(); }), "eval_pass_samples = 3 is not valid with pass@k for k = 4"));
  c.apply_overrides({"train.eval_pass_samples=6"});
  EXPECT_NO_THROW(c.validate());
  c.apply_overrides({"grpo.num_generations_eval=0", "train.eval_pass_samples=0"});
  EXPECT_TRUE(has(error_of([&] { c.validate(); }), "num_generations_eval (0) must be >= 1"));
}

// A config carried over from TRL: its keys without a counterpart here are refused with the
// reason (TrainingArguments' common ones too), and a knob TRL keeps in GRPOConfig but bucketrl in
// another section names that section.
TEST(RunConfig, TrlKeysWithoutACounterpartSayWhy) {
  auto from = [](const std::string& toml) { return error_of([&] { RunConfig::from_toml_string(toml, "run.toml"); }); };
  std::string e = from("[grpo]\nuse_vllm = true\n");
  EXPECT_TRUE(has(e, "run.toml: [grpo] use_vllm is not a bucketrl setting: bucketrl samples with its own decoder"))
      << e;
  EXPECT_TRUE(has(e, "remove it")) << e;
  e = from("[grpo]\nvllm_gpu_memory_utilization = 0.3\n");
  EXPECT_TRUE(has(e, "vllm_gpu_memory_utilization is not a bucketrl setting")) << e;
  // TRL's and TrainingArguments' knobs a GRPOConfig carries say where their job is done.
  const std::pair<const char*, const char*> refused[] = {
      {"bf16 = true", "bf16 is not a bucketrl setting: the weights' dtype is [model] dtype"},
      {"report_to = \"wandb\"", "metrics.jsonl"},
      {"hub_model_id = \"me/adapter\"", "there is no hub"},
      {"warmup_steps = 10", "set warmup_ratio"},
      {"sync_ref_model = true", "the reference is the base with the adapter off"}};
  for (const auto& [line, why] : refused) {
    e = from(std::string("[grpo]\n") + line + "\n");
    EXPECT_TRUE(has(e, why)) << e;
  }
  e = from("[grpo]\nlogging_steps = 5\n");
  EXPECT_TRUE(has(e, "run.toml: logging_steps is not in [grpo] but in [train]")) << e;
  EXPECT_TRUE(has(e, "move it to [train]")) << e;
  e = from("[grpo]\nlearning_rat = 1e-5\n");  // a typo still gets the nearest name
  EXPECT_TRUE(has(e, "did you mean 'learning_rate'")) << e;
  RunConfig c;
  e = error_of([&] { c.apply_overrides({"use_vllm=true"}); });
  EXPECT_TRUE(has(e, "--set use_vllm=true: use_vllm is not a bucketrl setting")) << e;
  e = error_of([&] { c.apply_overrides({"grpo.vllm_mode=colocate"}); });
  EXPECT_TRUE(has(e, "[grpo] vllm_mode is not a bucketrl setting")) << e;
}

// TRL's vllm_importance_sampling_* keys are read (bucketrl's decoder in vLLM's place): TOML's inf
// and null (--set) mean no upper bound, which run.json keeps; bad bounds and vespo with a
// per-sequence mode are refused with the fix; TRL's deprecated _cap names its successor.
TEST(RunConfig, SamplerCorrectionKeysAsTrl) {
  RunConfig d;
  EXPECT_FALSE(d.grpo.vllm_importance_sampling_correction);
  EXPECT_EQ(d.grpo.vllm_importance_sampling_mode, grpo::SamplingCorrectionMode::sequence_mask);
  EXPECT_EQ(d.grpo.vllm_importance_sampling_clip_max, 3.0);  // TRL's defaults
  EXPECT_FALSE(d.grpo.vllm_importance_sampling_clip_min);
  auto c = RunConfig::from_toml_string(
      "[grpo]\nvllm_importance_sampling_correction = true\nvllm_importance_sampling_mode = \"token_truncate\"\n"
      "vllm_importance_sampling_clip_max = inf\nvllm_importance_sampling_clip_min = 0.5\n",
      "run.toml");
  EXPECT_NO_THROW(c.validate());
  EXPECT_TRUE(c.grpo.vllm_importance_sampling_correction);
  EXPECT_EQ(c.grpo.vllm_importance_sampling_mode, grpo::SamplingCorrectionMode::token_truncate);
  EXPECT_EQ(c.grpo.vllm_importance_sampling_clip_min, 0.5);
  RunConfig back;
  back.apply_json(nlohmann::json::parse(c.to_json().dump()), "run.json");
  EXPECT_NO_THROW(back.validate());
  EXPECT_FALSE(back.grpo.vllm_importance_sampling_clip_max.value_or(INFINITY) < INFINITY) << "still unbounded";
  EXPECT_EQ(back.grpo.vllm_importance_sampling_mode, grpo::SamplingCorrectionMode::token_truncate);
  RunConfig n;
  n.apply_overrides({"grpo.vllm_importance_sampling_clip_max=null"});
  EXPECT_FALSE(n.grpo.vllm_importance_sampling_clip_max);
  n.apply_overrides({"grpo.vllm_importance_sampling_clip_max=0"});
  std::string e = error_of([&] { n.validate(); });
  EXPECT_TRUE(has(e, "vllm_importance_sampling_clip_max (0) must be > 0")) << e;
  n.apply_overrides({"grpo.vllm_importance_sampling_clip_max=2", "grpo.vllm_importance_sampling_clip_min=2.5"});
  e = error_of([&] { n.validate(); });
  EXPECT_TRUE(has(e, "vllm_importance_sampling_clip_min (2.5) must be in [0, vllm_importance_sampling_clip_max (2)]"))
      << e;
  RunConfig v;
  v.apply_overrides({"grpo.loss_type=vespo", "grpo.vllm_importance_sampling_correction=true"});
  e = error_of([&] { v.validate(); });
  EXPECT_TRUE(has(e, "must be 'token_truncate' or 'token_mask', not 'sequence_mask'")) << e;
  v.apply_overrides({"grpo.vllm_importance_sampling_mode=token_mask"});
  EXPECT_NO_THROW(v.validate());
  e = error_of([] { RunConfig::from_toml_string("[grpo]\nvllm_importance_sampling_cap = 2.0\n", "run.toml"); });
  EXPECT_TRUE(has(e, "renamed it vllm_importance_sampling_clip_max")) << e;
  e = error_of([] { RunConfig::from_toml_string("[grpo]\nvllm_importance_sampling_mode = \"seq\"\n", "run.toml"); });
  EXPECT_TRUE(has(e, "token_truncate")) << e;
}

// TRL's pad_to_multiple_of: an integer, or its spellings of None ("auto": no padding off
// Neuron; "none", null), which leave it unset; below 1 refused.
TEST(RunConfig, PadToMultipleOfAsTrl) {
  EXPECT_FALSE(RunConfig().grpo.pad_to_multiple_of);
  EXPECT_EQ(RunConfig::from_toml_string("[grpo]\npad_to_multiple_of = 64\n", "run.toml").grpo.pad_to_multiple_of, 64);
  for (const char* unset : {"\"auto\"", "\"none\""}) {
    SCOPED_TRACE(unset);
    auto c = RunConfig::from_toml_string(std::string("[grpo]\npad_to_multiple_of = ") + unset + "\n", "run.toml");
    EXPECT_FALSE(c.grpo.pad_to_multiple_of);
  }
  RunConfig c;
  c.apply_overrides({"grpo.pad_to_multiple_of=8"});
  EXPECT_EQ(c.grpo.pad_to_multiple_of, 8);
  c.apply_overrides({"grpo.pad_to_multiple_of=auto"});
  EXPECT_FALSE(c.grpo.pad_to_multiple_of);
  c.apply_overrides({"grpo.pad_to_multiple_of=0"});
  std::string e = error_of([&] { c.validate(); });
  EXPECT_TRUE(has(e, "pad_to_multiple_of (0) must be >= 1")) << e;
  e = error_of([] { RunConfig::from_toml_string("[grpo]\npad_to_multiple_of = \"big\"\n", "run.toml"); });
  EXPECT_TRUE(has(e, "\"auto\" or null")) << e;
}

TEST(RunConfig, SyncModeIsAsyncOrABarrierOfKSteps) {
  RunConfig c;
  EXPECT_EQ(c.sync.mode, SyncMode::async);
  EXPECT_NO_THROW(c.validate());
  // Names outside the enum's are refused where they are read (a typo never reaches the run).
  EXPECT_NE(error_of([&] {
              c.apply_overrides({"sync.mode=barrier"});
            }).find("[sync] mode = \"barrier\": must be async or sync"),
            std::string::npos);
  c.apply_overrides({"sync.mode=sync"});
  // A barrier round is K steps: the time trigger alone cannot define one.
  EXPECT_NE(error_of([&] { c.validate(); }).find("sync_steps = 0: must be >= 1 with mode = \"sync\""),
            std::string::npos);
  c.apply_overrides({"sync.sync_steps=4"});
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(RunConfig::from_toml_string("[sync]\nmode = \"sync\"\nsync_steps = 2\n", "run.toml").sync.mode,
            SyncMode::sync);
}

// [security] allowed_keys / allowed_keys_file and the [aggregation] norm bounds: validation
// that quotes the value, and the key file `bucketrl init` reads (comments, PEM blocks,
// duplicates, errors naming file and line).
TEST(SecurityConfig, TomlAndValidation) {
  auto a = ed25519::SigningKey::generate(), b = ed25519::SigningKey::generate();
  std::string ka = ed25519::format_public_key(a.public_key()), kb = ed25519::format_public_key(b.public_key());
  auto c = RunConfig::from_toml_string("[security]\nallowed_keys = [\"" + ka + "\", \"" + kb + "\"]\n", "run.toml");
  c.validate();
  EXPECT_EQ(c.security.public_keys(), (std::set<std::string>{a.public_key(), b.public_key()}));
  EXPECT_EQ(c.to_json()["security"]["allowed_keys"][1], kb);
  EXPECT_TRUE(RunConfig().security.public_keys().empty());  // default: an unsigned run

  c.security.allowed_keys.push_back("ed25519:AAAA");
  std::string e = error_of([&] { c.validate(); });
  EXPECT_TRUE(has(e, "[security] allowed_keys[2] \"ed25519:AAAA\"")) << e;
  EXPECT_TRUE(has(e, "NAME.pub")) << e;
  // A private key pasted into the list is not echoed back.
  c.security.allowed_keys.back() =
      "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIAbcdefghijklmnopqrstuvwxyz0123456789\n-----END PRIVATE "
      "KEY-----";
  e = error_of([&] { c.validate(); });
  EXPECT_TRUE(has(e, "<a private key>")) << e;
  EXPECT_FALSE(has(e, "MC4CAQ")) << e;
}

TEST(AggregationConfig, NormBoundsValidation) {
  auto msg = [](const std::function<void(AggregationConfig&)>& edit) {
    AggregationConfig c;
    edit(c);
    return error_of([&] { c.validate(); });
  };
  EXPECT_EQ(
      msg([](AggregationConfig& c) { c.max_update_norm = 5, c.max_update_norm_ratio = 10, c.update_norm_window = 8; }),
      "");
  std::string e = msg([](AggregationConfig& c) { c.max_update_norm = -1; });
  EXPECT_TRUE(has(e, "[aggregation] max_update_norm = -1")) << e;
  e = msg([](AggregationConfig& c) { c.max_update_norm_ratio = 0.5; });
  EXPECT_TRUE(has(e, "[aggregation] max_update_norm_ratio = 0.5")) << e;
  EXPECT_TRUE(has(e, ">= 1")) << e;
  e = msg([](AggregationConfig& c) { c.update_norm_window = 1; });
  EXPECT_TRUE(has(e, "[aggregation] update_norm_window = 1")) << e;
  auto c =
      RunConfig::from_toml_string("[aggregation]\nmax_update_norm = 2.5\nmax_update_norm_ratio = 10\n", "run.toml");
  EXPECT_EQ(c.aggregation.max_update_norm, 2.5);
  EXPECT_EQ(c.aggregation.max_update_norm_ratio, 10);
}

TEST(AggregationConfig, PublishDtype) {
  auto c = RunConfig::from_toml_string("[aggregation]\npublish_dtype = \"bfloat16\"\n", "run.toml");
  EXPECT_TRUE(c.aggregation.publish_bf16());
  EXPECT_FALSE(RunConfig{}.aggregation.publish_bf16());
  std::string e = error_of([&] { c.apply_overrides({"aggregation.publish_dtype=bf16"}); });
  EXPECT_TRUE(has(e, "[aggregation] publish_dtype = \"bf16\"")) << e;
  EXPECT_TRUE(has(e, "float32 or bfloat16")) << e;
}

TEST(SecurityConfig, KeyFileIsReadIntoTheList) {
  auto a = ed25519::SigningKey::generate(), b = ed25519::SigningKey::generate(), c = ed25519::SigningKey::generate(),
       d = ed25519::SigningKey::generate();
  std::string ka = ed25519::format_public_key(a.public_key()), kb = ed25519::format_public_key(b.public_key());
  // c's key as 64 hex digits; d's as PEM, built by hand: the fixed SubjectPublicKeyInfo
  // prefix of an Ed25519 key (RFC 8410) and the raw key; b's again (a duplicate); comments.
  std::string hex_c = to_hex(reinterpret_cast<const unsigned char*>(c.public_key().data()), c.public_key().size());
  std::string pem_d = "-----BEGIN PUBLIC KEY-----\n" +
                      base64_encode(from_hex("302a300506032b6570032100").value() + d.public_key()) +
                      "\n-----END PUBLIC KEY-----\n";
  TempFile f("# workers of team A\n" + kb + "  # worker-b\n\n" + "ed25519:" + hex_c + "\n" + pem_d + kb + "\n");
  SecurityConfig s;
  s.allowed_keys = {ka};
  s.allowed_keys_file = f.path;
  s.resolve_key_file();
  EXPECT_TRUE(s.allowed_keys_file.empty());
  EXPECT_EQ(s.allowed_keys, (std::vector<std::string>{ka, kb, ed25519::format_public_key(c.public_key()),
                                                      ed25519::format_public_key(d.public_key())}));

  TempFile bad("# ok\n" + ka + "\nnot-a-key\n");
  SecurityConfig t;
  t.allowed_keys_file = bad.path;
  std::string e = error_of([&] { t.resolve_key_file(); });
  EXPECT_TRUE(has(e, bad.path + ":3")) << e;

  SecurityConfig u;
  u.allowed_keys_file = "/nonexistent/keys";
  e = error_of([&] { u.resolve_key_file(); });
  EXPECT_TRUE(has(e, "allowed_keys_file = \"/nonexistent/keys\"")) << e;
}

// A config printed as JSON (`bucketrl demo --print-config`) reads back as the same config; a
// .toml name still means TOML; a broken JSON file is named in the error.
TEST(RunConfig, JsonFileRoundTrip) {
  test::TempDir dir;
  RunConfig c;
  c.task.max_operand = 999;
  c.lora.target_modules = {"all-linear"};
  c.grpo.learning_rate = 3e-4;
  c.grpo.delta = 2.5;
  test::write_file(dir.str("run.json"), c.to_json().dump(2));
  RunConfig back = RunConfig::from_file(dir.str("run.json"));
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(back.task.max_operand, 999);
  test::write_file(dir.str("run.toml"), "[grpo]\nlearning_rate = 0.5\n");
  EXPECT_DOUBLE_EQ(RunConfig::from_file(dir.str("run.toml")).grpo.learning_rate, 0.5);
  test::write_file(dir.str("bad.json"), "{\"grpo\": ");
  try {
    RunConfig::from_file(dir.str("bad.json"));
    FAIL() << "accepted a broken file";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
  }
}

// `bucketrl config` prints every key as TOML; the text reads back as the same config, defaults
// and changed values alike (unset optional keys are commented out, and stay unset).
// grpo.chat_template_kwargs (TRL's dict knob): a TOML table, a JSON object on the command
// line, or a string holding one (TRL's CLI form); anything else, or a null TOML could not
// print, is refused naming the key.
TEST(RunConfig, ChatTemplateKwargsIsATable) {
  const nlohmann::json want = {{"enable_thinking", false}, {"style", "short"}};
  EXPECT_EQ(RunConfig().grpo.chat_template_kwargs, nlohmann::json::object());
  EXPECT_EQ(RunConfig::from_toml_string(
                "[grpo]\nchat_template_kwargs = { enable_thinking = false, style = \"short\" }\n", "run.toml")
                .grpo.chat_template_kwargs,
            want);
  EXPECT_EQ(RunConfig::from_toml_string("[grpo.chat_template_kwargs]\nenable_thinking = false\nstyle = \"short\"\n",
                                        "run.toml")
                .grpo.chat_template_kwargs,
            want);
  RunConfig c;
  c.apply_overrides({R"(chat_template_kwargs={"enable_thinking": false, "style": "short"})"});
  EXPECT_EQ(c.grpo.chat_template_kwargs, want);
  c.apply_json({{"grpo", {{"chat_template_kwargs", want.dump()}}}}, "run.json");
  EXPECT_EQ(c.grpo.chat_template_kwargs, want);
  const std::string not_table = error_of([&] { c.apply_overrides({"chat_template_kwargs=[1]"}); });
  EXPECT_TRUE(has(not_table, "chat_template_kwargs = [1] is not a table")) << not_table;
  const std::string null = error_of([&] { c.apply_overrides({R"(chat_template_kwargs={"a": {"b": null}})"}); });
  EXPECT_TRUE(has(null, "chat_template_kwargs.a.b is null")) << null;
  EXPECT_EQ(c.grpo.chat_template_kwargs, want) << "a refused value changes nothing";
}

TEST(RunConfig, TomlPrintReadsBack) {
  for (bool changed : {false, true}) {
    RunConfig c;
    if (changed) {
      c.model.path = "base \"quoted\" \\ dir";
      c.lora.target_modules = {"q_proj", "v_proj"};
      c.grpo.epsilon_high = 0.28;
      c.grpo.reward_weights = {1.0, 0.5};
      c.grpo.learning_rate = 1e-8;
      c.aggregation.mode = kAggregationModes.value("median");
      c.grpo.chat_template_kwargs = {{"enable_thinking", false},
                                     {"odd key", "x\"y"},
                                     {"nested", {{"a", {1, 2.5}}, {"b", nlohmann::json::object()}}}};
    }
    const std::string text = c.to_toml();
    RunConfig back = RunConfig::from_toml_string(text, "printed");
    EXPECT_EQ(back.to_json(), c.to_json()) << text;
    // One line per key, set or commented out, under its section's header.
    size_t keys = 0, lines = 0;
    const auto all = c.to_json();
    for (auto& [section, body] : all.items()) keys += body.size();
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines += !line.empty() && line[0] != '[';
    EXPECT_EQ(lines, keys) << text;
    EXPECT_EQ(changed, !has(text, "# epsilon_high =")) << text;
  }
}

// The reference (docs/configuration.md) has one row per key, four cells each: a "|" inside a
// value or a meaning is escaped, or the row would split.
TEST(RunConfig, ReferenceHasARowPerKey) {
  RunConfig c;
  const std::string md = c.reference_markdown();
  const auto all = c.to_json();
  for (auto& [section, body] : all.items()) {
    EXPECT_TRUE(has(md, "## [" + section + "]")) << section;
    for (auto& [key, v] : body.items()) {
      const auto at = md.find("\n| `" + key + "` |");
      ASSERT_NE(at, std::string::npos) << section << "." << key;
      const std::string row = md.substr(at + 1, md.find('\n', at + 1) - at - 1);
      int cells = 0;
      for (size_t i = 0; i < row.size(); ++i) cells += row[i] == '|' && (i == 0 || row[i - 1] != '\\');
      EXPECT_EQ(cells, 5) << row;
    }
  }
  EXPECT_TRUE(has(md, "| `loss_type` | grpo \\| bnpo")) << md;
  EXPECT_TRUE(has(md, "| `epsilon_high` | number (optional) | unset |")) << md;
}

// train.eval_pass_samples: 0 (= k) or n >= k, k being grpo.num_generations when eval_pass_k is -1.
TEST(RunConfig, EvalPassSamplesAtLeastK) {
  RunConfig c;
  c.grpo.num_generations = 8;
  c.train.eval_pass_samples = 16;
  EXPECT_NO_THROW(c.validate());
  c.train.eval_pass_samples = 4;
  try {
    c.validate();
    FAIL() << "accepted 4 samples for pass@8";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("train.eval_pass_samples = 4"), std::string::npos) << e.what();
  }
  c.train.eval_pass_k = 0;  // pass@k off: no samples to take
  c.train.eval_pass_samples = 16;
  EXPECT_THROW(c.validate(), UserError);
  c.train.eval_pass_samples = 0;
  EXPECT_NO_THROW(c.validate());
}
