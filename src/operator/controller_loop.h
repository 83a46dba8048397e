// The loop every reconciler runs under (controller-runtime's
// reconcileHandler): a key from the work queue, the reconcile timed and
// counted, and its result turned into what the queue does next (result.h):
// done; come back after a delay; retry with the queue's backoff (a transient
// error, or an exception); or wait for the next change (a terminal error,
// logged).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstddef>
#include <functional>
#include <string>

#include "gracekeeper/deployment/result.h"
#include "gracekeeper/kube/workqueue.h"
#include "gracekeeper/metrics/metrics.h"

namespace gracekeeper::controller {

class ControllerLoop {
 public:
  using Reconcile = std::function<boost::asio::awaitable<ReconcileResult>(std::string key)>;

  // `name` labels the metrics and log lines ("deployment", ...). The queue
  // and the metrics must outlive the loop.
  ControllerLoop(std::string name, kube::AsyncWorkQueue& queue, metrics::Metrics& metrics,
                 Reconcile reconcile)
      : name_(std::move(name)),
        queue_(queue),
        metrics_(metrics),
        reconcile_(std::move(reconcile)) {}
  ControllerLoop(const ControllerLoop&) = delete;
  ControllerLoop& operator=(const ControllerLoop&) = delete;

  // Starts `workers` workers on the queue (at least one).
  void run(std::size_t workers);
  // One key: the queue's side of the contract. true forgets the key's
  // backoff (done, requeued after a delay, or a terminal error); false
  // retries it with backoff.
  boost::asio::awaitable<bool> process(std::string key);

 private:
  std::string name_;
  kube::AsyncWorkQueue& queue_;
  metrics::Metrics& metrics_;
  Reconcile reconcile_;
};

}  // namespace gracekeeper::controller
