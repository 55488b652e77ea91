// Scheduler: the tessera-scheduler process wired together — informers on
// nodes and pods feeding ClusterState, leader election, the reservation
// expiry loop, and the HTTP listeners (extender verbs, /mutate, /healthz,
// /readyz, /metrics; the web dashboard on its own port, docs/dashboard.md).
//
// Readiness: the scheduler is ready once both informers have listed and the
// `tessera` policy's workload mix has been relearned from the pods listed
// (Extender::ObserveNotedPods: the pods are noted as they arrive, and counted
// as ObserveListedPods counts a list). Until then a restarted scheduler decides
// nothing: /readyz answers 503, the extender verbs answer with errors that
// kube-scheduler retries (extender.h), and it does not campaign for the
// leader Lease — a replica without a complete view must neither bind nor keep
// a ready peer from binding. (kube-scheduler runs beside it in the same pod
// and calls it on 127.0.0.1, so the readiness probe alone would not keep its
// calls away, and the pod name it uses as its identity survives a container
// restart.) Followers are ready too: they filter and prioritise, only binding
// is the leader's.
//
// Thread-safety: Start/Stop from one thread; the accessors from any.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "base/http_listener.h"
#include "base/periodic_thread.h"
#include "base/result.h"
#include "base/tls_certificate_files.h"
#include "kube/client.h"
#include "kube/informer.h"
#include "kube/leader_election.h"
#include "scheduler/cluster_state.h"
#include "scheduler/config.h"
#include "scheduler/dashboard/dashboard.h"
#include "scheduler/extender.h"
#include "scheduler/gpu_preemptor.h"
#include "scheduler/quota_watch.h"

namespace tessera::scheduler {

class Scheduler {
 public:
  // `client` talks to the API server; `config` must have passed Validate().
  Scheduler(SchedulerConfig config, std::shared_ptr<kube::Client> client);
  ~Scheduler();  // stops
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Binds the listeners and starts the informers and the election. Fails when
  // a port cannot be bound or a TLS file cannot be loaded (the message names
  // the key and the file); what was started is stopped by Stop().
  Status Start();
  // Stops the listeners (a connection still handshaking or idle in
  // keep-alive holds its worker for at most the listener's read or keep-alive
  // timeout, 5 s), then the informers and the election. Idempotent.
  void Stop();

  int port() const { return port_; }
  int webhook_port() const { return webhook_port_; }
  // The dashboard's port (0 when dashboard.enabled is false).
  int dashboard_port() const { return dashboard_ ? dashboard_->port() : 0; }
  dashboard::Dashboard* dashboard() { return dashboard_.get(); }
  bool Ready() const { return NotReadyReason().empty(); }
  // What the scheduler still waits for before it decides ("" when ready).
  std::string NotReadyReason() const;
  bool IsLeader() const;
  // Why this leader may not bind yet ("" = it may): the settle after taking
  // the lease over (SchedulerConfig::takeover_settle).
  std::string BindHeldReason() const;

  ClusterState& state() { return state_; }
  Extender& extender() { return *extender_; }
  GpuPreemptor& preemptor() { return *preemptor_; }
  std::string MetricsText() const;

 private:
  Result<nlohmann::json> GetPod(const std::string& ns, const std::string& name);
  // The GPU preemptor wired to the informers, the lease and the API.
  std::unique_ptr<GpuPreemptor> MakeGpuPreemptor();
  // One turn of the background thread. Until the view is complete: waits
  // (50 ms at a time) for the informers' first lists, then relearns the
  // workload mix from the pods (readiness) and only then starts the leader
  // election. After that: expires reservations, every reservation timeout / 4
  // (50 ms to 1 s).
  std::chrono::milliseconds Run();

  const SchedulerConfig config_;
  std::shared_ptr<kube::Client> client_;
  ClusterState state_;
  std::unique_ptr<kube::Informer> nodes_;
  std::unique_ptr<kube::Informer> pods_;
  // The namespaces with a ResourceQuota on GPU memory, for the webhook's
  // rewrite of percentages into MiB (quota_watch.h); not part of readiness.
  std::unique_ptr<GpuMemoryQuotaWatch> quotas_;
  std::unique_ptr<kube::ApiLeaseStore> lease_store_;
  std::unique_ptr<kube::LeaderElector> elector_;
  std::unique_ptr<Extender> extender_;
  // GPU-level preemption (gpu_preemptor.h): its worker runs from Start to Stop.
  std::unique_ptr<GpuPreemptor> preemptor_;
  std::unique_ptr<HttpListener> http_;
  // The webhook's certificate, read again when its files change; declared
  // before webhook_ so that it outlives the listener's handshakes.
  std::unique_ptr<TlsCertificateFiles> tls_files_;
  std::unique_ptr<HttpListener> webhook_;
  std::unique_ptr<dashboard::Dashboard> dashboard_;  // null when disabled
  PeriodicThread thread_;                            // Run()
  int port_ = 0;
  int webhook_port_ = 0;
  std::atomic<uint64_t> mutate_requests_{0};
  std::atomic<uint64_t> mutate_denied_{0};
  std::atomic<uint64_t> pod_gets_{0};
  std::atomic<bool> mix_rebuilt_{false};  // the listed pods have been observed
  bool started_up_ = false;  // Run() only (reset by Start): the mix relearned and the election started

  std::mutex mu_;
  bool started_ = false;  // guarded by mu_
};

}  // namespace tessera::scheduler
