#include "scheduler/scheduler.h"

#include <httplib.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "base/log.h"
#include "base/prometheus_text.h"
#include "kube/typed_api.h"
#include "scheduler/preemption.h"
#include "scheduler/projection.h"
#include "scheduler/webhook.h"

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;

void Reply(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void ReplyText(httplib::Response& res, int status, std::string body) {
  res.status = status;
  res.body = std::move(body);  // set_content would copy it
  res.set_header("Content-Type", "application/json");
}

// Parses the body as JSON; on failure answers 400 with `on_error(message)`.
bool ParseBody(const httplib::Request& req, httplib::Response& res, Json& out,
               const std::function<Json(const std::string&)>& on_error) {
  out = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) {
    Reply(res, 400, on_error("request body is not valid JSON"));
    return false;
  }
  return true;
}

}  // namespace

Scheduler::Scheduler(SchedulerConfig config, std::shared_ptr<kube::Client> client)
    : config_(std::move(config)),
      client_(std::move(client)),
      state_(ClusterStateOptions{nullptr, config_.inventory_stale}),
      thread_([this] { return Run(); }) {
  kube::InformerOptions node_options;
  node_options.type = kube::resources::kNodes;
  node_options.transform = ProjectNode;  // projection.h: only what the readers below use
  node_options.fields = NodeFields();    // and only that much of each Node decoded
  nodes_ = std::make_unique<kube::Informer>(client_.get(), node_options);
  nodes_->AddHandler({[this](const Json& n) { state_.UpsertNode(n); },
                      [this](const Json&, const Json& n) { state_.UpsertNode(n); },
                      [this](const Json& n) { state_.DeleteNode(n); }});
  kube::InformerOptions pod_options;
  pod_options.type = kube::resources::kPods;
  pod_options.transform = ProjectPod;
  pod_options.fields = PodFields();
  pods_ = std::make_unique<kube::Informer>(client_.get(), pod_options);
  // One handler for every reader of a pod event, so that its allocation is
  // decoded and its request derived once (pod_digest.h). A pod that finished
  // or is gone will not be asked about again: the workload learner lets go
  // of its UID (its count stays in the mix). Until the mix is relearned at
  // start, the extender also notes each pod for it (Run below).
  auto upsert_pod = [this](const Json& p) {
    const PodDigest digest(p, config_.resources);
    state_.UpsertPod(digest);
    TrackNomination(state_, config_.resources, p, /*deleted=*/false);  // preemption holds
    if (digest.terminal()) extender_->ForgetPod(p);
    extender_->NoteListedPod(digest);
    if (dashboard_) dashboard_->UpsertPod(digest);
  };
  pods_->AddHandler({upsert_pod, [upsert_pod](const Json&, const Json& p) { upsert_pod(p); },
                     [this](const Json& p) {
                       state_.DeletePod(p);
                       TrackNomination(state_, config_.resources, p, /*deleted=*/true);
                       extender_->ForgetPod(p);
                       extender_->DropListedPod(p);
                       if (dashboard_) dashboard_->DeletePod(p);
                     }});

  quotas_ = std::make_unique<GpuMemoryQuotaWatch>(client_.get(), config_.resources.gpu_memory_name);

  if (config_.leader_elect) {
    lease_store_ = std::make_unique<kube::ApiLeaseStore>(client_.get(), config_.renew_deadline);
    kube::LeaderElectionConfig le;
    le.lease_namespace = config_.lease_namespace;
    le.lease_name = config_.lease_name;
    le.identity = config_.identity;
    le.lease_duration = config_.lease_duration;
    le.renew_deadline = config_.renew_deadline;
    le.retry_period = config_.retry_period;
    const std::string lease = config_.lease_namespace + "/" + config_.lease_name;
    le.on_started_leading = [identity = config_.identity, lease, settle = config_.TakeoverSettle(), this] {
      // Called under no lock of the elector's; TookOverAt is already set.
      if (elector_ && elector_->TookOverAt() && settle.count() > 0) {
        log::Info(
            "leader: this replica took the lease over and binds once a predecessor's Bindings can no "
            "longer land",
            {{"identity", identity}, {"lease", lease}, {"settle_ms", settle.count()}});
      } else {
        log::Info("leader: this replica now binds", {{"identity", identity}, {"lease", lease}});
      }
    };
    le.on_stopped_leading = [identity = config_.identity, lease] {
      log::Warn("no longer the leader: this replica stops binding",
                {{"identity", identity}, {"lease", lease}});
    };
    le.on_new_leader = [lease](const std::string& holder) {
      log::Info("the lease changed hands", {{"leader", holder.empty() ? "none" : holder}, {"lease", lease}});
    };
    elector_ = std::make_unique<kube::LeaderElector>(lease_store_.get(), le);
  }

  ExtenderDeps deps;
  deps.state = &state_;
  deps.config = config_;
  deps.not_ready = [this] { return NotReadyReason(); };
  deps.is_leader = [this] { return IsLeader(); };
  deps.leader_identity = [this] { return elector_ ? elector_->Holder() : config_.identity; };
  deps.bind_held = [this] { return BindHeldReason(); };
  deps.get_pod = [this](const std::string& ns, const std::string& name) { return GetPod(ns, name); };
  deps.bind = [this](const std::string& ns, const std::string& name, const std::string& node,
                     const std::map<std::string, std::string>& annotations) {
    return kube::PodsApi(client_.get()).Bind(ns, name, node, annotations);
  };
  deps.list_disruption_budgets = [this]() -> Result<std::vector<Json>> {
    static const kube::ResourceType kBudgets{"/apis/policy/v1", "policy/v1", "PodDisruptionBudget",
                                             "poddisruptionbudgets", true};
    auto list = client_->List(kBudgets, "");
    if (!list.ok()) return list.error().ToError();
    return std::move(list->items);
  };
  preemptor_ = MakeGpuPreemptor();
  deps.on_unschedulable = [this](const Json& pod, const core::PodRequest& request,
                                 std::vector<std::string> nodes) {
    preemptor_->OnUnschedulable(pod, request, std::move(nodes));
  };
  extender_ = std::make_unique<Extender>(std::move(deps));

  if (config_.dashboard.enabled) {
    dashboard::DashboardOptions options;
    options.bind_address = config_.dashboard.bind_address;
    options.port = config_.dashboard.port;
    options.usage.node_url_template = config_.dashboard.node_metrics_url;
    options.usage.prometheus_url = config_.dashboard.prometheus_url;
    options.usage.interval = config_.dashboard.usage_refresh;
    options.usage.concurrency = config_.dashboard.scrape_concurrency;
    options.usage.timeout = config_.dashboard.scrape_timeout;
    dashboard::DashboardDeps dash;
    dash.state = &state_;
    dash.resources = config_.resources;
    dash.not_ready = [this] { return NotReadyReason(); };
    // Any HTTP answer (a 404 for a node that does not exist included) shows
    // the API server is there.
    dash.probe_api = [this]() -> std::string {
      // Bounded: Stop waits for a probe in flight.
      auto r = client_->Get(kube::resources::kNodes, "", "tessera-dashboard-probe",
                            std::min(config_.api_timeout, std::chrono::milliseconds(2000)));
      return r.ok() || r.error().http_status != 0 ? "" : r.error().message;
    };
    dash.learned_mix = [this] {
      dashboard::MixInput mix;
      if (auto policy = extender_->learner().Current(); policy && !policy->mix().empty()) {
        mix.key = policy->epoch();
        mix.mix = policy->mix();
        mix.source = "learned";
      }
      return mix;
    };
    dashboard_ = std::make_unique<dashboard::Dashboard>(std::move(options), std::move(dash));
    nodes_->AddHandler({[this](const Json& n) { dashboard_->UpsertNode(n); },
                        [this](const Json&, const Json& n) { dashboard_->UpsertNode(n); },
                        [this](const Json& n) { dashboard_->DeleteNode(n); }});
  }
}

Scheduler::~Scheduler() {
  Stop();
}

bool Scheduler::IsLeader() const {
  return !elector_ || elector_->IsLeader();
}

std::string Scheduler::BindHeldReason() const {
  if (!elector_) return "";
  const auto took_over = elector_->TookOverAt();
  const auto settle = config_.TakeoverSettle();
  if (!took_over || settle.count() <= 0) return "";
  const auto elapsed = RealClock::Get()->Now() - *took_over;
  if (elapsed >= settle) return "";
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(settle - elapsed);
  return "this replica took the leader lease over " +
         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()) +
         " ms ago and waits " + std::to_string(left.count()) +
         " ms more (leaderElection.takeoverSettleSeconds) for Bindings the previous leader may still have in "
         "flight";
}

std::string Scheduler::NotReadyReason() const {
  std::string reason;
  auto waiting_for = [&](const kube::Informer& informer, const char* what) {
    if (informer.HasSynced()) return;
    reason += (reason.empty() ? "" : "; ") + std::string("the ") + what + " are not listed yet";
    if (std::string error = informer.Stats().last_error; !error.empty())
      reason += " (last error: " + error + ")";
  };
  waiting_for(*nodes_, "nodes");
  waiting_for(*pods_, "pods");
  if (reason.empty() && !mix_rebuilt_.load())
    reason = "the workload mix is being relearned from the listed pods";
  return reason;
}

Result<Json> Scheduler::GetPod(const std::string& ns, const std::string& name) {
  if (auto cached = pods_->Get(ns + "/" + name)) return *cached;
  ++pod_gets_;
  auto pod = kube::PodsApi(client_.get()).Get(ns, name);
  if (!pod.ok()) return pod.error().ToError();
  return std::move(pod).value();
}

std::unique_ptr<GpuPreemptor> Scheduler::MakeGpuPreemptor() {
  GpuPreemptorDeps deps;
  deps.state = &state_;
  deps.scheduler_name = config_.scheduler_name;
  deps.is_leader = [this] { return IsLeader() && BindHeldReason().empty(); };
  deps.get_pod = [this](const std::string& ns, const std::string& name) -> Result<Json> {
    if (auto cached = pods_->Get(ns + "/" + name)) return *cached;
    return Error{"not in the pod informer's cache"};
  };
  deps.list_disruption_budgets = [this]() -> Result<std::vector<Json>> {
    static const kube::ResourceType kBudgets{"/apis/policy/v1", "policy/v1", "PodDisruptionBudget",
                                             "poddisruptionbudgets", true};
    auto list = client_->List(kBudgets, "");
    if (!list.ok()) return list.error().ToError();
    return std::move(list->items);
  };
  deps.read_pod = [this](const std::string& ns, const std::string& name) {
    return kube::PodsApi(client_.get()).Get(ns, name);
  };
  deps.patch_pod_status = [this](const std::string& ns, const std::string& name, const Json& patch) {
    return client_->MergePatch(kube::resources::kPods, ns, name, patch, "status");
  };
  deps.delete_pod = [this](const std::string& ns, const std::string& name) {
    return kube::PodsApi(client_.get()).Delete(ns, name);
  };
  deps.record_event = [this](const Json& pod, const std::string& reason, const std::string& message) {
    kube::EventSpec event;
    event.involved_object = kube::MakeObjectReference(pod);
    event.involved_object["kind"] = "Pod";
    event.involved_object["apiVersion"] = "v1";
    event.reason = reason;
    event.message = message;
    event.component = config_.scheduler_name;
    event.instance = config_.identity;
    const std::string ns = kube::NamespaceOf(pod);
    if (auto created = kube::EventsApi(client_.get()).Create(ns, event); !created.ok()) {
      log::Warn(
          "gpu preemption: event not recorded",
          {{"pod", ns + "/" + kube::NameOf(pod)}, {"reason", reason}, {"error", created.error().message}});
    }
  };
  GpuPreemptionOptions options;
  options.enabled = config_.preemption.enabled;
  options.pod_retry = config_.preemption.pod_retry;
  return std::make_unique<GpuPreemptor>(std::move(deps), options);
}

Status Scheduler::Start() {
  {
    std::lock_guard lock(mu_);
    if (started_) return Status::Ok();
    started_ = true;
  }
  started_up_ = false;
  auto install = [this](httplib::Server& s, bool webhook_only) {
    const int threads = config_.http_threads;
    s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    s.set_payload_max_length(64u << 20);
    // Answers go out as header + body writes; without TCP_NODELAY Nagle and
    // delayed ACKs add ~40 ms to every extender call.
    s.set_tcp_nodelay(true);
    s.Get("/healthz",
          [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
    s.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
      if (std::string reason = NotReadyReason(); reason.empty()) {
        res.set_content("ok", "text/plain");
      } else {
        res.status = 503;
        res.set_content("not ready: " + reason, "text/plain");
      }
    });
    s.Post("/mutate", [this](const httplib::Request& req, httplib::Response& res) {
      ++mutate_requests_;
      Json review;
      if (!ParseBody(req, res, review, [](const std::string& m) {
            return Json{
                {"apiVersion", "admission.k8s.io/v1"},
                {"kind", "AdmissionReview"},
                {"response", {{"uid", ""}, {"allowed", false}, {"status", {{"code", 400}, {"message", m}}}}}};
          })) {
        ++mutate_denied_;
        return;
      }
      ClusterView view;
      view.largest_gpu_mib = state_.LargestGpuMemoryMiB();
      view.gpu_memory_quota = [this](const std::string& ns) { return quotas_->Lookup(ns); };
      view.visit_gpus = [this](const std::function<void(const core::Gpu&)>& visit) -> Status {
        if (!nodes_->HasSynced()) return Error{"the nodes are not listed yet"};
        state_.VisitNodes([&](const ClusterState::NodeVisit& node) {
          for (const core::GpuState& gpu : node.state.gpus()) visit(gpu.gpu);
        });
        return Status::Ok();
      };
      Json answer = Mutate(review, config_, view);
      if (!answer["response"].value("allowed", true)) ++mutate_denied_;
      Reply(res, 200, answer);
    });
    if (webhook_only) return;
    // Filter and prioritize read the body themselves (no JSON tree of the
    // node names on the common path) and answer 400 to one that is not JSON.
    s.Post("/filter", [this](const httplib::Request& req, httplib::Response& res) {
      auto [status, body] = extender_->FilterBody(req.body);
      ReplyText(res, status, std::move(body));
    });
    s.Post("/prioritize", [this](const httplib::Request& req, httplib::Response& res) {
      auto [status, body] = extender_->PrioritizeBody(req.body);
      ReplyText(res, status, std::move(body));
    });
    s.Post("/bind", [this](const httplib::Request& req, httplib::Response& res) {
      Json args;
      if (!ParseBody(req, res, args, [](const std::string& m) { return Json{{"Error", m}}; })) return;
      auto [status, body] = extender_->Bind(args);
      Reply(res, status, body);
    });
    s.Post("/preempt", [this](const httplib::Request& req, httplib::Response& res) {
      auto [status, body] = extender_->PreemptBody(req.body);
      ReplyText(res, status, std::move(body));
    });
    s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(MetricsText(), std::string(PrometheusText::kContentType));
    });
  };

  auto plain = std::make_unique<httplib::Server>();
  install(*plain, false);
  http_ = std::make_unique<HttpListener>(std::move(plain));
  // Port 0 is for tests: any free port.
  TESSERA_ASSIGN_OR_RETURN(port_, http_->Listen(config_.bind_address, config_.port));
  if (config_.webhook_port != 0) {
    std::unique_ptr<httplib::Server> server;
    if (!config_.tls_cert_file.empty()) {
      for (const auto& [key, path] : {std::pair{"server.tlsCertFile", &config_.tls_cert_file},
                                      std::pair{"server.tlsKeyFile", &config_.tls_key_file}}) {
        if (std::ifstream file(*path); !file) {
          return Error{std::string(key) + " " + *path + ": cannot read it (" + std::strerror(errno) + ")"};
        }
      }
      auto ssl =
          std::make_unique<httplib::SSLServer>(config_.tls_cert_file.c_str(), config_.tls_key_file.c_str());
      if (!ssl->is_valid()) {
        return Error{"server.tlsCertFile " + config_.tls_cert_file + " and server.tlsKeyFile " +
                     config_.tls_key_file +
                     " are not a PEM certificate (chain) and its private key, or the key does not match"};
      }
      // A rotated certificate is served without a restart (docs/security.md).
      TESSERA_ASSIGN_OR_RETURN_WRAP(tls_files_,
                                    TlsCertificateFiles::Load(config_.tls_cert_file, config_.tls_key_file),
                                    "server.tlsCertFile/server.tlsKeyFile");
      tls_files_->Install(ssl->ssl_context());
      server = std::move(ssl);
    } else {
      server = std::make_unique<httplib::Server>();
    }
    install(*server, true);
    webhook_ = std::make_unique<HttpListener>(std::move(server));
    TESSERA_ASSIGN_OR_RETURN(webhook_port_, webhook_->Listen(config_.bind_address, config_.webhook_port));
  }

  if (dashboard_) TESSERA_RETURN_IF_ERROR(dashboard_->Start());

  nodes_->Start();
  pods_->Start();
  quotas_->Start();
  thread_.Start();
  preemptor_->Start();
  return Status::Ok();
}

std::chrono::milliseconds Scheduler::Run() {
  const auto period = std::max(std::chrono::milliseconds(50),
                               std::min(std::chrono::milliseconds(1000), config_.reservation_timeout / 4));
  if (started_up_) {
    state_.ExpireReservations();
    return period;
  }
  // First, once nodes and pods are listed: the workload mix learned from the
  // pods, as the scheduler this one replaces had learned it from their
  // arrivals. That completes the view (Ready()); only then may this replica
  // lead. Until then each turn waits at most 50 ms, so Stop stays prompt.
  for (kube::Informer* informer : {pods_.get(), nodes_.get()}) {
    if (!informer->WaitForSync(std::chrono::milliseconds(50))) return std::chrono::milliseconds(0);
  }
  // The pods noted as they arrived, counted as a pass over the cache would
  // count them (no pod is unpacked again).
  const size_t counted = extender_->ObserveNotedPods();
  mix_rebuilt_ = true;
  log::Info("view complete: nodes and pods listed, workload mix relearned",
            {{"nodes", nodes_->Size()},
             {"pods", pods_->Size()},
             {"pods_counted", counted},
             {"leader_election", config_.leader_elect}});
  if (elector_) elector_->Start();
  started_up_ = true;
  return period;
}

void Scheduler::Stop() {
  {
    std::lock_guard lock(mu_);
    if (!started_) return;
    started_ = false;
  }
  if (http_) http_->Stop();
  if (webhook_) webhook_->Stop();
  if (dashboard_) dashboard_->Stop();
  preemptor_->Stop();  // before the informers it reads
  thread_.Stop();      // before the elector: Run() may start it
  if (elector_) elector_->Stop();
  quotas_->Stop();
  pods_->Stop();
  nodes_->Stop();
}

std::string Scheduler::MetricsText() const {
  const ClusterStats s = state_.Stats();
  const ExtenderCounters& c = extender_->counters();
  const WorkloadLearner::Stats mix = extender_->learner().stats();
  constexpr MetricType kGauge = MetricType::kGauge;
  constexpr MetricType kCounter = MetricType::kCounter;
  struct Metric {
    const char* name;
    MetricType type;
    const char* help;
    double value;
  };
  const Metric metrics[] = {
      {"tessera_scheduler_ready", kGauge,
       "1 once nodes and pods have been listed and the workload mix relearned (before: no decisions)",
       Ready() ? 1.0 : 0.0},
      {"tessera_scheduler_leader", kGauge, "1 when this process holds the lease (may bind)",
       IsLeader() ? 1.0 : 0.0},
      {"tessera_scheduler_nodes", kGauge, "nodes with a usable GPU inventory", double(s.nodes)},
      {"tessera_scheduler_nodes_without_inventory", kGauge, "nodes without a usable GPU inventory",
       double(s.nodes_without_inventory)},
      {"tessera_scheduler_nodes_stale_inventory", kGauge,
       "nodes whose GPU inventory heartbeat is older than inventoryStaleSeconds (they do not fit)",
       double(s.nodes_stale)},
      {"tessera_scheduler_gpus", kGauge, "GPUs in the cluster view", double(s.gpus)},
      {"tessera_scheduler_pods", kGauge, "pods accounted from their allocation annotation", double(s.pods)},
      {"tessera_scheduler_reservations", kGauge, "binds reserved but not yet seen bound",
       double(s.reservations)},
      {"tessera_scheduler_reservations_expired_total", kCounter, "reservations dropped after the timeout",
       double(s.reservations_expired)},
      {"tessera_scheduler_preemption_holds", kGauge,
       "pods nominated after preemption whose GPU room is held from lower-priority pods",
       double(state_.HoldCount())},
      {"tessera_scheduler_preempt_requests_total", kCounter, "extender preempt calls",
       double(extender_->counters().preempt_requests)},
      {"tessera_scheduler_gpu_preemption_attempts_total", kCounter,
       "GPU preemption attempts for pods filter found fitting nowhere (preemption.enabled)",
       double(preemptor_->counters().attempts)},
      {"tessera_scheduler_gpu_preemptions_total", kCounter,
       "GPU preemption attempts that deleted victims and nominated the pod",
       double(preemptor_->counters().preemptions)},
      {"tessera_scheduler_gpu_preemption_victims_total", kCounter, "pods deleted by GPU preemption",
       double(preemptor_->counters().victims)},
      {"tessera_scheduler_gpu_preemption_not_helpful_total", kCounter,
       "GPU preemption attempts that found no victims that would make room",
       double(preemptor_->counters().not_helpful)},
      {"tessera_scheduler_gpu_preemption_failures_total", kCounter,
       "GPU preemption attempts stopped by an API error (budgets not listed, a victim not deleted)",
       double(preemptor_->counters().failures)},
      {"tessera_scheduler_mig_placements", kGauge,
       "dynamic MIG instances held for bound or reserved pods (whether the node lists them yet or not)",
       double(s.mig_placements)},
      {"tessera_scheduler_inconsistent_annotations_total", kCounter,
       "allocation annotations that could not be accounted (unreadable, unknown GPU, over capacity)",
       double(s.inconsistent)},
      {"tessera_scheduler_workload_pods_observed_total", kCounter,
       "pods counted into the tessera policy's workload mix (each once; at start, the pods listed)",
       double(mix.counted)},
      {"tessera_scheduler_workload_pods_remembered", kGauge,
       "UIDs of counted pods held so that a retried pod is not counted again (until deleted or finished)",
       double(mix.remembered)},
      {"tessera_scheduler_workload_mix_epoch", kCounter,
       "times the tessera policy's workload mix has been learned (each drops its cached scores)",
       double(mix.epoch)},
      {"tessera_scheduler_workload_mix_shapes", kGauge, "pod shapes in the tessera policy's workload mix",
       double(mix.mix_shapes)},
      {"tessera_scheduler_filter_requests_total", kCounter, "extender filter calls",
       double(c.filter_requests)},
      {"tessera_scheduler_filter_errors_total", kCounter, "filter calls answered with an Error",
       double(c.filter_errors)},
      {"tessera_scheduler_filter_seconds_total", kCounter, "time spent in filter", c.filter_micros / 1e6},
      {"tessera_scheduler_prioritize_requests_total", kCounter, "extender prioritize calls",
       double(c.prioritize_requests)},
      {"tessera_scheduler_prioritize_seconds_total", kCounter, "time spent in prioritize",
       c.prioritize_micros / 1e6},
      {"tessera_scheduler_bind_requests_total", kCounter, "extender bind calls", double(c.bind_requests)},
      {"tessera_scheduler_binds_total", kCounter, "successful bindings", double(c.binds)},
      {"tessera_scheduler_bind_errors_total", kCounter, "bind calls answered with an Error",
       double(c.bind_errors)},
      {"tessera_scheduler_bind_not_leader_total", kCounter, "bind calls refused because this is a follower",
       double(c.bind_not_leader)},
      {"tessera_scheduler_bind_settling_total", kCounter,
       "bind calls refused while a new leader waits out Bindings its predecessor may still have in flight",
       double(c.bind_settling)},
      {"tessera_scheduler_not_ready_refusals_total", kCounter,
       "filter, prioritize and bind calls refused because the view of nodes and pods was not complete yet",
       double(c.not_ready)},
      {"tessera_scheduler_bind_seconds_total", kCounter, "time spent in bind (API call included)",
       c.bind_micros / 1e6},
      {"tessera_scheduler_mutate_requests_total", kCounter, "admission reviews",
       double(mutate_requests_.load())},
      {"tessera_scheduler_mutate_denied_total", kCounter, "admission reviews denied",
       double(mutate_denied_.load())},
  };
  PrometheusText text;
  for (const Metric& m : metrics) {
    text.Describe(m.name, m.type, m.help);
    text.Add(m.name, {}, m.value);
  }
  return text.Render();
}

}  // namespace tessera::scheduler
