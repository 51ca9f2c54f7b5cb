#include "worker/heartbeat.h"

#include <chrono>

#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "util/log.h"

namespace brl::worker {

HeartbeatSender::HeartbeatSender(const std::string& bucket, protocol::Heartbeat first, double interval_s)
    : store_(protocol::open_bucket(bucket)), hb_(std::move(first)), interval_(interval_s), th_([this] { loop(); }) {}

HeartbeatSender::~HeartbeatSender() {
  {
    std::lock_guard<std::mutex> l(mu_);
    done_ = true;
  }
  cv_.notify_all();
  th_.join();
  beat();  // the final state
}

void HeartbeatSender::beat() {
  protocol::Heartbeat h;
  {
    std::lock_guard<std::mutex> l(mu_);
    hb_.time_ms = protocol::now_ms();
    h = hb_;
  }
  if (Status st = store_->put(protocol::heartbeat_key(h.worker), h.to_json().dump()); !st)
    LOG_WARN("worker {}: heartbeat failed: {}", h.worker, st.to_string());
}

void HeartbeatSender::loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!done_) {
    l.unlock();
    beat();
    l.lock();
    cv_.wait_for(l, std::chrono::duration<double>(interval_));
  }
}

}  // namespace brl::worker
