// Batched sampling with the KV cache: P prompts x G completions. Each prompt is prefilled
// once (left-padded together), its cache rows replicated G times, then all rows decode in
// lock step; rows that finish (stop token or length) are dropped from the batch. Each
// completion draws from its own RNG stream derived from (seed, prompt, sample), so a run is
// repeatable for a seed. Works on token ids only (no tokenizer dependency).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "generate/sampler.h"

namespace brl::model {
class Model;
}

namespace brl::gen {

struct GenerateOptions {
  int64_t num_generations = 1;  // G completions per prompt
  int64_t max_new_tokens = 128;
  double temperature = 1.0;             // 0: greedy
  int64_t top_k = 0;                    // 0: off
  double top_p = 1.0;                   // 1: off
  double min_p = 0.0;                   // 0: off
  double repetition_penalty = 1.0;      // 1: off; over the prompt's and the completion's tokens
  std::vector<int64_t> stop_token_ids;  // eos etc.; the stop token is kept in the output
  uint64_t seed = 0;
  // The index of prompts[0] in a larger batch generated in parts: completions name their
  // prompt by it and draw from that prompt's streams, so the parts give what one call would.
  int64_t first_prompt_index = 0;
  // How decoding runs. dynamic: finished rows leave the batch (the CPU's fastest). static: every
  // row decodes for max_new_tokens over a cache of fixed shape, sampling where the logits are,
  // so that a step has no host synchronisation (the GPU's way). auto: static on CUDA.
  enum class Decode { kAuto, kDynamic, kStatic } decode = Decode::kAuto;
  // Static decoding on CUDA: each step captured once as a CUDA graph and replayed (one launch
  // per token instead of hundreds); false: the same steps run eagerly.
  bool cuda_graphs = true;
  void validate() const;  // UserError quoting bad values
};

enum class FinishReason { kStop, kLength };
const char* finish_reason_name(FinishReason r);

struct Completion {
  int64_t prompt_index = 0;
  int64_t sample_index = 0;     // 0..G-1 within its prompt
  std::vector<int32_t> tokens;  // generated ids (including the stop token, if any)
  // log_softmax(logits / T)[token] (T = 1 when greedy), before the repetition penalty, top-k,
  // top-p and min-p: the model's own distribution, as the trainer computes it
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::kLength;
  // Per token: 1 sampled by the model, 0 inserted between its turns (tool results, by
  // grpo::run_tool_loop: TRL's tool_mask). Empty: every token sampled.
  std::vector<uint8_t> tool_mask;
};

// Completions in order prompt 0 samples 0..G-1, prompt 1 ... . Prompts must be non-empty.
// Runs on the model's device. Both decode modes draw the same uniforms per completion, so they
// give the same tokens up to floating-point ties.
std::vector<Completion> generate(const model::Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerateOptions& opts);

}  // namespace brl::gen
