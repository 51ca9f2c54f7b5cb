// grpo.auto_find_batch_size: a GRPO training pass that runs out of memory is run again with
// half the micro-batch, until it fits. The memory runs out for real: a child process caps its
// address space (RLIMIT_AS) a few step footprints above what it holds, so the CPU allocator
// fails as a GPU's does when its memory is full. The step that fitted after the retries must
// equal a step run with that micro-batch from the start (the same model, batch and seed,
// without a cap, in this process): loss and every adapter parameter after AdamW. A cap that
// not even one sequence fits, or the knob off, ends in an error naming the fix; errors other
// than running out of memory are not retried.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "grpo/trainer.h"
#include "lora/lora.h"
#include "model/device.h"
#include "model/loader.h"
#include "util/error.h"
#include "../test_files.h"

using namespace brl;

namespace {

constexpr int64_t kRows = 32, kLen = 32;  // rows, prompt and completion tokens of the usual batch
// One compute thread here and in the children: OpenMP's pool does not survive a fork.
const int kThreads = [] {
  at::set_num_threads(1);
  return 1;
}();

// Wide MLPs: a step's activations, not the weights, are what the cap squeezes.
model::Model make_model() {
  auto c = model::named_shape("tiny");
  c.hidden_size = 128, c.intermediate_size = 2048, c.num_attention_heads = 4, c.head_dim = 32;
  auto m = model::random_model(c, 5, 0.02, at::kFloat, at::Device(at::kCPU));
  LoraConfig lc;
  lc.r = 4;
  lc.lora_alpha = 8;
  lc.target_modules = {"all-linear"};
  lora::attach(m, lc);
  at::NoGradGuard ng;
  at::manual_seed(6);
  for (auto& p : lora::parameters(m)) p.normal_(0, 0.05);  // B = 0 would give A no gradient
  return m;
}

struct Shape {
  int64_t rows = kRows, len = kLen;
};

grpo::PolicyBatch make_batch(const model::Model& m, Shape sh = {}) {
  grpo::PolicyBatch b;
  b.prompt_len = sh.len, b.completion_len = sh.len;
  at::manual_seed(7);
  b.ids = at::randint(0, m.config.vocab_size, {sh.rows, 2 * sh.len}, at::kLong);
  b.attn = at::ones({sh.rows, 2 * sh.len}, at::kBool);
  b.pos = model::positions_from_mask(b.attn);
  b.completion_mask = at::ones({sh.rows, sh.len}, at::kFloat);
  b.advantages = at::randn({sh.rows}, at::kDouble);
  // Near a random model's log-probabilities, not from a forward pass: one over the whole batch
  // would leave the allocator holding its memory for the capped step to reuse.
  b.old_logps = -std::log(static_cast<double>(m.config.vocab_size)) + 0.2 * at::randn({sh.rows, sh.len});
  return b;
}

grpo::GrpoConfig grpo_config(int64_t micro_batch, bool auto_find, Shape sh = {}) {
  grpo::GrpoConfig g;
  g.num_generations = 8;
  g.per_device_train_batch_size = static_cast<int>(micro_batch);
  g.gradient_accumulation_steps = static_cast<int>(sh.rows / micro_batch);
  g.max_completion_length = static_cast<int>(sh.len);
  g.loss_type = grpo::LossType::grpo;  // the mean of per-sequence means: the same for any equal split
  g.beta = 0.04;                       // the reference pass is micro-batched too
  g.learning_rate = 1e-3;
  g.auto_find_batch_size = auto_find;
  return g;
}

int64_t status_bytes(const char* field) {  // a "VmXxx:  N kB" line of /proc/self/status
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::strlen(field))) * 1024;
  return 0;
}

struct Outcome {
  int64_t micro_batch = 0;
  double loss = 0;
  std::string error;  // what() of a UserError, "" if the step ran
};

// In a child: one step on a batch of shape `sh` from micro-batch `start` under an
// address-space cap: what the process holds plus `footprints` times the peak memory a step of
// the usual batch in micro-batches of 4 rows takes, measured on a throwaway model after a
// warm-up (so the measured model starts as the reference does) and with the free memory handed
// back (tcmalloc keeps what the warm-up freed, and a step reusing it would measure ~0). Address
// space still mapped (VmSize) stays usable under the cap. Adapter parameters go to params_path.
Outcome capped_step(Shape sh, int64_t start, double footprints, bool auto_find, const std::string& params_path) {
  const std::string out = params_path + ".outcome";
  const pid_t pid = fork();
  if (pid == 0) {
    at::set_num_threads(1);  // no thread (and no thread stack) needs creating under the cap
    int64_t footprint = 0;
    {
      auto w = make_model();
      auto wb = make_batch(w);
      grpo::PolicyOptimizer po(w, grpo_config(4, false));
      po.optimize(wb, 1e-3);  // allocator arenas, BLAS buffers: what any step needs once
      // Free memory back to the system, then restart VmHWM, the peak resident set.
      malloc_trim(0);
      if (auto release = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory")))
        release();  // tcmalloc's (linked where found)
      std::ofstream("/proc/self/clear_refs") << "5";
      const int64_t before = status_bytes("VmRSS:");
      po.optimize(wb, 1e-3);
      footprint = status_bytes("VmHWM:") - before;
    }
    if (footprint <= 0) _exit(3);
    auto m = make_model();
    auto b = make_batch(m, sh);
    grpo::PolicyOptimizer po(m, grpo_config(start, auto_find, sh));
    const int64_t cap = status_bytes("VmSize:") + static_cast<int64_t>(footprints * static_cast<double>(footprint));
    struct rlimit r {
      static_cast<rlim_t>(cap), static_cast<rlim_t>(cap)
    };
    setrlimit(RLIMIT_AS, &r);
    Outcome o;
    try {
      o.loss = po.optimize(b, 1e-3).loss;
      o.micro_batch = po.micro_batch_size();
    } catch (const UserError& e) {
      o.error = e.what();
      o.micro_batch = po.micro_batch_size();
    }
    r.rlim_cur = r.rlim_max = RLIM_INFINITY;
    setrlimit(RLIMIT_AS, &r);
    if (o.error.empty()) torch::save(lora::parameters(m), params_path);
    std::ofstream(out) << o.micro_batch << "\n" << std::hexfloat << o.loss << "\n" << o.error;
    std::fflush(nullptr);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child status " << st;
  Outcome o;
  std::ifstream f(out);
  std::string loss;
  f >> o.micro_batch >> loss;
  o.loss = std::strtod(loss.c_str(), nullptr);
  std::getline(f, o.error);
  std::string rest;
  while (std::getline(f, rest)) {
    if (!o.error.empty()) o.error += '\n';
    o.error += rest;
  }
  return o;
}

class AutoFindBatchSize : public ::testing::Test {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "AddressSanitizer maps terabytes of shadow memory: no address-space cap can be set";
#endif
  }
};

}  // namespace

TEST_F(AutoFindBatchSize, ARetriedStepEqualsOneRunAtTheSizeThatFitted) {
  test::TempDir tmp;
  const auto o = capped_step({}, kRows, 3.0, true, tmp.str("params.pt"));
  ASSERT_EQ(o.error, "");
  std::printf("micro-batch %d rows -> %lld after running out of memory\n", static_cast<int>(kRows),
              static_cast<long long>(o.micro_batch));
  ASSERT_LT(o.micro_batch, kRows) << "the cap did not bind: nothing was retried";
  ASSERT_GE(o.micro_batch, 1);

  auto m = make_model();  // the reference: that micro-batch from the start, no cap
  auto b = make_batch(m);
  grpo::PolicyOptimizer po(m, grpo_config(o.micro_batch, false));
  const double loss = po.optimize(b, 1e-3).loss;
  EXPECT_NEAR(o.loss, loss, 1e-6 * std::max(1.0, std::abs(loss)));
  std::vector<torch::Tensor> got;
  torch::load(got, tmp.str("params.pt"));
  auto want = lora::parameters(m);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(at::allclose(got[i], want[i], 1e-5, 1e-7)) << "adapter parameter " << i;
}

TEST_F(AutoFindBatchSize, WhenNotEvenOneSequenceFitsTheErrorNamesTheFix) {
  test::TempDir tmp;
  // One sequence of 16 times the usual length holds about 16 usual rows' activations, against
  // room for the 4 rows the warm-up freed and half as much again.
  const auto o = capped_step({8, 16 * kLen}, 8, 0.5, true, tmp.str("params.pt"));
  EXPECT_EQ(o.micro_batch, 1);  // it went all the way down first
  EXPECT_NE(o.error.find("out of memory on cpu"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("at 1 sequences per micro-batch"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("gradient_checkpointing"), std::string::npos) << o.error;
}

TEST_F(AutoFindBatchSize, OffTheFirstOutOfMemoryIsTheErrorAndNamesTheKnobs) {
  test::TempDir tmp;
  const auto o = capped_step({}, kRows, 3.0, false, tmp.str("params.pt"));
  EXPECT_EQ(o.micro_batch, kRows);
  EXPECT_NE(o.error.find("at 32 sequences per micro-batch"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("per_device_train_batch_size"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("auto_find_batch_size"), std::string::npos) << o.error;
}

TEST(OutOfMemory, OnlyAllocationFailuresCountAsOutOfMemory) {
  EXPECT_TRUE(model::is_out_of_memory(c10::OutOfMemoryError({"f", "file.cpp", 1}, "CUDA out of memory.")));
  try {
    (void)at::empty({int64_t{1} << 60}, at::kFloat);  // the CPU allocator's own error
    FAIL() << "2^62 bytes were allocated";
  } catch (const c10::Error& e) {
    EXPECT_TRUE(model::is_out_of_memory(e)) << e.what();
  }
  try {  // a shape error is a bug to report, not a reason to retry smaller
    (void)at::mm(at::ones({2, 3}), at::ones({2, 3}));
    FAIL();
  } catch (const c10::Error& e) {
    EXPECT_FALSE(model::is_out_of_memory(e)) << e.what();
  }
}
