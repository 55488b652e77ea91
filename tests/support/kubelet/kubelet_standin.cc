#include "kubelet_standin.h"

#include <sys/stat.h>
#include <unistd.h>

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

KubeletStandIn::KubeletStandIn(std::string dir) : dir_(std::move(dir)) {}

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
  return true;
}

void KubeletStandIn::Stop() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
    server_.reset();
    service_.reset();
  }
  StopWatch();
  ::unlink(socket_path().c_str());
}

bool KubeletStandIn::Restart(bool wipe_plugin_sockets) {
  Stop();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    if (wipe_plugin_sockets && entry.is_socket(ec)) std::filesystem::remove(entry.path(), ec);
  }
  {
    std::lock_guard lock(mu_);
    plugin_endpoint_path_.clear();
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
    plugin_endpoint_path_ = endpoint_path;
  }
  StartWatch(endpoint_path);
}

void KubeletStandIn::StartWatch(const std::string& endpoint_path) {
  std::lock_guard serial(watch_mu_);
  // A new registration replaces the previous endpoint, as in the kubelet.
  {
    std::lock_guard lock(mu_);
    if (watch_context_) watch_context_->TryCancel();
  }
  if (watch_thread_.joinable()) watch_thread_.join();

  auto context = std::make_shared<grpc::ClientContext>();
  {
    std::lock_guard lock(mu_);
    watch_context_ = context;
  }
  watch_thread_ = std::thread([this, context, endpoint_path] {
    auto stub = v1beta1::DevicePlugin::NewStub(UnixChannel(endpoint_path));
    v1beta1::Empty empty;
    auto reader = stub->ListAndWatch(context.get(), empty);
    v1beta1::ListAndWatchResponse response;
    while (reader->Read(&response)) {
      {
        std::lock_guard lock(mu_);
        devices_.assign(response.devices().begin(), response.devices().end());
        ++lists_received_;
      }
      changed_.notify_all();
    }
    reader->Finish();
  });
}

void KubeletStandIn::StopWatch() {
  std::lock_guard serial(watch_mu_);
  {
    std::lock_guard lock(mu_);
    if (watch_context_) watch_context_->TryCancel();
  }
  if (watch_thread_.joinable()) watch_thread_.join();
  std::lock_guard lock(mu_);
  watch_context_.reset();
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
  return devices_;
}

uint64_t KubeletStandIn::device_lists_received() const {
  std::lock_guard lock(mu_);
  return lists_received_;
}

bool KubeletStandIn::WaitForDevices(const std::function<bool(const std::vector<v1beta1::Device>&)>& predicate,
                                    std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return lists_received_ > 0 && predicate(devices_); });
}

std::unique_ptr<v1beta1::DevicePlugin::Stub> KubeletStandIn::PluginStub() const {
  std::string path;
  {
    std::lock_guard lock(mu_);
    path = plugin_endpoint_path_;
  }
  if (path.empty()) return nullptr;
  return v1beta1::DevicePlugin::NewStub(UnixChannel(path));
}

grpc::Status KubeletStandIn::GetDevicePluginOptions(v1beta1::DevicePluginOptions* response) {
  auto stub = PluginStub();
  if (!stub) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no plugin registered");
  grpc::ClientContext context;
  SetDeadline(context, kCallTimeout);
  return stub->GetDevicePluginOptions(&context, v1beta1::Empty(), response);
}

grpc::Status KubeletStandIn::Allocate(const v1beta1::AllocateRequest& request,
                                      v1beta1::AllocateResponse* response) {
  auto stub = PluginStub();
  if (!stub) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no plugin registered");
  grpc::ClientContext context;
  SetDeadline(context, kCallTimeout);
  return stub->Allocate(&context, request, response);
}

grpc::Status KubeletStandIn::GetPreferredAllocation(const v1beta1::PreferredAllocationRequest& request,
                                                    v1beta1::PreferredAllocationResponse* response) {
  auto stub = PluginStub();
  if (!stub) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no plugin registered");
  grpc::ClientContext context;
  SetDeadline(context, kCallTimeout);
  return stub->GetPreferredAllocation(&context, request, response);
}

grpc::Status KubeletStandIn::PreStartContainer(const v1beta1::PreStartContainerRequest& request) {
  auto stub = PluginStub();
  if (!stub) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no plugin registered");
  grpc::ClientContext context;
  SetDeadline(context, kCallTimeout);
  v1beta1::PreStartContainerResponse response;
  return stub->PreStartContainer(&context, request, &response);
}

}  // namespace tessera::testing
