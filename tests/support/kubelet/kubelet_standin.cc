#include "kubelet_standin.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

namespace tessera::testing {
namespace {

constexpr auto kCallTimeout = std::chrono::seconds(10);
constexpr auto kProbeTimeout = std::chrono::seconds(5);

std::shared_ptr<grpc::Channel> UnixChannel(const std::string& path) {
  return grpc::CreateChannel("unix://" + path, grpc::InsecureChannelCredentials());
}

void SetDeadline(grpc::ClientContext& context, std::chrono::seconds timeout) {
  context.set_deadline(std::chrono::system_clock::now() + timeout);
}

// `call(stub, context)` on a plugin's `stub` with the call deadline;
// FAILED_PRECONDITION when there is no stub (no plugin registered).
template <typename Call>
grpc::Status CallPlugin(std::unique_ptr<v1beta1::DevicePlugin::Stub> stub, Call call) {
  if (!stub) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no plugin registered");
  grpc::ClientContext context;
  SetDeadline(context, kCallTimeout);
  return call(*stub, &context);
}

// The kubelet's checks on a RegisterRequest; empty when acceptable.
std::string CheckRegistration(const v1beta1::RegisterRequest& request) {
  if (request.version() != "v1beta1") {
    return "requested device plugin API version '" + request.version() +
           "' is not supported (kubelet: v1beta1)";
  }
  const std::string& name = request.resource_name();
  auto slash = name.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == name.size() || name.find('.') > slash ||
      name.find('/', slash + 1) != std::string::npos) {
    return "resource name '" + name + "' is not an extended resource name (<domain>/<name>)";
  }
  std::string domain = name.substr(0, slash);
  if (domain == "kubernetes.io" || domain.ends_with(".kubernetes.io")) {
    return "resource name '" + name + "' uses the reserved kubernetes.io domain";
  }
  if (request.endpoint().empty() || request.endpoint().find('/') != std::string::npos) {
    return "endpoint '" + request.endpoint() + "' must be a socket file name in the plugin directory";
  }
  return "";
}

}  // namespace

class KubeletStandIn::RegistrationService final : public v1beta1::Registration::Service {
 public:
  explicit RegistrationService(KubeletStandIn& owner) : owner_(owner) {}

  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request,
                        v1beta1::Empty*) override {
    Registration record;
    record.request = *request;
    record.rejection = CheckRegistration(*request);
    record.accepted = record.rejection.empty();
    if (record.accepted) owner_.OnRegister(*request, record);
    {
      std::lock_guard lock(owner_.mu_);
      owner_.registrations_.push_back(record);
    }
    owner_.changed_.notify_all();
    if (!record.accepted) return grpc::Status(grpc::StatusCode::UNKNOWN, record.rejection);
    return grpc::Status::OK;
  }

 private:
  KubeletStandIn& owner_;
};

// The PodResources API as a kubelet serves it, over the stand-in's table.
class KubeletStandIn::PodResourcesService final : public v1::PodResourcesLister::Service {
 public:
  explicit PodResourcesService(KubeletStandIn& owner) : owner_(owner) {}

  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* response) override {
    std::lock_guard lock(owner_.mu_);
    for (const auto& pod : owner_.pods_) owner_.FillPodLocked(pod, response->add_pod_resources());
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext*, const v1::GetPodResourcesRequest* request,
                   v1::GetPodResourcesResponse* response) override {
    std::lock_guard lock(owner_.mu_);
    const AdmittedPod* pod = owner_.FindPodLocked(request->pod_namespace(), request->pod_name());
    if (pod == nullptr) {
      // A kubelet returns a plain Go error here, which gRPC sends as UNKNOWN.
      return grpc::Status(grpc::StatusCode::UNKNOWN, "pod " + request->pod_name() + " in namespace " +
                                                         request->pod_namespace() + " not found");
    }
    owner_.FillPodLocked(*pod, response->mutable_pod_resources());
    return grpc::Status::OK;
  }

  grpc::Status GetAllocatableResources(grpc::ServerContext*, const v1::AllocatableResourcesRequest*,
                                       v1::AllocatableResourcesResponse* response) override {
    std::lock_guard lock(owner_.mu_);
    for (const auto& [resource, plugin] : owner_.plugins_) {
      for (const auto& device : plugin.devices) {
        if (device.health() != "Healthy") continue;
        std::vector<int64_t> nodes;
        for (const auto& node : device.topology().nodes()) nodes.push_back(node.id());
        AddDeviceEntries(resource, device.id(), nodes, response->mutable_devices());
      }
    }
    return grpc::Status::OK;
  }

  // One ContainerDevices per device and NUMA node, as a kubelet reports them.
  static void AddDeviceEntries(const std::string& resource, const std::string& id,
                               const std::vector<int64_t>& numa_nodes,
                               google::protobuf::RepeatedPtrField<v1::ContainerDevices>* out) {
    if (numa_nodes.empty()) {
      auto* entry = out->Add();
      entry->set_resource_name(resource);
      entry->add_device_ids(id);
      return;
    }
    for (int64_t node : numa_nodes) {
      auto* entry = out->Add();
      entry->set_resource_name(resource);
      entry->add_device_ids(id);
      entry->mutable_topology()->add_nodes()->set_id(node);
    }
  }

 private:
  KubeletStandIn& owner_;
};

KubeletStandIn::KubeletStandIn(std::string dir, std::string pod_resources_socket)
    : dir_(std::move(dir)), pod_resources_socket_(std::move(pod_resources_socket)) {}

KubeletStandIn::~KubeletStandIn() {
  Stop();
}

bool KubeletStandIn::Start() {
  if (server_) return true;
  ::unlink(socket_path().c_str());
  auto service = std::make_unique<RegistrationService>(*this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket_path(), grpc::InsecureServerCredentials());
  builder.RegisterService(service.get());
  server_ = builder.BuildAndStart();
  if (!server_) return false;
  service_ = std::move(service);
  return StartPodResourcesServer();
}

bool KubeletStandIn::StartPodResourcesServer() {
  if (pod_resources_socket_.empty() || pod_resources_server_) return true;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(pod_resources_socket_).parent_path(), ec);
  ::unlink(pod_resources_socket_.c_str());
  auto service = std::make_unique<PodResourcesService>(*this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + pod_resources_socket_, grpc::InsecureServerCredentials());
  builder.RegisterService(service.get());
  pod_resources_server_ = builder.BuildAndStart();
  if (!pod_resources_server_) return false;
  pod_resources_service_ = std::move(service);
  return true;
}

void KubeletStandIn::Stop() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
    server_.reset();
    service_.reset();
  }
  if (pod_resources_server_) {
    pod_resources_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    pod_resources_server_->Wait();
    pod_resources_server_.reset();
    pod_resources_service_.reset();
  }
  StopWatch();
  ::unlink(socket_path().c_str());
  if (!pod_resources_socket_.empty()) ::unlink(pod_resources_socket_.c_str());
}

bool KubeletStandIn::Restart(bool wipe_plugin_sockets) {
  Stop();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    if (wipe_plugin_sockets && entry.is_socket(ec)) std::filesystem::remove(entry.path(), ec);
  }
  {
    std::lock_guard lock(mu_);
    for (auto& [resource, plugin] : plugins_) plugin.endpoint_path.clear();
  }
  return Start();
}

void KubeletStandIn::OnRegister(const v1beta1::RegisterRequest& request, Registration& record) {
  const std::string endpoint_path = dir_ + "/" + request.endpoint();
  // Fail fast (no wait-for-ready): a plugin must be serving before it registers.
  auto stub = v1beta1::DevicePlugin::NewStub(UnixChannel(endpoint_path));
  grpc::ClientContext context;
  SetDeadline(context, kProbeTimeout);
  v1beta1::Empty empty;
  grpc::Status status = stub->GetDevicePluginOptions(&context, empty, &record.plugin_options);
  record.plugin_was_serving = status.ok();
  if (!record.plugin_was_serving) return;
  {
    std::lock_guard lock(mu_);
    plugins_[request.resource_name()].endpoint_path = endpoint_path;
    last_resource_name_ = request.resource_name();
  }
  StartWatch(request.resource_name(), endpoint_path);
}

void KubeletStandIn::StartWatch(const std::string& resource, const std::string& endpoint_path) {
  std::lock_guard serial(watch_mu_);
  // A new registration replaces the previous endpoint of its resource, as in the kubelet.
  Watch& watch = watches_[resource];
  if (watch.context) watch.context->TryCancel();
  if (watch.thread.joinable()) watch.thread.join();

  auto context = std::make_shared<grpc::ClientContext>();
  watch.context = context;
  watch.thread = std::thread([this, context, resource, endpoint_path] {
    auto stub = v1beta1::DevicePlugin::NewStub(UnixChannel(endpoint_path));
    v1beta1::Empty empty;
    auto reader = stub->ListAndWatch(context.get(), empty);
    v1beta1::ListAndWatchResponse response;
    while (reader->Read(&response)) {
      {
        std::lock_guard lock(mu_);
        Plugin& plugin = plugins_[resource];
        plugin.devices.assign(response.devices().begin(), response.devices().end());
        ++plugin.lists_received;
        ++lists_received_;
      }
      changed_.notify_all();
    }
    reader->Finish();
  });
}

void KubeletStandIn::StopWatch() {
  std::lock_guard serial(watch_mu_);
  for (auto& [resource, watch] : watches_) {
    if (watch.context) watch.context->TryCancel();
  }
  for (auto& [resource, watch] : watches_) {
    if (watch.thread.joinable()) watch.thread.join();
  }
  watches_.clear();
}

std::vector<KubeletStandIn::Registration> KubeletStandIn::registrations() const {
  std::lock_guard lock(mu_);
  return registrations_;
}

bool KubeletStandIn::WaitForRegistrations(size_t count, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return registrations_.size() >= count; });
}

std::vector<v1beta1::Device> KubeletStandIn::devices() const {
  std::lock_guard lock(mu_);
  auto it = plugins_.find(last_resource_name_);
  return it == plugins_.end() ? std::vector<v1beta1::Device>{} : it->second.devices;
}

std::vector<v1beta1::Device> KubeletStandIn::devices(const std::string& resource) const {
  std::lock_guard lock(mu_);
  auto it = plugins_.find(resource);
  return it == plugins_.end() ? std::vector<v1beta1::Device>{} : it->second.devices;
}

uint64_t KubeletStandIn::device_lists_received() const {
  std::lock_guard lock(mu_);
  return lists_received_;
}

bool KubeletStandIn::WaitForDevices(const std::function<bool(const std::vector<v1beta1::Device>&)>& predicate,
                                    std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, timeout, [&] {
    auto it = plugins_.find(last_resource_name_);
    return lists_received_ > 0 && it != plugins_.end() && predicate(it->second.devices);
  });
}

bool KubeletStandIn::WaitForDevices(const std::string& resource,
                                    const std::function<bool(const std::vector<v1beta1::Device>&)>& predicate,
                                    std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, timeout, [&] {
    auto it = plugins_.find(resource);
    return it != plugins_.end() && it->second.lists_received > 0 && predicate(it->second.devices);
  });
}

std::unique_ptr<v1beta1::DevicePlugin::Stub> KubeletStandIn::PluginStub() const {
  std::string path;
  {
    std::lock_guard lock(mu_);
    if (auto it = plugins_.find(last_resource_name_); it != plugins_.end()) path = it->second.endpoint_path;
  }
  if (path.empty()) return nullptr;
  return v1beta1::DevicePlugin::NewStub(UnixChannel(path));
}

grpc::Status KubeletStandIn::GetDevicePluginOptions(v1beta1::DevicePluginOptions* response) {
  return CallPlugin(PluginStub(), [&](auto& stub, grpc::ClientContext* context) {
    return stub.GetDevicePluginOptions(context, v1beta1::Empty(), response);
  });
}

grpc::Status KubeletStandIn::Allocate(const v1beta1::AllocateRequest& request,
                                      v1beta1::AllocateResponse* response) {
  return CallPlugin(PluginStub(), [&](auto& stub, grpc::ClientContext* context) {
    return stub.Allocate(context, request, response);
  });
}

grpc::Status KubeletStandIn::GetPreferredAllocation(const v1beta1::PreferredAllocationRequest& request,
                                                    v1beta1::PreferredAllocationResponse* response) {
  return CallPlugin(PluginStub(), [&](auto& stub, grpc::ClientContext* context) {
    return stub.GetPreferredAllocation(context, request, response);
  });
}

grpc::Status KubeletStandIn::PreStartContainer(const v1beta1::PreStartContainerRequest& request) {
  v1beta1::PreStartContainerResponse response;
  return CallPlugin(PluginStub(), [&](auto& stub, grpc::ClientContext* context) {
    return stub.PreStartContainer(context, request, &response);
  });
}

KubeletStandIn::AdmittedPod* KubeletStandIn::FindPodLocked(const std::string& ns, const std::string& pod) {
  for (auto& admitted : pods_) {
    if (admitted.ns == ns && admitted.name == pod) return &admitted;
  }
  return nullptr;
}

void KubeletStandIn::FillPodLocked(const AdmittedPod& pod, v1::PodResources* out) const {
  out->set_name(pod.name);
  out->set_namespace_(pod.ns);
  for (const auto& container : pod.containers) {
    auto* listed = out->add_containers();
    listed->set_name(container.name);
    for (const auto& device : container.devices) {
      PodResourcesService::AddDeviceEntries(container.resource_name, device.id, device.numa_nodes,
                                            listed->mutable_devices());
    }
    // One DynamicResource per claim, with a ClaimResource per allocated device.
    v1::DynamicResource* claim = nullptr;
    for (const auto& device : container.claims) {
      if (claim == nullptr || claim->claim_namespace() != device.claim_namespace ||
          claim->claim_name() != device.claim_name) {
        claim = listed->add_dynamic_resources();
        claim->set_claim_namespace(device.claim_namespace);
        claim->set_claim_name(device.claim_name);
      }
      auto* resource = claim->add_claim_resources();
      resource->set_driver_name(device.driver);
      resource->set_pool_name(device.pool);
      resource->set_device_name(device.device);
      for (const auto& cdi : device.cdi_devices) resource->add_cdi_devices()->set_name(cdi);
    }
  }
}

void KubeletStandIn::AdmitClaimContainer(const std::string& ns, const std::string& pod,
                                         const std::string& container, std::vector<ClaimDevice> claims) {
  std::lock_guard lock(mu_);
  ContainerLocked(ns, pod, container).claims = std::move(claims);
}

KubeletStandIn::AdmittedContainer& KubeletStandIn::ContainerLocked(const std::string& ns,
                                                                   const std::string& pod,
                                                                   const std::string& container) {
  AdmittedPod* admitted = FindPodLocked(ns, pod);
  if (admitted == nullptr) {
    pods_.push_back(AdmittedPod{ns, pod, {}});
    admitted = &pods_.back();
  }
  auto existing = std::find_if(admitted->containers.begin(), admitted->containers.end(),
                               [&](const AdmittedContainer& c) { return c.name == container; });
  if (existing != admitted->containers.end()) return *existing;
  admitted->containers.push_back(AdmittedContainer{container, "", {}});
  return admitted->containers.back();
}

grpc::Status KubeletStandIn::AdmitContainer(const std::string& ns, const std::string& pod,
                                            const std::string& container,
                                            const std::vector<std::string>& device_ids,
                                            v1beta1::ContainerAllocateResponse* response) {
  std::string resource;
  {
    std::lock_guard lock(mu_);
    resource = last_resource_name_;
  }
  return AdmitContainer(ns, pod, container, resource, device_ids, response);
}

grpc::Status KubeletStandIn::AdmitContainer(const std::string& ns, const std::string& pod,
                                            const std::string& container, const std::string& resource,
                                            const std::vector<std::string>& device_ids,
                                            v1beta1::ContainerAllocateResponse* response) {
  // Devices already held by another container are never handed out again.
  auto held_elsewhere = [&]() -> std::string {
    for (const auto& admitted : pods_) {
      for (const auto& other : admitted.containers) {
        if (admitted.ns == ns && admitted.name == pod && other.name == container) continue;
        for (const auto& device : other.devices) {
          if (std::find(device_ids.begin(), device_ids.end(), device.id) != device_ids.end()) {
            return "device " + device.id + " is already allocated to " + admitted.ns + "/" + admitted.name +
                   "/" + other.name;
          }
        }
      }
    }
    return "";
  };

  std::string resource_name;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
  if (!device_ids.empty()) {
    std::string path;
    {
      std::lock_guard lock(mu_);
      if (std::string conflict = held_elsewhere(); !conflict.empty()) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, conflict);
      }
      if (auto it = plugins_.find(resource); it != plugins_.end()) path = it->second.endpoint_path;
      resource_name = resource;
    }
    if (path.empty()) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no plugin registered");
    stub = v1beta1::DevicePlugin::NewStub(UnixChannel(path));

    v1beta1::AllocateRequest request;
    auto* wanted = request.add_container_requests();
    for (const auto& id : device_ids) wanted->add_devices_ids(id);
    v1beta1::AllocateResponse allocated;
    grpc::ClientContext context;
    SetDeadline(context, kCallTimeout);
    grpc::Status status = stub->Allocate(&context, request, &allocated);
    if (!status.ok()) return status;
    if (allocated.container_responses_size() != 1) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "the plugin answered " + std::to_string(allocated.container_responses_size()) +
                              " container responses for 1 container request");
    }
    if (response != nullptr) *response = allocated.container_responses(0);
  }

  std::lock_guard lock(mu_);
  // Checked again: another admission may have taken a device meanwhile.
  if (std::string conflict = held_elsewhere(); !conflict.empty()) {
    return grpc::Status(grpc::StatusCode::ABORTED, conflict);
  }
  AdmittedContainer record{container, resource_name, {}};
  for (const auto& id : device_ids) {
    AssignedDevice device{id, {}};
    if (const auto plugin = plugins_.find(resource); plugin != plugins_.end()) {
      for (const auto& advertised : plugin->second.devices) {
        if (advertised.id() != id) continue;
        for (const auto& node : advertised.topology().nodes()) device.numa_nodes.push_back(node.id());
      }
    }
    record.devices.push_back(std::move(device));
  }
  AdmittedContainer& admitted = ContainerLocked(ns, pod, container);
  record.claims = std::move(admitted.claims);
  admitted = std::move(record);
  return grpc::Status::OK;
}

void KubeletStandIn::RemovePod(const std::string& ns, const std::string& pod) {
  std::lock_guard lock(mu_);
  std::erase_if(pods_,
                [&](const AdmittedPod& admitted) { return admitted.ns == ns && admitted.name == pod; });
}

size_t CountHealthy(const std::vector<v1beta1::Device>& devices) {
  return static_cast<size_t>(std::count_if(devices.begin(), devices.end(),
                                           [](const v1beta1::Device& d) { return d.health() == "Healthy"; }));
}

}  // namespace tessera::testing
