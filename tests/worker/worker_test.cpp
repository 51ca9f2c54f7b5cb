// The Worker class step by step on a directory bucket, as proxy_security_test drives the
// Proxy: what load, step, sync and adopt leave in the bucket, checked from the bucket alone
// (update objects, heartbeats, logs) and, for adoption, against a version folded by the real
// proxy (with the worker's own not yet folded update on top). A restart under the same id
// resumes the trainer state (AdamW's second moment, step and prompt counters), the newer of
// its disk's copy and the bucket's, also on a machine with an empty disk; unreadable copies
// start it afresh. The reward window's sums against hand-derived values. train.log_completions:
// a worker's log lines and `bucketrl train`'s completions.jsonl, each completion's advantage
// derived from the logged rewards.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>

#include "codec/codec.h"
#include "grpo/train_loop.h"
#include "grpo/trainer.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "protocol/update.h"
#include "proxy/proxy.h"
#include "worker/reward_window.h"
#include "worker/worker.h"
#include "../launch/async_util.h"
#include "../proxy/proxy_util.h"

using namespace brl;

namespace {

struct WorkerRun {
  test::TempDir tmp;
  std::string bucket;
  explicit WorkerRun(int sync_steps, double state_upload_interval_s = 60,
                     const std::function<void(RunConfig&)>& tweak = {}) {
    RunConfig cfg = test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out"));
    if (tweak) tweak(cfg);
    cfg.sync.sync_interval_s = 3600;  // only the step trigger
    cfg.sync.sync_steps = sync_steps;
    cfg.sync.state_upload_interval_s = state_upload_interval_s;
    cfg.sync.codec = "fp32";
    cfg.grpo.weight_decay = 0.1;  // moves LoRA A every step even when no group has reward variance
    bucket = test::init_bucket(tmp, cfg);
  }
  worker::WorkerOptions options(const std::string& id) const { return test::worker_options(tmp, bucket, id); }
  // The update objects of `worker`, oldest first, parsed.
  std::vector<protocol::UpdateHeader> updates(store::ObjectStore& s, const std::string& worker) const {
    std::vector<protocol::UpdateHeader> out;
    for (auto& o : s.list_all(protocol::updates_prefix() + worker + "/").value()) {
      auto body = s.get(o.key).value();
      out.push_back(protocol::parse_update(body, o.key).value().header);
    }
    return out;
  }
};

// A worker syncing every step and the real proxy, both on one bucket.
struct WithProxy {
  WorkerRun r{1};
  std::unique_ptr<store::ObjectStore> s = protocol::open_bucket(r.bucket);
  std::unique_ptr<worker::Worker> owner;
  proxy::Proxy p{test::proxy_options(r.bucket, "p")};
  std::atomic<bool> stop{false};
  explicit WithProxy(const std::string& id) : owner(std::make_unique<worker::Worker>(r.options(id))) {}
};

std::vector<codec::Tensor> payload_of(store::ObjectStore& s, const protocol::UpdateHeader& h) {
  auto body = s.get(protocol::update_key(h.worker, h.id)).value();
  auto p = protocol::parse_update(body, "u").value();
  return codec::decode(p.payload, 1 << 26).value();
}

}  // namespace

TEST(Worker, LoadStepSyncLeaveTheirObjects) {
  WorkerRun r(2);
  auto s = protocol::open_bucket(r.bucket);
  auto owner = std::make_unique<worker::Worker>(r.options("wa"));
  worker::Worker& w = *owner;
  EXPECT_EQ(w.version(), 0);  // the newest version at load

  std::atomic<bool> stop{false};
  EXPECT_FALSE(w.sync(stop));  // nothing to upload yet
  w.step();
  EXPECT_FALSE(w.sync_due());  // 1 of 2 steps
  w.step();
  EXPECT_TRUE(w.sync_due());
  EXPECT_EQ(w.window().steps(), 2);
  const int64_t samples = w.window().samples();
  EXPECT_EQ(samples, 2 * 64);  // per_device_train_batch_size completions a step
  ASSERT_TRUE(w.sync(stop));
  EXPECT_EQ(w.window().steps(), 0);  // a new window
  EXPECT_FALSE(w.sync_due());

  auto ups = r.updates(*s, "wa");
  ASSERT_EQ(ups.size(), 1u);
  EXPECT_EQ(ups[0].base_version, 0);
  EXPECT_EQ(ups[0].steps, 2);
  EXPECT_EQ(ups[0].samples, samples);
  EXPECT_EQ(ups[0].codec, "fp32");
  EXPECT_EQ(ups[0].signer, "");
  EXPECT_GE(ups[0].reward_mean, 0);
  EXPECT_LE(ups[0].reward_mean, 1);
  // The delta against version 0: the adapter's tensors, finite, and not all zero.
  auto v0 = protocol::read_version(*s, 0).value().adapter;
  auto d = payload_of(*s, ups[0]);
  ASSERT_EQ(d.size(), v0.size());
  double sq = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    EXPECT_EQ(d[i].name, v0[i].name);
    for (float x : d[i].data) {
      ASSERT_TRUE(std::isfinite(x));
      sq += double(x) * x;
    }
  }
  EXPECT_GT(sq, 0);
  // The two steps' metric lines went out with the upload.
  auto logs = s->list_all(protocol::logs_prefix("wa")).value();
  ASSERT_EQ(logs.size(), 1u);
  auto text = s->get(logs[0].key).value();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  EXPECT_EQ(w.summary().steps, 2);
  EXPECT_EQ(w.summary().updates, 1);
  EXPECT_EQ(w.summary().bytes_uploaded, s->head(protocol::update_key("wa", ups[0].id)).value().size);
  owner.reset();  // the final heartbeat is written as the worker goes (the others on a timer)
  auto hb = protocol::Heartbeat::parse(s->get(protocol::heartbeat_key("wa")).value(), "hb");
  ASSERT_TRUE(hb) << hb.status().to_string();
  EXPECT_EQ(hb->worker, "wa");
  EXPECT_EQ(hb->step, 2);
  EXPECT_EQ(hb->updates, 1);
}

// After the proxy folds its update, the worker's next sync adopts the new version: the next
// delta is taken against it (base_version 1), and version 1 is version 0 plus the first delta
// (fedavg, one update, server learning rate 1).
// A generation batch that feeds two optimizer steps (steps_per_generation 2): the worker syncs
// only after both, so no new global version meets rollouts sampled from an older one, and every
// update carries the samples it trained on.
TEST(Worker, SyncsBetweenGenerationBatches) {
  WorkerRun r(1, 60, [](RunConfig& c) { c.grpo.steps_per_generation = 2; });
  auto s = protocol::open_bucket(r.bucket);
  worker::Worker w(r.options("wg"));
  std::atomic<bool> stop{false};
  w.step();
  EXPECT_FALSE(w.sync_due()) << "sync_steps 1 is reached, but half the rollouts are left";
  w.step();
  EXPECT_TRUE(w.sync_due());
  EXPECT_EQ(w.window().samples(), 2 * 64);  // one generation batch of 2 x 64, sampled in the first step
  ASSERT_TRUE(w.sync(stop));
  auto ups = r.updates(*s, "wg");
  ASSERT_EQ(ups.size(), 1u);
  EXPECT_EQ(ups[0].steps, 2);
  EXPECT_EQ(ups[0].samples, 2 * 64);
}

TEST(Worker, AdoptsTheFoldedVersionAndDiffsAgainstIt) {
  WithProxy f("wb");
  auto& [r, s, owner, p, stop] = f;
  worker::Worker& w = *owner;
  w.step();
  ASSERT_TRUE(w.sync(stop));
  EXPECT_EQ(w.version(), 0);  // nothing newer yet
  ASSERT_TRUE(p.poll_once());
  auto v0 = protocol::read_version(*s, 0).value().adapter;
  auto v1 = protocol::read_version(*s, 1).value().adapter;
  auto first = r.updates(*s, "wb");
  ASSERT_EQ(first.size(), 1u);
  auto d1 = payload_of(*s, first[0]);
  for (size_t i = 0; i < v1.size(); ++i)
    for (size_t k = 0; k < v1[i].data.size(); ++k)
      ASSERT_FLOAT_EQ(v1[i].data[k], v0[i].data[k] + d1[i].data[k]) << v1[i].name;

  w.step();
  ASSERT_TRUE(w.sync(stop));  // uploads against v0's successor state, then adopts v1
  EXPECT_EQ(w.version(), 1);
  EXPECT_EQ(w.summary().adopted, 1);
  w.step();
  ASSERT_TRUE(w.sync(stop));
  auto ups = r.updates(*s, "wb");
  ASSERT_EQ(ups.size(), 3u);
  EXPECT_EQ(ups[1].base_version, 0);
  EXPECT_EQ(ups[2].base_version, 1);
  owner.reset();  // its final heartbeat
  auto hb = protocol::Heartbeat::parse(s->get(protocol::heartbeat_key("wb")).value(), "hb").value();
  EXPECT_EQ(hb.version, 1);
}

// A version without the worker's newest update (the proxy folds it later) is adopted with that
// update on top, so the worker does not step back over its own progress (and learn it twice);
// once a version holds it (its manifest's cursor names it) it is no longer added. Checked
// against the versions and update payloads in the bucket.
TEST(Worker, AdoptsANewerVersionWithItsOwnUnfoldedUpdateOnTop) {
  WithProxy f("wc");
  auto& [r, s, owner, p, stop] = f;
  worker::Worker& w = *owner;
  auto expect_sum = [](const std::vector<codec::Tensor>& got, const std::vector<codec::Tensor>& v,
                       const std::vector<codec::Tensor>& d) {
    ASSERT_EQ(got.size(), v.size());
    for (size_t i = 0; i < v.size(); ++i)
      for (size_t k = 0; k < v[i].data.size(); ++k) ASSERT_EQ(got[i].data[k], v[i].data[k] + d[i].data[k]) << v[i].name;
  };
  w.step();
  ASSERT_TRUE(w.sync(stop));  // update 1
  EXPECT_EQ(w.unfolded(), 1u);
  ASSERT_TRUE(p.poll_once());  // v1 holds update 1
  w.step();
  ASSERT_TRUE(w.sync(stop));  // update 2, then adopts v1, which lacks it
  EXPECT_EQ(w.version(), 1);
  EXPECT_EQ(w.unfolded(), 1u);
  auto ups = r.updates(*s, "wc");
  ASSERT_EQ(ups.size(), 2u);
  auto v1 = protocol::read_version(*s, 1).value().adapter;
  expect_sum(w.anchor(), v1, payload_of(*s, ups[1]));

  ASSERT_TRUE(p.poll_once());  // v2 holds update 2
  w.step();
  ASSERT_TRUE(w.sync(stop));  // update 3, then adopts v2: update 2 is in it, update 3 is not
  EXPECT_EQ(w.version(), 2);
  EXPECT_EQ(w.unfolded(), 1u);
  ups = r.updates(*s, "wc");
  ASSERT_EQ(ups.size(), 3u);
  EXPECT_EQ(ups[2].base_version, 1);
  auto v2 = protocol::read_version(*s, 2).value().adapter;
  expect_sum(w.anchor(), v2, payload_of(*s, ups[2]));
}

// A worker restarted under the same id (a crash, a kill, a spot machine's replacement with
// its disk) goes on with its trainer state: AdamW's moments, its step and prompt counters.
// Without it a restart began with a fresh AdamW whose lr-sized steps at a saturated reward
// grew the adapter until the policy collapsed (worker.cpp, resume_state). A state that cannot
// be read costs only the resume, and a save cut short leaves nothing behind for long; the
// state belongs to one id.
TEST(Worker, ARestartUnderTheSameIdResumesItsTrainerState) {
  WorkerRun r(2);
  auto s = protocol::open_bucket(r.bucket);
  const std::string key = protocol::trainer_state_key("wa");
  auto bucket_step = [&] { return grpo::GrpoTrainer::portable_state_step(s->get(key).value()); };
  std::atomic<bool> stop{false};
  std::string path;
  uint64_t cursor = 0;
  {
    worker::Worker w(r.options("wa"));
    path = w.state_path();
    ASSERT_FALSE(path.empty());
    EXPECT_FALSE(std::filesystem::exists(path));  // nothing to resume yet
    EXPECT_TRUE(s->get(key).status().is_not_found());
    w.step();
    w.step();
    ASSERT_TRUE(w.sync(stop));
    EXPECT_TRUE(std::filesystem::exists(path));
    EXPECT_EQ(bucket_step(), 2);  // the first sync copies it to the bucket too
    cursor = w.example_cursor();
    EXPECT_GT(cursor, 0u);
    w.step();
    w.step();
    ASSERT_TRUE(w.sync(stop));
    EXPECT_EQ(bucket_step(), 2);  // not again within state_upload_interval_s
  }
  {
    worker::Worker w(r.options("wa"));
    EXPECT_EQ(w.state_path(), path);
    EXPECT_EQ(w.trainer_steps(), 4);        // the disk's copy: newer than the bucket's
    EXPECT_GT(w.example_cursor(), cursor);  // the next prompts, not the shard's first again
    w.step();
    EXPECT_EQ(w.trainer_steps(), 5);
    std::atomic<bool> stopped{true};
    w.run(stopped);  // a clean stop uploads the last step and copies the state at once
    EXPECT_EQ(bucket_step(), 5);
    cursor = w.example_cursor();
  }
  {
    worker::Worker other(r.options("wb"));  // another worker has its own
    EXPECT_NE(other.state_path(), path);
    EXPECT_EQ(other.trainer_steps(), 0);
  }
  {
    auto fresh = r.options("wa");  // a new machine takes over the id: an empty disk
    fresh.cache_dir = r.tmp.str("other-machine");
    worker::Worker w(fresh);
    EXPECT_NE(w.state_path(), path);
    EXPECT_EQ(w.trainer_steps(), 5);  // the bucket's copy
    EXPECT_EQ(w.example_cursor(), cursor);
    for (int i = 0; i < 2; ++i) w.step();
    ASSERT_TRUE(w.sync(stop));
    EXPECT_EQ(bucket_step(), 7);  // this process's first sync
  }
  {
    worker::Worker w(r.options("wa"));  // back on the first machine: the bucket's is newer
    EXPECT_EQ(w.trainer_steps(), 7);
  }
  test::write_file(path, "not a trainer state");
  test::write_file(path + ".tmp", "a save cut short by a kill");
  ASSERT_TRUE(s->put(key, "not one either").ok());
  {
    worker::Worker w(r.options("wa"));
    EXPECT_EQ(w.trainer_steps(), 0);  // neither copy reads: afresh
    w.step();
    w.step();
    ASSERT_TRUE(w.sync(stop));                             // trains and syncs, and writes good copies again
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));  // the one temporary name, replaced
  }
  worker::Worker again(r.options("wa"));
  EXPECT_EQ(again.trainer_steps(), 2);
  EXPECT_EQ(bucket_step(), 2);
  auto anon = r.options("");
  EXPECT_EQ(worker::Worker(anon).state_path(), "");  // <host>-<pid>: no later process has its id
}

TEST(Worker, StateUploadIntervalZeroKeepsTheTrainerStateOffTheBucket) {
  WorkerRun r(1, 0);
  std::atomic<bool> stop{false};
  {
    worker::Worker w(r.options("wa"));
    w.step();
    ASSERT_TRUE(w.sync(stop));
    EXPECT_TRUE(std::filesystem::exists(w.state_path()));
  }
  auto s = protocol::open_bucket(r.bucket);
  EXPECT_TRUE(s->get(protocol::trainer_state_key("wa")).status().is_not_found());
  auto fresh = r.options("wa");
  fresh.cache_dir = r.tmp.str("other-machine");
  EXPECT_EQ(worker::Worker(fresh).trainer_steps(), 0);
}

// Each logged completion's advantage is its reward centred and scaled in its group of G
// (grpo.scale_rewards = group: std Bessel-corrected, + 1e-4), derived here from the logged rewards:
// the lines pair each completion with its own reward and advantage.
// require_varied: some group's rewards must differ (a fixed seed), else every advantage is 0.
static void expect_group_advantages(const std::vector<nlohmann::json>& c, int G, bool require_varied) {
  ASSERT_EQ(c.size() % G, 0u);
  int varied = 0;  // groups whose rewards differ
  for (size_t g = 0; g < c.size(); g += G) {
    double mean = 0, var = 0;
    for (int i = 0; i < G; ++i) mean += c[g + i]["reward"].get<double>() / G;
    for (int i = 0; i < G; ++i) var += std::pow(c[g + i]["reward"].get<double>() - mean, 2) / (G - 1);
    for (int i = 0; i < G; ++i)
      EXPECT_NEAR(c[g + i]["advantage"].get<double>(),
                  (c[g + i]["reward"].get<double>() - mean) / (std::sqrt(var) + 1e-4), 1e-5)
          << "completion " << g + i;
    varied += var > 0;
  }
  if (require_varied) EXPECT_GT(varied, 0) << "no group's rewards differ: the check is empty";
}

// train.log_completions: on logging steps (every 2nd here) a worker's log line carries
// num_completions_to_print of the step's completions: the prompt as given to the model, the
// completion, its reward, each reward function's score and its advantage.
TEST(Worker, LogCompletionsGoIntoTheLogLinesOfLoggingSteps) {
  WorkerRun r(2, 60, [](RunConfig& c) {
    c.train.log_completions = true;
    c.train.num_completions_to_print = 16;
    c.train.logging_steps = 2;
    c.task.format_reward = true;
  });
  auto s = protocol::open_bucket(r.bucket);
  worker::Worker w(r.options("wl"));
  std::atomic<bool> stop{false};
  w.step();
  w.step();
  ASSERT_TRUE(w.sync(stop));
  auto logs = s->list_all(protocol::logs_prefix("wl")).value();
  ASSERT_EQ(logs.size(), 1u);
  std::vector<nlohmann::json> lines;
  std::istringstream in(s->get(logs[0].key).value());
  for (std::string l; std::getline(in, l);) lines.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_FALSE(lines[0].contains("completions")) << "step 1 is not a logging step";
  ASSERT_TRUE(lines[1].contains("completions"));
  std::vector<nlohmann::json> c(lines[1]["completions"].begin(), lines[1]["completions"].end());
  ASSERT_EQ(c.size(), 16u);  // two groups of G = 8
  for (auto& x : c) {
    EXPECT_NE(x["prompt"].get<std::string>().find(", say seven:"), std::string::npos) << x.dump();
    EXPECT_TRUE(x["completion"].is_string());
    ASSERT_TRUE(x["rewards"].contains("correct") && x["rewards"].contains("format")) << x.dump();
  }
  expect_group_advantages(c, 8, false);  // a worker's sampling seed varies per start
}

// The same from `bucketrl train` (grpo::run_training): every completion of every logging step in
// <output_dir>/completions.jsonl, with its step.
TEST(TrainLoop, LogCompletionsWritesEveryCompletionOfEachStep) {
  test::TempDir tmp;
  RunConfig cfg = test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out"));
  cfg.grpo.max_steps = 2;
  cfg.train.eval_steps = 0;
  cfg.train.eval_max_examples = 8;
  cfg.train.log_completions = true;
  cfg.train.num_completions_to_print = 1;
  cfg.task.format_reward = true;
  grpo::run_training(cfg, false);
  std::ifstream f(tmp.str("out/completions.jsonl"));
  std::vector<nlohmann::json> c;
  for (std::string l; std::getline(f, l);) c.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(c.size(), 2u * 64);  // per_device_train_batch_size completions a step
  EXPECT_EQ(c.front()["step"], 1);
  EXPECT_EQ(c.back()["step"], 2);
  expect_group_advantages(c, 8, true);  // grpo.seed fixed; a digit is well-formed: some groups vary
}

// [grpo] cast_lm_head_to_fp32 reaches the session's model (a bf16 base here: an f32 copy of its
// head), and a run with vllm_importance_sampling_correction logs TRL's sampling metrics per step
// in metrics.jsonl: weights near 1 (the sampler is the same model; bf16 decode and training
// passes round differently, so not exactly).
TEST(TrainLoop, SamplerCorrectionAndF32HeadReachTheRun) {
  test::TempDir tmp;
  RunConfig cfg = test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out"));
  cfg.grpo.max_steps = 1;
  cfg.train.eval_steps = 0;
  cfg.train.eval_max_examples = 8;
  cfg.model.dtype = "bfloat16";
  cfg.grpo.cast_lm_head_to_fp32 = true;
  cfg.grpo.vllm_importance_sampling_correction = true;
  {
    grpo::Session ses = grpo::open_session(cfg);
    EXPECT_EQ(ses.model.dtype(), at::kBFloat16);
    ASSERT_TRUE(ses.model.lm_head_f32.defined());
    EXPECT_EQ(ses.model.lm_head_f32.scalar_type(), at::kFloat);
  }
  grpo::run_training(cfg, false);
  std::ifstream f(tmp.str("out/metrics.jsonl"));
  std::string line;
  nlohmann::json m;
  while (std::getline(f, line) && !m.contains("loss")) m = nlohmann::json::parse(line);  // past the step-0 eval
  ASSERT_TRUE(m.contains("loss")) << "no step line in metrics.jsonl";
  for (const char* k :
       {"importance_sampling_ratio_min", "importance_sampling_ratio_mean", "importance_sampling_ratio_max",
        "sampling_logp_difference_mean", "sampling_logp_difference_max"})
    EXPECT_TRUE(m.contains(k)) << k << " in " << line;
  EXPECT_NEAR(m.value("importance_sampling_ratio_mean", 0.0), 1.0, 0.05) << line;
  EXPECT_LE(m.value("importance_sampling_ratio_min", 0.0), m.value("importance_sampling_ratio_max", 0.0));
  EXPECT_GE(m.value("sampling_logp_difference_mean", -1.0), 0.0);
  EXPECT_LT(m.value("sampling_logp_difference_mean", 1.0), 0.1) << line;
}

TEST(RewardWindow, SampleWeightedMeanAndStd) {
  worker::RewardWindow w;
  EXPECT_EQ(w.mean(), 0);
  EXPECT_EQ(w.std(), 0);
  // 2 completions all 0 (std 0) and 6 completions with mean 1, std 0.5: the 8 rewards' mean is
  // 6/8 = 0.75, their second moment (6 (0.25 + 1)) / 8 = 0.9375, variance 0.9375 - 0.5625.
  w.add({2, 0.0, 0.0, 0.0, 1.0});
  w.add({6, 1.0, 0.5, 0.5, 0.0});
  EXPECT_EQ(w.steps(), 2);
  EXPECT_EQ(w.samples(), 8);
  EXPECT_DOUBLE_EQ(w.mean(), 0.75);
  EXPECT_DOUBLE_EQ(w.std(), std::sqrt(0.375));
  EXPECT_DOUBLE_EQ(w.accuracy(), 3.0 / 8);
  EXPECT_DOUBLE_EQ(w.frac_reward_zero_std(), 2.0 / 8);
  auto st = w.stats();
  EXPECT_EQ(st.steps, 2);
  EXPECT_EQ(st.samples, 8);
  EXPECT_DOUBLE_EQ(st.reward_std, std::sqrt(0.375));
  auto h = protocol::make_update_header("w", protocol::make_update_id(1700000000000, 1), 3, st, "int8", 1700000000001);
  EXPECT_EQ(h.base_version, 3);
  EXPECT_EQ(h.samples, 8);
  EXPECT_DOUBLE_EQ(h.reward_mean, 0.75);
  EXPECT_EQ(h.codec, "int8");
  EXPECT_EQ(h.created_ms, 1700000000001);
}
