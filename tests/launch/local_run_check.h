// The one-machine run end to end with real processes, on any bucket: `run_local` starts the
// proxy, two workers and the evaluator (the real bucketrl executable); the run must publish
// a verified chain of versions built from both workers' updates, raise held-out accuracy,
// and export the newest version as a PEFT adapter that loads (F32, or BF16 as published).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <set>

#include "worker/adapter_state.h"
#include "launch/local_run.h"
#include "async_util.h"
#include "lora/lora.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "protocol/status.h"
#include "util/safetensors.h"

namespace brl::test {

using namespace brl;

// bucket "" = a directory bucket in the run's folder; publish_dtype: [aggregation]'s.
inline void two_workers_train_through(const std::string& bucket, const std::string& publish_dtype = "float32") {
  TempDir tmp;
  RunConfig cfg = learnable_config(make_base(tmp.str("base")), tmp.str("out"));
  cfg.aggregation.publish_dtype = kPublishDtypes.parse(publish_dtype).value();
  launch::LocalRunOptions o;
  o.workers = 2;
  o.time_limit_s = 20;
  o.exe = BRL_EXE;
  o.bucket = bucket;
  std::atomic<bool> stop{false};
  auto s = launch::run_local(cfg, o, stop);
  ASSERT_TRUE(s.verify.ok()) << s.verify.summary();
  EXPECT_GE(s.versions, 4) << s.verify.summary();

  auto store = protocol::open_bucket(s.bucket);
  std::set<std::string> contributors;
  for (int64_t v = 1; v <= s.versions; ++v)
    for (auto& u : protocol::read_manifest(*store, v).value().updates) contributors.insert(u.worker);
  EXPECT_EQ(contributors, (std::set<std::string>{"w0", "w1"}));
  // The evaluator wrote version 0 and later ones, and held-out accuracy went from ~0 (a random model rarely says 7) to >= 0.8.
  auto evs = store->list_all(protocol::evals_prefix()).value();
  ASSERT_GE(evs.size(), 2u);
  EXPECT_EQ(evs.front().key, protocol::eval_key(0));
  auto first = protocol::EvalRecord::parse(store->get(evs.front().key).value(), "first").value();
  auto last = protocol::EvalRecord::parse(store->get(evs.back().key).value(), "last").value();
  EXPECT_LT(first.accuracy, 0.2);
  EXPECT_GE(last.accuracy, 0.8) << "at v" << last.version;
  EXPECT_GE(s.final_accuracy, 0.8);
  // pass@k on G sampled answers a prompt (train.eval_pass_k = -1): pass@1 <= pass@G.
  EXPECT_EQ(last.k, cfg.grpo.num_generations);
  EXPECT_GT(last.pass_at_k, 0.0);
  EXPECT_LE(last.pass_at_1, last.pass_at_k);
  EXPECT_LE(first.pass_at_1, first.pass_at_k);

  // `bucketrl status` sees the same run from the bucket alone.
  auto st = protocol::run_status(*store);
  EXPECT_EQ(st["version"].get<int64_t>(), s.versions);
  ASSERT_EQ(st["workers"].size(), 2u);
  for (auto& w : st["workers"]) EXPECT_EQ(w["health"], "stopped") << w.dump();
  EXPECT_FALSE(st["evals"].empty());
  EXPECT_NE(protocol::format_status(st).find("newest global version: " + std::to_string(s.versions)),
            std::string::npos);
  EXPECT_NE(protocol::format_status(st).find("held-out pass@1 "), std::string::npos) << protocol::format_status(st);

  // The exported adapter is the newest version, loadable as PEFT.
  auto m = model::load_model(cfg.model.path);
  lora::load_peft(m, s.adapter_dir);
  auto got = worker::snapshot(m);
  auto man = protocol::read_manifest(*store, s.versions).value();
  auto bytes = protocol::read_payload(*store, man).value();
  EXPECT_EQ(st::SafetensorsFile::from_buffer(bytes.data(), bytes.size(), "newest").get(got[0].name).dtype,
            publish_dtype == "bfloat16" ? st::DType::BF16 : st::DType::F32);
  EXPECT_EQ(man.payload_dtype, publish_dtype);
  auto want = protocol::decode_adapter(bytes, "newest").value();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].data, want[i].data) << got[i].name;
}

}  // namespace brl::test
