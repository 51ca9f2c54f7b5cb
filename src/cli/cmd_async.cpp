// The commands of a run over a bucket: `init` (create it), `worker`, `proxy`, `evaluator`
// (the three roles), `run` (all of them on one machine), `verify` (check the invariants from
// the bucket alone) and `export` (a global version as a PEFT adapter folder).
#include <cstdio>
#include <filesystem>

#include "cli/command.h"
#include "config/run_config.h"
#include "launch/aten_factorizer.h"
#include "launch/local_run.h"
#include "launch/run_setup.h"
#include "obs/proxy_http.h"
#include "protocol/bucket.h"
#include "protocol/verify.h"
#include "proxy/proxy.h"
#include "util/error.h"
#include "util/log.h"
#include "worker/evaluator.h"
#include "worker/worker.h"

using namespace brl;

namespace {

RunConfig load_config(const std::string& path, const std::vector<std::string>& sets) {
  RunConfig cfg = path.empty() ? RunConfig() : RunConfig::from_file(path);
  cfg.apply_overrides(sets);
  cfg.validate();
  return cfg;
}

void parse_shard(const std::string& s, int* shard, int* n) {
  if (s.empty()) return;
  if (std::sscanf(s.c_str(), "%d/%d", shard, n) != 2)
    throw UserError("--shard " + s + " is not I/N", "e.g. --shard 0/2 for the first of two workers");
}

cli::RunFn setup_init(CLI::App& app) {
  static std::string bucket, model, config;
  static std::vector<std::string> sets;
  app.add_option("--bucket", bucket, "s3://bucket/prefix or a directory")->required();
  app.add_option("--model", model, "base HF model folder (default: [model] path)");
  app.add_option("--config", config, "run.toml");
  app.add_option("--set", sets, "override a key: section.key=value (repeatable)");
  return [] {
    RunConfig cfg = load_config(config, sets);
    if (!model.empty()) cfg.model.path = model;
    cli::init_compute(1);
    auto store = protocol::open_bucket(bucket);
    auto run = launch::init_run(*store, cfg);
    std::printf("run %s created in %s (base %s); start workers with: bucketrl worker --bucket %s\n", run.run_id.c_str(),
                store->describe().c_str(), run.base_sha256.substr(0, 16).c_str(), bucket.c_str());
    return 0;
  };
}
cli::Register init_reg("init", "create a run in a bucket: upload the base model, write run.json and version 0",
                       setup_init);

cli::RunFn setup_worker(CLI::App& app) {
  static worker::WorkerOptions o;
  static std::string shard;
  app.add_option("--bucket", o.bucket, "s3://bucket/prefix or a directory")->required();
  app.add_option("--id", o.id,
                 "worker id (default: <host>-<pid>); under a fixed id a restarted worker resumes its trainer state");
  app.add_option("--shard", shard, "prompt shard I/N (default 0/1: all prompts)");
  app.add_option("--threads", o.threads, "compute threads (default: train.threads of the run, 0 = all cores)");
  app.add_option("--cache-dir", o.cache_dir, "base model and trainer state cache (default ~/.cache/bucketrl)");
  app.add_option("--time-limit", o.time_limit_s, "stop after this many seconds");
  app.add_option("--max-steps", o.max_steps, "stop after this many GRPO steps");
  app.add_option("--slowdown", o.slowdown, "benchmarks: run this many times slower");
  app.add_option("--signing-key", o.signing_key,
                 "Ed25519 private key (PEM) to sign updates with (env BRL_SIGNING_KEY_FILE)");
  app.add_option("--device", o.device,
                 "where to generate and train: "
                 "cpu | cuda | cuda:N | auto (a GPU when this machine has one)"
                 " (default: the run's model.device)");
  return [] {
    parse_shard(shard, &o.shard, &o.num_shards);
    cli::init_compute(o.threads);
    auto s = worker::run_worker(o, cli::stop_on_signals());
    std::printf("worker: %lld steps, %lld updates (%llu bytes), %lld versions adopted\n",
                static_cast<long long>(s.steps), static_cast<long long>(s.updates),
                static_cast<unsigned long long>(s.bytes_uploaded), static_cast<long long>(s.adopted));
    if (s.lost_steps > 0)
      std::fprintf(stderr, "worker: the last %lld steps could not be uploaded: %s\n",
                   static_cast<long long>(s.lost_steps), s.last_error.c_str());
    return s.lost_steps > 0 ? 1 : 0;
  };
}
cli::Register worker_reg("worker", "train on a run's prompts and upload adapter deltas to the bucket", setup_worker);

// The proxy's in-memory state after a poll, for its HTTP endpoints.
obs::ProxyLive live_state(const proxy::Proxy& p) {
  obs::ProxyLive l;
  const auto& c = p.counters();
  l.version = p.version();
  l.published = c.published;
  l.accepted = c.accepted;
  l.rejected = c.rejected;
  l.polls = c.polls;
  l.gc_failures = c.gc_failures;
  l.rejected_by_reason = c.rejected_by_reason;
  for (auto& [name, w] : p.workers()) l.workers[name] = {w.beat, w.health};
  return l;
}

cli::RunFn setup_proxy(CLI::App& app) {
  static proxy::ProxyOptions o;
  app.add_option("--bucket", o.bucket, "s3://bucket/prefix or a directory")->required();
  app.add_option("--id", o.id, "proxy id in manifests (default: proxy-<host>-<pid>)");
  app.add_option("--time-limit", o.time_limit_s, "stop after this many seconds");
  app.add_option("--max-version", o.max_version, "stop after publishing this version");
  static std::string http = obs::kDefaultProxyHttp, token_file;
  app.add_option("--http", http, "serve /health, /status, /metrics and the dashboard on ADDR:PORT (off: none)")
      ->capture_default_str();
  app.add_option("--http-token-file", token_file,
                 "token required by --http on an address other than 127.x (default: env BRL_PROXY_TOKEN)");
  return [] {
    const auto& stop = cli::stop_on_signals();
    auto web = obs::start_proxy_http(o.bucket, http, token_file);  // /health: 503 while the run loads
    if (web) o.on_poll = [m = web->monitor.get()](const proxy::Proxy& p) { m->update(live_state(p)); };
    o.factorizer = &launch::aten_factorizer();
    proxy::Proxy p(o);
    if (web) {
      web->monitor->update(live_state(p));
      web->monitor->set_run(p.run_description(), p.id(), p.version());
    }
    p.run(stop);
    auto& c = p.counters();
    std::string why;
    for (auto& [reason, n] : c.rejected_by_reason)
      why += (why.empty() ? " (" : ", ") + reason + " " + std::to_string(n);
    std::printf("proxy: at version %lld; published %lld, accepted %lld, rejected %lld updates%s\n",
                static_cast<long long>(p.version()), static_cast<long long>(c.published),
                static_cast<long long>(c.accepted), static_cast<long long>(c.rejected),
                why.empty() ? "" : (why + ")").c_str());
    return 0;
  };
}
cli::Register proxy_reg("proxy", "fold worker updates into new global versions; watch worker health", setup_proxy);

cli::RunFn setup_evaluator(CLI::App& app) {
  static worker::EvaluatorOptions o;
  app.add_option("--bucket", o.bucket, "s3://bucket/prefix or a directory")->required();
  app.add_option("--cache-dir", o.cache_dir, "base model cache (default ~/.cache/bucketrl)");
  app.add_option("--threads", o.threads, "compute threads");
  app.add_option("--min-interval", o.min_interval_s, "at most one evaluation per this many seconds");
  app.add_option("--device", o.device,
                 "where to evaluate: "
                 "cpu | cuda | cuda:N | auto (a GPU when this machine has one)"
                 " (default: the run's model.device)");
  return [] {
    cli::init_compute(o.threads);
    worker::run_evaluator(o, cli::stop_on_signals());
    return 0;
  };
}
cli::Register evaluator_reg("evaluator", "evaluate each new global version on held-out prompts (evals/ in the bucket)",
                            setup_evaluator);

cli::RunFn setup_run(CLI::App& app) {
  static std::string config;
  static std::vector<std::string> sets;
  static launch::LocalRunOptions o;
  app.add_option("--config", config, "run.toml");
  app.add_option("--set", sets, "override a key: section.key=value (repeatable)");
  app.add_option("--bucket", o.bucket, "bucket URL or directory (default <train.output_dir>/bucket)");
  app.add_option("--workers", o.workers, "worker processes")->capture_default_str();
  app.add_option("--time-limit", o.time_limit_s, "stop after this many seconds");
  app.add_option("--target-accuracy", o.target_accuracy, "stop when held-out accuracy reaches this");
  app.add_option("--target-window", o.target_window,
                 "with --target-accuracy: compare the mean of the last N evaluations (1 = the latest)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--eval-interval", o.eval_interval_s, "at most one held-out evaluation per this many seconds");
  static bool barrier = false;
  app.add_flag("--sync", barrier,
               "the synchronous baseline: a barrier per round of sync_steps steps (sync.mode = sync)");
  app.add_option("--slowdown", o.slowdown, "benchmarks: per-worker slowdown factors, e.g. 1 1 1 4");
  o.http = obs::kDefaultProxyHttp;
  app.add_option("--http", o.http, "the proxy's dashboard and endpoints on ADDR:PORT (off: none)")
      ->capture_default_str();
  static std::string device;
  app.add_option("--device", device,
                 "where the workers and the evaluator run: "
                 "cpu | cuda | cuda:N | auto (a GPU when this machine has one)"
                 " (sets model.device); on several GPUs, auto and cuda give them one each in turn");
  return [] {
    if (barrier) sets.push_back("sync.mode=sync");
    if (!device.empty()) sets.push_back("model.device=" + device);
    RunConfig cfg = load_config(config, sets);
    cli::init_compute(1);
    if (auto a = obs::parse_listen_address(o.http); !a.off)
      LOG_INFO("run: dashboard at http://{}:{}/ (served by the proxy; see its log if it does not answer)", a.host,
               a.port);
    auto s = launch::run_local(cfg, o, cli::stop_on_signals());
    std::printf("run: %lld versions from %lld updates in %.0f s; held-out accuracy %.3f -> %.3f; adapter: %s\n%s\n",
                static_cast<long long>(s.versions), static_cast<long long>(s.updates), s.seconds, s.initial_accuracy,
                s.final_accuracy, s.adapter_dir.c_str(), s.verify.summary().c_str());
    return s.verify.ok() ? 0 : 3;
  };
}
cli::Register run_reg("run", "one machine: a local bucket, the proxy, N workers and an evaluator", setup_run);

cli::RunFn setup_verify(CLI::App& app) {
  static std::string bucket;
  app.add_option("--bucket", bucket, "s3://bucket/prefix or a directory")->required();
  return [] {
    auto store = protocol::open_bucket(bucket);
    auto r = protocol::verify_run(*store);
    std::printf("%s\n", r.summary().c_str());
    return r.ok() ? 0 : 3;
  };
}
cli::Register verify_reg("verify", "check a run's invariants from the bucket alone", setup_verify);

cli::RunFn setup_export(CLI::App& app) {
  static std::string bucket, out;
  static int64_t version = -1;
  app.add_option("--bucket", bucket, "s3://bucket/prefix or a directory")->required();
  app.add_option("--version", version, "global version (default: the newest)");
  app.add_option("--out", out, "output folder")->required();
  return [] {
    std::printf("adapter written to %s\n", launch::export_adapter(bucket, version, out).c_str());
    return 0;
  };
}
cli::Register export_reg("export", "write a global version of a run as a PEFT adapter folder", setup_export);

}  // namespace
