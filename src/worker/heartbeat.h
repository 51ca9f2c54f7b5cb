// A worker's heartbeat (heartbeats/<worker>.json): the training thread fills in the fields,
// a background thread puts the record every interval (and on beat_now), the destructor puts
// the final state.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "protocol/records.h"
#include "store/object_store.h"

namespace brl::worker {

class HeartbeatSender {
 public:
  HeartbeatSender(const std::string& bucket, protocol::Heartbeat first, double interval_s);
  ~HeartbeatSender();
  HeartbeatSender(const HeartbeatSender&) = delete;
  HeartbeatSender& operator=(const HeartbeatSender&) = delete;

  // f(Heartbeat&) under the lock: the next beat carries the change.
  template <class F>
  void update(F f) {
    std::lock_guard<std::mutex> l(mu_);
    f(hb_);
  }
  void beat_now() { cv_.notify_all(); }

 private:
  void beat();
  void loop();

  std::unique_ptr<store::ObjectStore> store_;
  std::mutex mu_;
  std::condition_variable cv_;
  protocol::Heartbeat hb_;
  double interval_;
  bool done_ = false;
  std::thread th_;  // last: started once everything it reads is
};

}  // namespace brl::worker
