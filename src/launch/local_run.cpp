#include "launch/local_run.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "launch/run_setup.h"
#include "lora/lora.h"
#include "model/device.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/file.h"
#include "util/log.h"
#include "util/progress.h"

extern char** environ;

namespace brl::launch {

namespace fs = std::filesystem;

namespace {

// A device setting that leaves the GPU to each process (what spread_device may spread).
bool names_no_gpu(const std::string& device) { return device == "auto" || device == "cuda"; }

struct Child {
  std::string name, log;
  std::vector<std::string> args, env;  // env: extra NAME=value entries
  pid_t pid = -1;
  int restarts = 0;
  bool exited = false;
  int status = 0;
};

// fork + exec with the log as stdout/stderr; the child dies with us (PDEATHSIG).
void spawn(const std::string& exe, Child& c) {
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string s(*e);
    bool overridden = false;
    for (auto& x : c.env) overridden = overridden || s.rfind(x.substr(0, x.find('=') + 1), 0) == 0;
    if (!overridden) envs.push_back(s);
  }
  for (auto& x : c.env) envs.push_back(x);
  std::vector<char*> argv{const_cast<char*>(exe.c_str())}, envp;
  for (auto& a : c.args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : envs) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int fd = open(c.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw UserError("cannot open log file " + c.log + ": " + std::strerror(errno));
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) throw UserError(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    dup2(fd, 1);
    dup2(fd, 2);
    execve(exe.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  close(fd);
  c.pid = pid;
  c.exited = false;
}

bool reap(Child& c, bool block) {
  if (c.pid < 0 || c.exited) return true;
  int st = 0;
  pid_t r = waitpid(c.pid, &st, block ? 0 : WNOHANG);
  if (r == c.pid) {
    c.exited = true;
    c.status = st;
    return true;
  }
  return false;
}

// SIGTERM, then SIGKILL after `grace` seconds.
void stop_children(std::vector<Child*> cs, double grace) {
  for (auto* c : cs)
    if (!c->exited && c->pid > 0) kill(c->pid, SIGTERM);
  auto t0 = Clock::now();
  for (auto* c : cs)
    while (!reap(*c, false)) {
      if (std::chrono::duration<double>(Clock::now() - t0).count() > grace) {
        LOG_WARN("run: {} did not stop within {:.0f} s: killing it", c->name, grace);
        kill(c->pid, SIGKILL);
        reap(*c, true);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

std::string describe_exit(int st) {
  if (WIFEXITED(st)) return "exit code " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return std::string("signal ") + strsignal(WTERMSIG(st));
  return "status " + std::to_string(st);
}

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw UserError("cannot find this executable (/proc/self/exe): " + ec.message());
  return p.string();
}

}  // namespace

std::string export_adapter(const std::string& bucket, int64_t version, const std::string& dir) {
  auto store = protocol::open_bucket(bucket);
  auto run = protocol::read_run(*store).value();
  if (version < 0) version = protocol::newest_version(*store).value();
  auto ver = protocol::read_version(*store, version).value();  // a valid adapter before it is exported
  const std::string& bytes = ver.payload;
  RunConfig cfg;
  cfg.apply_json(run.config, "run.json");
  fs::create_directories(dir);
  write_file((fs::path(dir) / "adapter_model.safetensors").string(), bytes);
  lora::write_peft_config(cfg.lora, dir, cfg.model.path);
  return dir;
}

TargetWindow::TargetWindow(int window, double target)
    : window_(static_cast<size_t>(std::max(1, window))), target_(target) {}

bool TargetWindow::add(double value) {
  last_.push_back(value);
  if (last_.size() > window_) last_.erase(last_.begin());
  return last_.size() == window_ && mean() >= target_;
}

double TargetWindow::mean() const {
  double sum = 0;
  for (double v : last_) sum += v;
  return last_.empty() ? 0 : sum / static_cast<double>(last_.size());
}

std::string spread_device(const std::string& device, int gpus, int index) {
  if (!names_no_gpu(device) || gpus < 2) return "";
  return "cuda:" + std::to_string(index % gpus);
}

LocalRunSummary run_local(RunConfig cfg, const LocalRunOptions& opt, const std::atomic<bool>& stop) {
  auto t0 = Clock::now();
  const int64_t t0_ms = protocol::now_ms();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  cfg.validate();
  if (opt.target_metric == TargetMetric::pass_at_1 && opt.target_accuracy > 0 && cfg.train.eval_pass_k == 0)
    throw UserError("run: a pass@1 target needs the evaluator's pass@k",
                    "leave train.eval_pass_k at -1 (k = G) or set k >= 1");
  if (opt.workers < 1) throw UserError("run: --workers " + std::to_string(opt.workers) + " must be >= 1");
  const std::string out = cfg.train.output_dir;
  LocalRunSummary sum;
  sum.bucket = opt.bucket.empty() ? (fs::path(out) / "bucket").string() : opt.bucket;
  const std::string logs = opt.log_dir.empty() ? (fs::path(out) / "logs").string() : opt.log_dir;
  fs::create_directories(logs);
  auto store = protocol::open_bucket(sum.bucket);
  if (auto h = store->head(protocol::run_key()); h) {
    LOG_INFO("run: continuing the run in {}", store->describe());
  } else {
    init_run(*store, cfg);
  }
  const std::string exe = opt.exe.empty() ? self_exe() : opt.exe;
  const std::string cache = (fs::path(out) / "cache").string();
  int cores = std::max(1u, std::thread::hardware_concurrency());
  int per_worker = std::max(1, cores / opt.workers);
  // One thread pool per process: OpenBLAS and OpenMP must not each start one per core.
  // Children write to log files: plain progress lines there, even if BRL_PROGRESS=bar here.
  auto threads_env = [](int n) {
    return std::vector<std::string>{"OMP_NUM_THREADS=" + std::to_string(n), "OPENBLAS_NUM_THREADS=" + std::to_string(n),
                                    "BRL_PROGRESS=lines"};
  };

  // GPUs are counted only where the device could be spread: a CPU run never touches CUDA.
  const int gpus = names_no_gpu(cfg.model.device) ? static_cast<int>(model::cuda_devices().size()) : 0;
  auto on_device = [&](Child& c, int index) {
    if (auto d = spread_device(cfg.model.device, gpus, index); !d.empty()) c.args.insert(c.args.end(), {"--device", d});
  };
  if (gpus > 1) LOG_INFO("run: {} GPUs: worker i on cuda:(i mod {}), the evaluator after the last worker", gpus, gpus);

  std::vector<Child> kids;
  kids.push_back({"proxy", (fs::path(logs) / "proxy.log").string(), {"proxy", "--bucket", sum.bucket}, threads_env(1)});
  if (!opt.http.empty()) kids.back().args.insert(kids.back().args.end(), {"--http", opt.http});
  for (int i = 0; i < opt.workers; ++i) {
    Child c{"worker-" + std::to_string(i),
            (fs::path(logs) / ("worker-" + std::to_string(i) + ".log")).string(),
            {"worker", "--bucket", sum.bucket, "--id", "w" + std::to_string(i), "--shard",
             std::to_string(i) + "/" + std::to_string(opt.workers), "--threads", std::to_string(per_worker),
             "--cache-dir", cache},
            threads_env(per_worker)};
    if (i < static_cast<int>(opt.slowdown.size()) && opt.slowdown[i] != 1)
      c.args.insert(c.args.end(), {"--slowdown", std::to_string(opt.slowdown[i])});
    if (cfg.grpo.max_steps > 0) c.args.insert(c.args.end(), {"--max-steps", std::to_string(cfg.grpo.max_steps)});
    on_device(c, i);
    kids.push_back(c);
  }
  if (opt.evaluator) {
    kids.push_back({"evaluator",
                    (fs::path(logs) / "evaluator.log").string(),
                    {"evaluator", "--bucket", sum.bucket, "--cache-dir", cache, "--threads", "1", "--min-interval",
                     std::to_string(opt.eval_interval_s)},
                    threads_env(1)});
    on_device(kids.back(), opt.workers);
  }
  for (auto& c : kids) spawn(exe, c);
  LOG_INFO("run: proxy, {} workers ({} threads each){}; bucket {}; logs in {}", opt.workers, per_worker,
           opt.evaluator ? " and an evaluator" : "", sum.bucket, logs);

  int64_t shown = -1, shown_eval = -1;
  bool target_hit = false;
  TargetWindow target(opt.target_window, opt.target_accuracy);
  auto workers_done = [&] {
    for (auto& c : kids)
      if (c.name.rfind("worker-", 0) == 0 && !(c.exited && WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0))
        return false;
    return true;
  };
  // On a terminal a live line under the per-version log lines; elsewhere those lines suffice.
  ProgressOptions po;
  po.label = "run";
  po.unit = ProgressUnit::kSeconds;
  po.total = static_cast<int64_t>(opt.time_limit_s);
  po.lines = false;
  Progress status(po);
  sum.first_eval.version = sum.last_eval.version = -1;
  auto note_eval = [&](const protocol::EvalRecord& e) {
    if (sum.first_eval.version < 0) sum.first_eval = e, sum.initial_accuracy = e.accuracy;
    sum.last_eval = e;
    sum.final_accuracy = e.accuracy;
    sum.best_accuracy = std::max(sum.best_accuracy, e.accuracy);
  };
  const bool on_pass = opt.target_metric == TargetMetric::pass_at_1;
  auto status_text = [&] {
    std::string t = fmt::format("v{}", std::max<int64_t>(shown, 0));
    if (shown_eval >= 0)
      t += fmt::format("  {} {:.3f} at v{}", on_pass ? "pass@1" : "accuracy",
                       on_pass ? sum.last_eval.pass_at_1 : sum.final_accuracy, shown_eval);
    if (opt.target_accuracy > 0) t += fmt::format(" (target {:.2f})", opt.target_accuracy);
    return t;
  };
  while (!stop.load() && !target_hit) {
    status.update(static_cast<int64_t>(elapsed()), status_text());
    if (opt.time_limit_s > 0 && elapsed() > opt.time_limit_s) break;
    for (auto& c : kids) {
      if (!reap(c, false) || c.pid < 0 || !c.exited) continue;
      bool clean = WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0 && c.name.rfind("worker-", 0) == 0;
      if (clean) continue;  // a worker that reached its step limit
      // Anything else that dies is restarted: the bucket has all it needs to continue.
      if (c.restarts >= 5)
        throw UserError("run: " + c.name + " failed 5 times (" + describe_exit(c.status) + "); see " + c.log);
      LOG_WARN("run: {} stopped ({}); restarting it (see {})", c.name, describe_exit(c.status), c.log);
      ++c.restarts;
      spawn(exe, c);
    }
    if (workers_done()) break;
    if (auto nv = protocol::newest_version(*store); nv && *nv != shown) {
      shown = *nv;
      std::string line = "v" + std::to_string(shown);
      if (auto m = protocol::read_manifest(*store, shown); m && shown > 0)
        line += fmt::format("  {} updates  train reward {:.3f}", m->updates.size(), m->stats.value("reward_mean", 0.0));
      LOG_INFO("run: {:.0f}s  {}", elapsed(), line);
    }
    if (auto evs = store->list_all(protocol::evals_prefix()); evs && !evs->empty()) {
      auto& last = evs->back();
      auto body = store->get(last.key);
      if (body)
        if (auto e = protocol::EvalRecord::parse(*body, last.key); e && e->version != shown_eval) {
          shown_eval = e->version;
          note_eval(*e);
          LOG_INFO("run: {:.0f}s  held-out accuracy {:.3f}{} at v{}", elapsed(), e->accuracy,
                   e->k ? fmt::format(", pass@1 {:.3f}, pass@{} {:.3f}", e->pass_at_1, e->k, e->pass_at_k) : "",
                   e->version);
          if (opt.target_accuracy > 0 && target.add(on_pass ? e->pass_at_1 : e->accuracy)) {
            target_hit = true;
            sum.seconds_to_target = elapsed();
            if (auto m = protocol::read_manifest(*store, e->version); m)
              sum.version_seconds_to_target = static_cast<double>(m->created_ms - t0_ms) / 1000.0;
          }
        }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  status.finish(status_text());

  LOG_INFO("run: stopping (workers upload their last delta, the proxy folds it)");
  std::vector<Child*> workers, others;
  for (auto& c : kids) (c.name.rfind("worker-", 0) == 0 ? workers : others).push_back(&c);
  stop_children(workers, 60);
  std::vector<Child*> proxy{&kids[0]};
  stop_children(proxy, 60);
  if (opt.evaluator) {
    std::vector<Child*> ev{&kids.back()};
    stop_children(ev, 120);
  }
  if (auto evs = store->list_all(protocol::evals_prefix()); evs && !evs->empty())
    if (auto body = store->get(evs->back().key); body)
      if (auto e = protocol::EvalRecord::parse(*body, evs->back().key); e) note_eval(*e);
  sum.verify = protocol::verify_run(*store);
  sum.versions = sum.verify.newest;
  sum.updates = sum.verify.updates_folded;
  sum.adapter_dir = export_adapter(sum.bucket, -1, (fs::path(out) / "adapter").string());
  sum.seconds = elapsed();
  return sum;
}

}  // namespace brl::launch
