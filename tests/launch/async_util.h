// Shared set-up of the multi-process tests: a tiny random base model with the demo's byte
// tokenizer, a run config whose reward a random model can learn within seconds, and child
// processes of the real bucketrl executable.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "launch/run_setup.h"
#include "worker/worker.h"
#include "config/run_config.h"
#include "grpo/pretrain.h"
#include "model/loader.h"
#include "protocol/bucket.h"
#include "store/object_store.h"
#include "../test_files.h"

namespace brl::test {

inline std::string make_base(const std::string& dir) {
  grpo::PretrainOptions o;
  o.hidden_size = 64;
  o.num_layers = 2;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.intermediate_size = 128;
  // init_std 0.15 rather than 0.02: with tied embeddings that small a random model's logits
  // barely move whatever the adapter does, and no reward could be learned.
  model::write_random_checkpoint(grpo::demo_model_config(o), 11, dir, torch::kFloat, 0.15);
  grpo::write_byte_tokenizer(dir);
  return dir;
}

// A task a random model can learn in seconds: varied prompts whose answer is always "7"
// (one token). A random model says 7 a few percent of the time, so some groups vary and
// GRPO raises the rate; held-out accuracy is measured on prompts never trained on.
inline RunConfig learnable_config(const std::string& base, const std::string& out) {
  std::filesystem::create_directories(out);
  std::string data = out + "/seven.jsonl";
  {
    FILE* f = std::fopen(data.c_str(), "w");
    for (int i = 0; i < 400; ++i)
      std::fprintf(f, "{\"prompt\": \"%d+%d, say seven:\", \"answer\": \"7\"}\n", i * 37 % 101, i % 13);
    std::fclose(f);
  }
  RunConfig c;
  c.model.path = base;
  c.task.name = "jsonl";
  c.task.dataset_path = data;
  c.lora.r = 4;
  c.lora.lora_alpha = 8;
  c.lora.target_modules = {"all-linear"};
  c.grpo.num_generations = 8;
  c.grpo.per_device_train_batch_size = 64;
  c.grpo.max_completion_length = 1;
  c.grpo.learning_rate = 5e-3;
  c.grpo.lr_scheduler_type = grpo::LrSchedulerType::constant;
  c.grpo.beta = 0;
  c.grpo.max_steps = 100000;
  c.train.output_dir = out;
  c.train.eval_max_examples = 64;
  c.sync.sync_interval_s = 1.0;
  c.sync.heartbeat_interval_s = 1;
  c.proxy.poll_interval_s = 0.3;
  return c;
}

// A worker `id` of the run at `bucket`, one compute thread, the base model cached under tmp.
inline worker::WorkerOptions worker_options(const TempDir& tmp, const std::string& bucket, const std::string& id) {
  worker::WorkerOptions o;
  o.bucket = bucket;
  o.id = id;
  o.cache_dir = tmp.str("cache");
  o.threads = 1;
  return o;
}

// Creates a run with cfg in `url` (default tmp/bucket), as `bucketrl init` would; returns the bucket.
inline std::string init_bucket(const TempDir& tmp, const RunConfig& cfg, const std::string& url = "") {
  std::string bucket = url.empty() ? tmp.str("bucket") : url;
  auto s = protocol::open_bucket(bucket);
  launch::init_run(*s, cfg);
  return bucket;
}

// A fresh prefix on the RGW test server for one test: s3://$BRL_S3_TEST_BUCKET/NAME-<pid>-<n>.
// Throws (the test fails) when the server's environment is not set.
inline std::string s3_test_url(const std::string& name) {
  for (const char* v : {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "BRL_S3_TEST_BUCKET"})
    if (!std::getenv(v) || !*std::getenv(v))
      throw std::runtime_error(std::string(v) +
                               " is not set: run scripts/s3-server.sh start && source .cache/s3/env.sh");
  return "s3://" + std::string(std::getenv("BRL_S3_TEST_BUCKET")) + "/" + name + "-" + std::to_string(getpid()) + "-" +
         std::to_string(std::chrono::system_clock::now().time_since_epoch().count() % 1000000007);
}

struct Proc {
  pid_t pid = -1;
  std::string log;
};

// Where a child runs: a network namespace (a name under /var/run/netns, as `ip netns add`
// makes; "" = the test's own) and environment variables set on top of the test's.
struct Placement {
  std::string netns;
  std::vector<std::pair<std::string, std::string>> env;
};

// Starts BRL_EXE with args, output appended to log.
inline Proc start(const std::vector<std::string>& args, const std::string& log, const Placement& at = {}) {
  Proc p{-1, log};
  p.pid = fork();
  if (p.pid == 0) {
    // A test killed before its clean-up leaves no process behind (retrying forever, or
    // keeping a test's network namespace alive).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    FILE* f = std::fopen(log.c_str(), "a");
    if (f) {
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
    }
    if (!at.netns.empty()) {
      int fd = open(("/var/run/netns/" + at.netns).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
        std::perror(("entering network namespace " + at.netns).c_str());
        _exit(126);
      }
      close(fd);
    }
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    for (auto& [k, v] : at.env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv{const_cast<char*>(BRL_EXE)};
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(BRL_EXE, argv.data());
    _exit(127);
  }
  return p;
}

// Signals and reaps; returns the wait status.
inline int stop(Proc& p, int sig = SIGTERM) {
  if (p.pid <= 0) return 0;
  kill(p.pid, sig);
  int st = 0;
  waitpid(p.pid, &st, 0);
  p.pid = -1;
  return st;
}

// Runs BRL_EXE with args to its end; returns the wait status.
inline int run_to_end(const std::vector<std::string>& args, const std::string& log) {
  Proc p = start(args, log);
  int st = 0;
  waitpid(p.pid, &st, 0);
  return st;
}

// The proxy and `workers` workers of one run as real processes, each killable and
// restartable; logs in dir/<name>.log (proxy, w0, w1, ...), one model cache for all unless
// each is to fetch the model itself (as on separate hosts).
struct Cluster {
  std::string bucket, dir;
  int workers = 3;
  bool cache_per_process = false;                        // dir/cache-<name> instead of dir/cache
  std::vector<std::string> proxy_extra, worker_extra;    // more arguments for every start
  std::vector<Placement> placement;                      // per process, where given
  std::vector<std::pair<std::string, std::string>> env;  // for every process (placement's come after)
  std::vector<Proc> procs;                               // [0] the proxy, [1 + i] worker i

  std::string name(size_t k) const { return k == 0 ? "proxy" : "w" + std::to_string(k - 1); }
  std::string log(size_t k) const { return dir + "/" + name(k) + ".log"; }
  std::string cache(size_t k) const { return dir + (cache_per_process ? "/cache-" + name(k) : "/cache"); }
  std::vector<std::string> args(size_t k) const {
    std::vector<std::string> a{"proxy", "--bucket", bucket};
    if (k > 0)
      a = {"worker",
           "--bucket",
           bucket,
           "--id",
           name(k),
           "--shard",
           std::to_string(k - 1) + "/" + std::to_string(workers),
           "--threads",
           "1",
           "--cache-dir",
           cache(k)};
    for (auto& x : k == 0 ? proxy_extra : worker_extra) a.push_back(x);
    return a;
  }
  void start(size_t k) {
    Placement at = k < placement.size() ? placement[k] : Placement{};
    at.env.insert(at.env.begin(), env.begin(), env.end());
    procs.at(k) = test::start(args(k), log(k), at);
  }
  void start_all() {
    procs.resize(static_cast<size_t>(workers) + 1);
    for (size_t k = 0; k < procs.size(); ++k) start(k);
  }
  // Clean stop: the workers upload their last delta and exit, then the proxy folds it.
  // The wait statuses, per process.
  std::vector<int> stop_all() {
    std::vector<int> st(procs.size());
    for (size_t k = 1; k < procs.size(); ++k) st[k] = test::stop(procs[k]);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    if (!procs.empty()) st[0] = test::stop(procs[0]);
    return st;
  }
};

inline std::string read_text(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "";
  std::string s;
  char b[4096];
  size_t n;
  while ((n = std::fread(b, 1, sizeof b, f)) > 0) s.append(b, n);
  std::fclose(f);
  return s;
}

// Where any of the secrets (label, text) appears: in any file under dir (logs, a directory
// bucket, caches) but `except`, and in any object of `bucket` if given. Each hit: "LABEL in PLACE".
struct SecretSearch {
  std::vector<std::string> hits;
  int files = 0, logs = 0, objects = 0;  // searched; logs: non-empty *.log files
};
inline SecretSearch where_found(const std::vector<std::pair<std::string, std::string>>& secrets,
                                const std::filesystem::path& dir, store::ObjectStore* bucket = nullptr,
                                const std::filesystem::path& except = {}) {
  SecretSearch r;
  auto search = [&](const std::string& text, const std::string& place) {
    for (auto& [label, secret] : secrets)
      if (!secret.empty() && text.find(secret) != std::string::npos) r.hits.push_back(label + " in " + place);
  };
  for (auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path() == except) continue;
    std::string text = read_text(e.path().string());
    ++r.files;
    r.logs += e.path().extension() == ".log" && !text.empty();
    search(text, e.path().string());
  }
  if (bucket)
    for (auto& o : bucket->list_all("").value()) {
      ++r.objects;
      search(bucket->get(o.key).value(), bucket->describe() + "/" + o.key);
    }
  return r;
}

}  // namespace brl::test
