// Fault injection decorator (see fault_store.h).
#include "store/fault_store.h"

#include <chrono>
#include <thread>

namespace brl::store {

FaultStore::FaultStore(std::shared_ptr<ObjectStore> inner, FaultOptions opt)
    : inner_(std::move(inner)), opt_(opt), rng_(opt.seed) {}

FaultCounts FaultStore::counts() const {
  std::lock_guard<std::mutex> lk(mu_);
  return counts_;
}

void FaultStore::set_options(const FaultOptions& opt) {
  std::lock_guard<std::mutex> lk(mu_);
  opt_ = opt;
}

FaultStore::Fault FaultStore::draw(const char* op) {
  int hang_ms = 0;
  Fault f = Fault::kNone;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++counts_.calls;
    std::uniform_real_distribution<double> u(0.0, 1.0);
    // Three draws per call whatever the outcome, so the sequence does not depend on rates.
    double a = u(rng_), b = u(rng_), c = u(rng_);
    if (a < opt_.fail_rate) {
      f = Fault::kFail;
      ++counts_.failed;
    } else if (b < opt_.reset_rate) {
      f = Fault::kReset;
      ++counts_.reset;
    }
    if (f == Fault::kNone && c < opt_.hang_rate) {
      hang_ms = opt_.hang_ms;
      ++counts_.hung;
    }
  }
  if (hang_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hang_ms));
  (void)op;
  return f;
}

Status FaultStore::injected(const char* op, const char* what) {
  return {StatusCode::kTransient, std::string("injected fault in ") + op + ": " + what};
}

Status FaultStore::put(const std::string& key, const std::string& data, const PutOptions& opt) {
  Fault f = draw("put");
  if (f == Fault::kFail) return injected("put", "connection refused");
  Status st = inner_->put(key, data, opt);
  if (f == Fault::kReset && st) return injected("put", "connection reset before the response");
  return st;
}

Status FaultStore::put_file(const std::string& key, const std::string& path, const PutOptions& opt) {
  Fault f = draw("put_file");
  if (f == Fault::kFail) return injected("put_file", "connection refused");
  Status st = inner_->put_file(key, path, opt);
  if (f == Fault::kReset && st) return injected("put_file", "connection reset before the response");
  return st;
}

Result<std::string> FaultStore::get(const std::string& key, const GetOptions& opt) {
  Fault f = draw("get");
  if (f == Fault::kFail) return injected("get", "connection refused");
  auto r = inner_->get(key, opt);
  if (f == Fault::kReset && r)
    return Status(StatusCode::kTransient, "injected fault in get: connection reset after " +
                                              std::to_string(r->size() / 2) + " of " + std::to_string(r->size()) +
                                              " bytes");
  return r;
}

Status FaultStore::get_file(const std::string& key, const std::string& path) {
  Fault f = draw("get_file");
  if (f == Fault::kFail) return injected("get_file", "connection refused");
  // A body cut off mid-stream: a real client discards its temporary file, so `path` is
  // left as it was. Simulated by not calling the inner store at all.
  if (f == Fault::kReset) return injected("get_file", "connection reset mid-body");
  return inner_->get_file(key, path);
}

Result<ObjectInfo> FaultStore::head(const std::string& key) {
  Fault f = draw("head");
  if (f != Fault::kNone) return injected("head", "connection reset");
  return inner_->head(key);
}

Result<ListPage> FaultStore::list(const ListOptions& opt) {
  Fault f = draw("list");
  if (f != Fault::kNone) return injected("list", "connection reset");
  return inner_->list(opt);
}

Status FaultStore::remove(const std::string& key) {
  Fault f = draw("remove");
  if (f == Fault::kFail) return injected("remove", "connection refused");
  Status st = inner_->remove(key);
  if (f == Fault::kReset && st) return injected("remove", "connection reset before the response");
  return st;
}

}  // namespace brl::store
