// train_step_bench: throughput of the GRPO+LoRA training step (grpo::PolicyOptimizer, the
// code every worker runs after generation) on a named shape with random weights, and the
// fraction of this machine's F32 GEMM ceiling (a 2048^2 matrix product, measured in the same
// run) that the step's FLOPs reach. bench/train_step_torch.py is the same step in PyTorch;
// bench/train_step_compare.sh runs both side by side. Reports medians.
//   train_step_bench [--shape demo|small|thin24|qwen2.5-0.5b|...] [--batch N] [--prompt Lp]
//                    [--completion Lc] [--r 16] [--repeats 3] [--threads N] [--json]
//                    [--profile TRACE.json] [--device cpu|cuda] [--dtype f32|bf16]
//                    [--gradient-checkpointing] [--entropy-coef C] [--adaptive-entropy TARGET]
//                    [--micro-batch M] [--varied-lengths] [--cast-lm-head-fp32] [--sampling-correction]
// --cast-lm-head-fp32, --sampling-correction: grpo.cast_lm_head_to_fp32 and
// grpo.vllm_importance_sampling_correction (on-policy: no extra pass; the weights' cost).
// --varied-lengths: prompts of Lp/2..Lp and completions of 1..Lc tokens (uniform, seeded), cut
// into micro-batches of M rows as a shuffled generation batch is; the step is timed with each
// micro-batch forwarding its own window (as the trainer does), over the whole width (as before
// windows), and with the rows sorted by length (grpo.group_by_length), in turns.
// On cuda the ceiling is the GPU's matrix product in the step's dtype (8192^2), and the base is
// moved there in that dtype with the adapter in f32. --profile writes a Kineto trace of one more
// step (host ops; kernels and copies on a GPU): bench/trace_summary.py sets it beside PEFT's.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "grpo/pretrain.h"
#include "grpo/trainer.h"
#include "model/device.h"
#include "model/loader.h"
#include "model/threads.h"
#include "bench_adapter.h"
#include "bench_util.h"

using namespace brl;

namespace {

// FLOPs of one step (forward, backward through the frozen base to the adapter, as computed:
// full T x T attention scores, the LM head on completion positions only). The base's weight
// gradients are never formed, so its backward costs one product per forward one (dX); the
// adapter's costs two (dX and dW); attention's two (both operands are activations).
double step_flops(const model::ModelConfig& c, int64_t r, int64_t N, int64_t Lp, int64_t Lc) {
  const double S = static_cast<double>(Lp + Lc), T = static_cast<double>(N) * S;
  const double h = c.hidden_size, qo = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim,
               I = c.intermediate_size, L = c.num_hidden_layers;
  const double linear = h * qo + 2 * h * kv + qo * h + 3 * h * I;                        // weights per layer
  const double lora = r * ((h + qo) + 2 * (h + kv) + (qo + h) + 2 * (h + I) + (I + h));  // A and B per layer
  const double f_linear = 2 * linear * L * T, f_lora = 2 * lora * L * T;
  const double f_attn = 4 * S * S * qo * L * static_cast<double>(N);
  const double f_head = 2 * h * static_cast<double>(c.vocab_size) * static_cast<double>(N * Lc);
  return 2 * f_linear + 3 * f_lora + 3 * f_attn + 2 * f_head;
}
}  // namespace

int main(int argc, char** argv) {
  std::string shape = "small";
  int64_t batch = -1, prompt = -1, completion = -1, r = 16, repeats = 3;
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  int64_t micro = -1;
  bool json = false, ckpt = false, varied = false, f32_head = false, correction = false;
  double entropy_coef = 0;  // > 0: TRL's entropy bonus (the LM head's entropy with its gradient)
  // Adaptive entropy control with this entropy_target: -1 measures the entropy every step and
  // never applies the bonus (the detached entropy's cost); a large target applies it from step 2.
  std::optional<double> adaptive_target;
  std::string profile;  // a chrome trace of one more step (--profile FILE)
  std::string device = "cpu", dtype = "f32";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") {
      json = true;
      continue;
    }
    if (a == "--gradient-checkpointing") {
      ckpt = true;
      continue;
    }
    if (a == "--varied-lengths") {
      varied = true;
      continue;
    }
    if (a == "--cast-lm-head-fp32") {  // grpo.cast_lm_head_to_fp32
      f32_head = true;
      continue;
    }
    if (a == "--sampling-correction") {  // grpo.vllm_importance_sampling_correction
      correction = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return 2;
    }
    std::string v = argv[++i];
    if (a == "--shape") shape = v;
    else if (a == "--batch") batch = std::stoll(v);
    else if (a == "--prompt") prompt = std::stoll(v);
    else if (a == "--completion") completion = std::stoll(v);
    else if (a == "--r") r = std::stoll(v);
    else if (a == "--micro-batch") micro = std::stoll(v);
    else if (a == "--repeats") repeats = std::max<int64_t>(1, std::stoll(v));
    else if (a == "--threads") threads = std::stoi(v);
    else if (a == "--profile") profile = v;
    else if (a == "--device") device = v;
    else if (a == "--dtype") dtype = v;
    else if (a == "--entropy-coef") entropy_coef = std::stod(v);
    else if (a == "--adaptive-entropy") adaptive_target = std::stod(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  threads = brl::model::set_compute_threads(threads);
  // The demo's GRPO batch (8 prompts x G 8, ~12 prompt and 4 completion tokens); the others as
  // the PyTorch anchor in shared/notes/performance.md (8 x 192 tokens).
  const bool demo = shape == "demo";
  auto cfg = demo ? grpo::demo_model_config(grpo::PretrainOptions{}) : model::named_shape(shape);
  if (batch < 0) batch = demo ? 64 : 8;
  if (prompt < 0) prompt = demo ? 12 : 64;
  if (completion < 0) completion = demo ? 4 : 128;

  const auto dt = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  const at::Device dev = device == "cuda" ? at::Device(at::kCUDA) : at::Device(at::kCPU);
  // The GEMM ceiling, as the environment is set (OPENBLAS_CORETYPE and threads), or the GPU's.
  const int64_t n = dev.is_cuda() ? 8192 : 2048;
  auto a = at::randn({n, n}).to(dt).to(dev), b = at::randn({n, n}).to(dt).to(dev);
  auto sync = [&] {
    if (dev.is_cuda()) (void)a.sum().item<double>();
  };
  std::vector<double> gemm;
  (void)at::mm(a, b);
  for (int i = 0; i < 5; ++i)
    gemm.push_back(bench::seconds_of([&] {
      (void)at::mm(a, b);
      sync();
    }));
  const double ceiling = 2.0 * n * n * n / bench::median(gemm);

  std::fprintf(stderr, "building random %s (%.0fM params), LoRA r=%lld on all linear modules...\n", shape.c_str(),
               cfg.num_parameters() / 1e6, static_cast<long long>(r));
  auto m = model::random_model(cfg, 1, 0.02, dt, dev);
  bench::attach_random_adapter(m, r);  // on the model's device
  if (f32_head) m.cast_lm_head_to_fp32();
  grpo::GrpoConfig g;
  g.num_generations = 8;
  g.max_completion_length = static_cast<int>(completion);
  // One micro-batch by default, as the PyTorch side (smaller after running out of memory,
  // auto_find_batch_size: the output says so).
  g.per_device_train_batch_size = static_cast<int>(micro > 0 ? std::min(micro, batch) : batch);
  g.beta = 0;
  g.num_iterations = 1;
  g.loss_type = grpo::LossType::grpo;
  g.max_grad_norm = 1.0;
  g.gradient_checkpointing = ckpt;
  g.entropy_coef = entropy_coef;
  g.vllm_importance_sampling_correction = correction;
  if (adaptive_target) g.use_adaptive_entropy = true, g.entropy_target = *adaptive_target;
  grpo::PolicyOptimizer po(m, g);

  grpo::PolicyBatch pb;
  pb.prompt_len = prompt;
  pb.completion_len = completion;
  at::manual_seed(3);
  pb.ids = at::randint(0, cfg.vocab_size, {batch, prompt + completion}, at::kLong);
  pb.attn = at::ones({batch, prompt + completion}, at::kBool);
  pb.pos = model::positions_from_mask(pb.attn);
  pb.completion_mask = at::ones({batch, completion}, at::kFloat);
  pb.advantages = at::randn({batch}, at::kDouble);
  if (varied) {  // left-padded prompts, right-padded completions, as policy_batch lays them out
    std::mt19937_64 rng(7);
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t p = std::uniform_int_distribution<int64_t>(std::max<int64_t>(1, prompt / 2), prompt)(rng);
      const int64_t c = std::uniform_int_distribution<int64_t>(1, completion)(rng);
      pb.attn[i].narrow(0, 0, prompt - p).fill_(false);
      pb.attn[i].narrow(0, prompt + c, completion - c).fill_(false);
      pb.completion_mask[i].narrow(0, c, completion - c).fill_(0);
      pb.prompt_tokens.push_back(p);
      pb.completion_tokens.push_back(c);
    }
    pb.pos = model::positions_from_mask(pb.attn);
  }
  {  // The generating policy's log-probs, as generation would have kept them.
    torch::NoGradGuard ng;
    pb = pb.to(dev);  // the step's inputs already on the device, as the timed step would move them once
    auto h = m.forward(pb.ids, pb.pos, nullptr, pb.attn);
    pb.old_logps = m.token_logprobs(h.slice(1, prompt - 1, prompt + completion - 1), pb.ids.slice(1, prompt), 1.0);
  }

  std::vector<double> t, whole, grouped;
  double loss = 0;
  model::reset_peak_memory(dev);
  grpo::PolicyBatch full = pb;  // every micro-batch over the batch's whole width
  full.prompt_tokens.clear(), full.completion_tokens.clear();
  // grpo.group_by_length: the step's rows (here all) sorted by length into its micro-batches
  std::vector<int64_t> all(static_cast<size_t>(batch));
  std::iota(all.begin(), all.end(), 0);
  const grpo::PolicyBatch sorted =
      varied ? pb.rows(torch::tensor(grpo::length_grouped_order(pb, all, batch), torch::kLong)) : pb;
  auto timed = [&](const grpo::PolicyBatch& b) {
    return bench::seconds_of([&] {
      loss = po.optimize(b, 1e-6).loss;
      sync();
    });
  };
  po.optimize(pb, 1e-6);  // warm-up (allocator, OpenBLAS buffers)
  if (varied) po.optimize(full, 1e-6), po.optimize(sorted, 1e-6);
  for (int64_t i = 0; i < repeats; ++i) {  // in turns, so that drift hits each alike
    if (varied) whole.push_back(timed(full)), grouped.push_back(timed(sorted));
    t.push_back(timed(pb));
  }
  const double whole_sec = varied ? bench::median(whole) : 0, grouped_sec = varied ? bench::median(grouped) : 0;
  if (!profile.empty()) {  // Kineto: host ops, and on a GPU its kernels and memory copies
    namespace tp = torch::profiler::impl;
    std::set<tp::ActivityType> acts{tp::ActivityType::CPU};
    if (dev.is_cuda()) acts.insert(tp::ActivityType::CUDA);
    const tp::ProfilerConfig pc(tp::ProfilerState::KINETO, /*report_input_shapes=*/true);
    torch::autograd::profiler::prepareProfiler(pc, acts);
    torch::autograd::profiler::enableProfiler(pc, acts);
    po.optimize(pb, 1e-6);
    sync();
    torch::autograd::profiler::disableProfiler()->save(profile);
  }
  const double peak_gb = static_cast<double>(model::peak_memory_bytes(dev)) / 1e9;
  const double sec = bench::median(t), tokens = static_cast<double>(batch * (prompt + completion));
  const double flops = step_flops(cfg, r, batch, prompt, completion);
  if (json) {
    std::printf(
        "{\"impl\": \"bucketrl\", \"device\": \"%s\", \"dtype\": \"%s\", \"shape\": \"%s\", \"params\": %lld, "
        "\"batch\": %lld, \"prompt\": %lld, \"completion\": %lld, "
        "\"r\": %lld, \"threads\": %d, \"step_seconds\": %.4f, \"tokens_per_second\": %.1f, \"step_gflop\": %.2f, "
        "\"gflops\": %.1f, \"gemm_ceiling_gflops\": %.1f, \"fraction_of_ceiling\": %.4f, \"loss\": %.6f, "
        "\"gradient_checkpointing\": %s, \"micro_batch\": %lld, \"peak_memory_gb\": %.3f, \"varied_lengths\": %s, "
        "\"whole_width_step_seconds\": %.4f, \"group_by_length_step_seconds\": %.4f}\n",
        device.c_str(), dtype.c_str(), shape.c_str(), static_cast<long long>(cfg.num_parameters()),
        static_cast<long long>(batch), static_cast<long long>(prompt), static_cast<long long>(completion),
        static_cast<long long>(r), threads, sec, tokens / sec, flops / 1e9, flops / sec / 1e9, ceiling / 1e9,
        flops / sec / ceiling, loss, ckpt ? "true" : "false", static_cast<long long>(po.micro_batch_size()), peak_gb,
        varied ? "true" : "false", whole_sec, grouped_sec);
  } else {
    std::printf(
        "%s %s %s: %lld x %lld tokens, step %.3f s (median of %lld), %.0f tokens/s, %.1f GFLOP/step = %.1f GFLOP/s, "
        "%.0f %% of the %.0f GFLOP/s GEMM ceiling; peak memory %.2f GB (%s)%s%s\n",
        device.c_str(), dtype.c_str(), shape.c_str(), static_cast<long long>(batch),
        static_cast<long long>(prompt + completion), sec, static_cast<long long>(repeats), tokens / sec, flops / 1e9,
        flops / sec / 1e9, 100 * flops / sec / ceiling, ceiling / 1e9, peak_gb,
        dev.is_cuda() ? "tensors allocated" : "process resident set", ckpt ? ", gradient checkpointing" : "",
        po.micro_batch_size() < g.per_device_train_batch_size
            ? (", out of memory at " + std::to_string(g.per_device_train_batch_size) + " rows: micro-batches of " +
               std::to_string(po.micro_batch_size()))
                  .c_str()
            : "");
    if (varied)  // the FLOP count above is of the whole width: compare the times
      std::printf(
          "varied lengths, micro-batches of %lld rows: %.3f s each forwarding its window, %.3f s over the whole "
          "width (%.2fx), %.3f s with group_by_length (%.2fx faster than over the whole width)\n",
          static_cast<long long>(po.micro_batch_size()), sec, whole_sec, whole_sec / sec, grouped_sec,
          whole_sec / grouped_sec);
  }
  return 0;
}
