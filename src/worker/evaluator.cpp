#include "worker/evaluator.h"

#include <ATen/Parallel.h>

#include <chrono>
#include <thread>

#include "grpo/train_loop.h"
#include "grpo/trainer.h"
#include "model/threads.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "util/log.h"
#include "worker/adapter_state.h"
#include "worker/join.h"

namespace brl::worker {

void run_evaluator(const EvaluatorOptions& opt, const std::atomic<bool>& stop) {
  if (opt.threads > 0) model::set_compute_threads(opt.threads);
  auto store = protocol::open_bucket(opt.bucket);
  auto run = protocol::read_run(*store).value();
  RunConfig cfg = join_run(*store, run, opt.cache_dir);
  if (!opt.device.empty()) cfg.model.device = opt.device;
  grpo::Session ses = grpo::open_session(cfg);
  int64_t done = -1;
  // An evaluator restarted mid-run continues after the newest evaluation already written.
  if (auto evs = store->list_all(protocol::evals_prefix()); evs && !evs->empty())
    if (auto v = protocol::parse_eval_key(evs->back().key)) done = *v;
  auto eval_newest = [&] {
    // Version 0 first (the starting point of the curve), then always the newest.
    auto nv = done < 0 ? Result<int64_t>(int64_t{0}) : protocol::newest_version(*store);
    if (!nv || *nv <= done) return;
    auto ver = protocol::read_version(*store, *nv);
    if (!ver) {  // collected already (a newer one exists), or not readable now: the next poll
      if (ver.status().code() == StatusCode::kCorrupt) LOG_WARN("evaluator: {}", ver.status().to_string());
      return;
    }
    assign(ses.model, ver->adapter, ver->manifest.payload_key);
    auto ev = grpo::evaluate_held_out(ses.model, ses.tokenizer, *ses.task, cfg);
    protocol::EvalRecord r{*nv,  ev.n,         protocol::now_ms(), ev.accuracy, ev.reward_mean,
                           ev.k, ev.pass_at_1, ev.pass_at_k};
    if (Status st = store->put(protocol::eval_key(*nv), r.to_json().dump()); !st) {
      LOG_WARN("evaluator: cannot write {}: {}", protocol::eval_key(*nv), st.to_string());
      return;
    }
    done = *nv;
    LOG_INFO("evaluator: v{}: held-out accuracy {:.3f}, reward {:.3f}{} (n={})", *nv, ev.accuracy, ev.reward_mean,
             ev.k ? fmt::format(", pass@1 {:.3f}, pass@{} {:.3f}", ev.pass_at_1, ev.k, ev.pass_at_k) : "", ev.n);
  };
  auto last_eval = std::chrono::steady_clock::now() - std::chrono::hours(1);
  while (!stop.load()) {
    auto t0 = std::chrono::steady_clock::now();
    if (t0 - last_eval >= std::chrono::duration<double>(opt.min_interval_s)) {
      int64_t before = done;
      eval_newest();
      if (done != before) last_eval = t0;
    }
    while (!stop.load() && std::chrono::steady_clock::now() - t0 < std::chrono::duration<double>(opt.poll_interval_s))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  eval_newest();  // the final version
}

}  // namespace brl::worker
