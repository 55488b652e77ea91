#include "kubelet_dra_standin.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "dra/v1beta1/api.grpc.pb.h"

namespace tessera::testing {
namespace {

namespace drav1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

using Clock = std::chrono::steady_clock;

// The channel to a DRA endpoint lives as long as the registration and
// reconnects on demand, like the kubelet's. Reconnection back-off is shorter
// than gRPC's default (1 s, growing) so that tests of a plugin that comes up
// late do not wait for it; it does not change what goes over the wire.
std::shared_ptr<grpc::Channel> DraChannel(const std::string& path) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  return grpc::CreateCustomChannel("unix://" + path, grpc::InsecureChannelCredentials(), args);
}

void SetDeadline(grpc::ClientContext& context, std::chrono::milliseconds timeout) {
  context.set_deadline(std::chrono::system_clock::now() + timeout);
}

std::string Quoted(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? " \"" : "\"") + items[i] + "\"";
  return out + "]";
}

// The kubelet sends the same Claim messages whichever version it speaks.
template <typename From, typename To>
void CopyClaim(const From& from, To* to) {
  to->set_namespace_(from.namespace_());
  to->set_uid(from.uid());
  to->set_name(from.name());
}

drav1::NodePrepareResourcesResponse FromV1beta1(const drav1beta1::NodePrepareResourcesResponse& in) {
  drav1::NodePrepareResourcesResponse out;
  for (const auto& [uid, claim] : in.claims()) {
    drav1::NodePrepareResourceResponse& converted = (*out.mutable_claims())[uid];
    converted.set_error(claim.error());
    for (const auto& device : claim.devices()) {
      drav1::Device* d = converted.add_devices();
      for (const auto& name : device.request_names()) d->add_request_names(name);
      d->set_pool_name(device.pool_name());
      d->set_device_name(device.device_name());
      for (const auto& id : device.cdi_device_ids()) d->add_cdi_device_ids(id);
    }
  }
  return out;
}

drav1::NodeUnprepareResourcesResponse FromV1beta1(const drav1beta1::NodeUnprepareResourcesResponse& in) {
  drav1::NodeUnprepareResourcesResponse out;
  for (const auto& [uid, claim] : in.claims()) (*out.mutable_claims())[uid].set_error(claim.error());
  return out;
}

// The kubelet's judgement of an answer (pkg/kubelet/cm/dra manager): a result
// for a claim it did not ask about, a claim's error, or claims left out.
template <typename ClaimsMap>
std::string JudgeAnswer(const char* method, const std::vector<drav1::Claim>& claims,
                        const ClaimsMap& answers) {
  std::set<std::string> asked;
  for (const auto& claim : claims) asked.insert(claim.uid());
  std::vector<std::string> unknown;
  for (const auto& [uid, answer] : answers) {
    if (!asked.count(uid)) unknown.push_back(uid);
  }
  std::sort(unknown.begin(), unknown.end());
  if (!unknown.empty()) return std::string(method) + " returned result for unknown claim UID " + unknown[0];
  for (const auto& claim : claims) {
    auto it = answers.find(claim.uid());
    if (it != answers.end() && !it->second.error().empty()) {
      return std::string(method) + " failed for claim " + claim.namespace_() + "/" + claim.name() + ": " +
             it->second.error();
    }
  }
  const size_t left_out = claims.size() - std::min(claims.size(), static_cast<size_t>(answers.size()));
  if (left_out != 0) return std::string(method) + " left out " + std::to_string(left_out) + " claims";
  return "";
}

}  // namespace

KubeletDraStandIn::KubeletDraStandIn(KubeletDraOptions options) : options_(std::move(options)) {}

KubeletDraStandIn::~KubeletDraStandIn() {
  Stop();
}

drav1::Claim KubeletDraStandIn::MakeClaim(const std::string& ns, const std::string& name,
                                          const std::string& uid) {
  drav1::Claim claim;
  claim.set_namespace_(ns);
  claim.set_name(name);
  claim.set_uid(uid);
  return claim;
}

bool KubeletDraStandIn::Start() {
  if (thread_.joinable()) return true;
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0) return false;
  if (inotify_add_watch(inotify_fd_, options_.registry_dir.c_str(),
                        IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO) < 0 ||
      pipe2(wake_fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(inotify_fd_);
    inotify_fd_ = -1;
    return false;
  }
  thread_ = std::thread([this] { Run(); });
  return true;
}

void KubeletDraStandIn::Stop() {
  if (!thread_.joinable()) return;
  const char byte = 1;
  (void)!::write(wake_fds_[1], &byte, 1);
  thread_.join();
  ::close(inotify_fd_);
  ::close(wake_fds_[0]);
  ::close(wake_fds_[1]);
  inotify_fd_ = wake_fds_[0] = wake_fds_[1] = -1;
  refused_.clear();
  {
    std::lock_guard lock(mu_);
    registered_.clear();
    order_.clear();
  }
  changed_.notify_all();
}

bool KubeletDraStandIn::Restart() {
  Stop();
  return Start();
}

void KubeletDraStandIn::Run() {
  Clock::time_point next_retry = Reconcile({});
  for (;;) {
    int timeout_ms = -1;
    if (next_retry != Clock::time_point::max()) {
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_retry - Clock::now());
      timeout_ms = static_cast<int>(std::clamp<long long>(wait.count() + 1, 0, 60'000));
    }
    pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {wake_fds_[0], POLLIN, 0}};
    const int ready = ::poll(fds, 2, timeout_ms);
    if (ready > 0 && (fds[1].revents & POLLIN)) return;
    std::set<std::string> removed;
    if (ready > 0 && (fds[0].revents & POLLIN)) {
      // The directory is rescanned as a whole below; the events only say
      // which sockets went away meanwhile, so that one removed and created
      // again (possibly with the same inode number) is registered anew.
      alignas(inotify_event) char buffer[4096];
      ssize_t length;
      while ((length = ::read(inotify_fd_, buffer, sizeof(buffer))) > 0) {
        for (ssize_t offset = 0; offset < length;) {
          const auto* event = reinterpret_cast<const inotify_event*>(buffer + offset);
          if (event->len > 0 && (event->mask & (IN_DELETE | IN_MOVED_FROM))) {
            removed.insert(options_.registry_dir + "/" + event->name);
          }
          offset += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
        }
      }
    }
    next_retry = Reconcile(removed);
  }
}

Clock::time_point KubeletDraStandIn::Reconcile(const std::set<std::string>& removed) {
  // The sockets that should be registered: what the kubelet's desired state
  // of the world holds.
  std::map<std::string, FileIdentity> desired;
  if (DIR* dir = ::opendir(options_.registry_dir.c_str())) {
    while (dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.empty() || name[0] == '.') continue;
      const std::string path = options_.registry_dir + "/" + name;
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
      desired[path] = FileIdentity{static_cast<unsigned long long>(st.st_dev),
                                   static_cast<unsigned long long>(st.st_ino)};
    }
    ::closedir(dir);
  }

  // Deregister what went away or was replaced.
  {
    std::lock_guard lock(mu_);
    for (auto it = registered_.begin(); it != registered_.end();) {
      auto want = desired.find(it->first);
      if (want != desired.end() && want->second == it->second.identity && !removed.count(it->first)) {
        ++it;
        continue;
      }
      order_.erase(std::remove(order_.begin(), order_.end(), it->second.plugin), order_.end());
      it = registered_.erase(it);
      ++deregistrations_;
    }
  }
  changed_.notify_all();
  for (auto it = refused_.begin(); it != refused_.end();) {
    auto want = desired.find(it->first);
    const bool same =
        want != desired.end() && want->second == it->second.identity && !removed.count(it->first);
    it = same ? std::next(it) : refused_.erase(it);
  }

  // Register what is new.
  Clock::time_point next_retry = Clock::time_point::max();
  for (const auto& [path, identity] : desired) {
    {
      std::lock_guard lock(mu_);
      if (registered_.count(path)) continue;
    }
    auto refused = refused_.find(path);
    if (refused != refused_.end()) {
      if (refused->second.next_attempt > Clock::now()) {
        next_retry = std::min(next_retry, refused->second.next_attempt);
        continue;
      }
    }
    Register(path, identity);
    refused = refused_.find(path);
    if (refused != refused_.end()) next_retry = std::min(next_retry, refused->second.next_attempt);
  }
  return next_retry;
}

std::string KubeletDraStandIn::Validate(const pluginregistration::PluginInfo& info,
                                        std::string* service) const {
  const std::string& driver = info.name();
  const std::string& endpoint = info.endpoint();
  if (info.type() != "DRAPlugin") {
    return "no handler registered for plugin type: " + info.type();
  }
  if (driver.empty()) return "DRA driver name is empty";
  const std::string context =
      "invalid supported gRPC versions of DRA driver plugin " + driver + " at endpoint " + endpoint + ": ";
  if (info.supported_versions().empty()) {
    return context + "empty list of supported gRPC services (aka supported versions)";
  }
  // The plugin's order decides; the first service the kubelet knows wins.
  for (const auto& offered : info.supported_versions()) {
    if (offered == kServiceV1 || offered == kServiceV1beta1) {
      *service = offered;
      break;
    }
  }
  if (service->empty()) {
    std::vector<std::string> offered(info.supported_versions().begin(), info.supported_versions().end());
    return context + "none of services supported by the plugin (" + Quoted(offered) +
           ") are supported by the kubelet (" + Quoted({kServiceV1, kServiceV1beta1}) + ")";
  }
  // The kubelet dials "unix:" + endpoint from its own working directory: only
  // an absolute path names the plugin's socket.
  if (endpoint.empty() || endpoint[0] != '/') {
    return "endpoint \"" + endpoint + "\" of DRA driver plugin " + driver + " is not an absolute socket path";
  }
  std::lock_guard lock(mu_);
  for (const auto& held : order_) {
    if (held->driver == driver && held->endpoint == endpoint) {
      return "endpoint " + endpoint + " already registered for DRA driver plugin " + driver;
    }
  }
  return "";
}

void KubeletDraStandIn::Register(const std::string& path, const FileIdentity& identity) {
  RegistrationAttempt attempt;
  attempt.socket_path = path;
  // Like the kubelet's blocking dial: a socket whose server is not listening
  // yet (created by bind, before listen) is waited for, up to the timeout.
  auto registration = pluginregistration::Registration::NewStub(DraChannel(path));
  {
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    SetDeadline(context, options_.registration_timeout);
    grpc::Status status = registration->GetInfo(&context, pluginregistration::InfoRequest(), &attempt.info);
    attempt.got_info = status.ok();
    if (!status.ok()) attempt.rejection = "GetInfo failed: " + status.error_message();
  }

  std::shared_ptr<Plugin> plugin;
  std::shared_ptr<grpc::Channel> channel;
  if (attempt.got_info) {
    attempt.rejection = Validate(attempt.info, &attempt.chosen_service);
    attempt.accepted = attempt.rejection.empty();
  }
  if (attempt.accepted) {
    plugin = std::make_shared<Plugin>(
        Plugin{attempt.info.name(), attempt.info.endpoint(), path, attempt.chosen_service});
    channel = DraChannel(plugin->endpoint);
    attempt.dra_endpoint_was_serving = WaitForConnection(channel);
    refused_.erase(path);
  }
  if (attempt.got_info) {
    // The verdict goes back to the plugin either way.
    pluginregistration::RegistrationStatus verdict;
    verdict.set_plugin_registered(attempt.accepted);
    if (!attempt.accepted) verdict.set_error(attempt.rejection);
    pluginregistration::RegistrationStatusResponse ignored;
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    SetDeadline(context, options_.registration_timeout);
    grpc::Status status = registration->NotifyRegistrationStatus(&context, verdict, &ignored);
    attempt.notified = status.ok();
    if (!status.ok()) attempt.notify_error = status.error_message();
  }
  if (!attempt.accepted) {
    Refused& refused = refused_[path];
    const bool same = refused.identity == identity && refused.backoff.count() > 0;
    refused.identity = identity;
    refused.backoff = same ? std::min(refused.backoff * 2, options_.retry_max) : options_.retry_initial;
    refused.next_attempt =
        options_.retry_initial.count() > 0 ? Clock::now() + refused.backoff : Clock::time_point::max();
  }
  {
    // The registration and its record appear together (the kubelet registers
    // just before it notifies; nothing here can observe the difference).
    std::lock_guard lock(mu_);
    if (plugin) {
      registered_[path] = Registered{identity, plugin, channel};
      order_.push_back(plugin);
    }
    attempts_.push_back(std::move(attempt));
  }
  changed_.notify_all();
}

bool KubeletDraStandIn::WaitForConnection(const std::shared_ptr<grpc::Channel>& channel) const {
  return channel->WaitForConnected(std::chrono::system_clock::now() + options_.connect_timeout);
}

std::vector<KubeletDraStandIn::RegistrationAttempt> KubeletDraStandIn::attempts() const {
  std::lock_guard lock(mu_);
  return attempts_;
}

size_t KubeletDraStandIn::deregistrations() const {
  std::lock_guard lock(mu_);
  return deregistrations_;
}

std::vector<KubeletDraStandIn::Plugin> KubeletDraStandIn::plugins() const {
  std::lock_guard lock(mu_);
  std::vector<Plugin> out;
  for (const auto& plugin : order_) out.push_back(*plugin);
  return out;
}

bool KubeletDraStandIn::HasPlugin(const std::string& driver) const {
  Target target;
  return FindTarget(driver, &target);
}

bool KubeletDraStandIn::WaitForAttempts(size_t count, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return attempts_.size() >= count; });
}

bool KubeletDraStandIn::WaitForPlugin(const std::string& driver, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, timeout, [&] {
    return std::any_of(order_.begin(), order_.end(), [&](const auto& p) { return p->driver == driver; });
  });
}

bool KubeletDraStandIn::WaitForNoPlugin(const std::string& driver, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, timeout, [&] {
    return std::none_of(order_.begin(), order_.end(), [&](const auto& p) { return p->driver == driver; });
  });
}

bool KubeletDraStandIn::WaitForDeregistrations(size_t count, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return deregistrations_ >= count; });
}

bool KubeletDraStandIn::FindTarget(const std::string& driver, Target* target) const {
  std::lock_guard lock(mu_);
  // The most recent registration whose connection is up, else the most recent.
  const Registered* chosen = nullptr;
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    if ((*it)->driver != driver) continue;
    const Registered& entry = registered_.at((*it)->registration_socket);
    if (chosen == nullptr) chosen = &entry;
    if (entry.channel->GetState(false) == GRPC_CHANNEL_READY) {
      chosen = &entry;
      break;
    }
  }
  if (chosen == nullptr) return false;
  target->plugin = chosen->plugin;
  target->channel = chosen->channel;
  return true;
}

template <typename Result, typename V1Request, typename V1beta1Request, typename V1beta1Response,
          typename Rpc>
Result KubeletDraStandIn::CallPlugin(const std::string& driver, const std::vector<drav1::Claim>& claims,
                                     const char* method, const std::string& unregistered, Rpc rpc) const {
  Result result;
  Target target;
  if (!FindTarget(driver, &target)) {
    result.status =
        grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "DRA driver " + driver + " is not registered");
    result.kubelet_error = unregistered + ": " + result.status.error_message();
    return result;
  }
  result.service = target.plugin->service;
  result.endpoint = target.plugin->endpoint;
  if (!WaitForConnection(target.channel)) {
    result.status =
        grpc::Status(grpc::StatusCode::UNAVAILABLE, "timed out waiting for gRPC connection to be ready");
  } else {
    grpc::ClientContext context;
    SetDeadline(context, options_.call_timeout);
    if (result.service == kServiceV1) {
      V1Request request;
      for (const auto& claim : claims) *request.add_claims() = claim;
      result.status = rpc(*drav1::DRAPlugin::NewStub(target.channel), &context, request, &result.response);
    } else {
      V1beta1Request request;
      for (const auto& claim : claims) CopyClaim(claim, request.add_claims());
      V1beta1Response response;
      result.status = rpc(*drav1beta1::DRAPlugin::NewStub(target.channel), &context, request, &response);
      if (result.status.ok()) result.response = FromV1beta1(response);
    }
  }
  if (!result.status.ok()) {
    result.kubelet_error = std::string(method) + " failed: " + result.status.error_message();
  } else {
    result.kubelet_error = JudgeAnswer(method, claims, result.response.claims());
  }
  return result;
}

KubeletDraStandIn::PrepareResult KubeletDraStandIn::NodePrepareResources(
    const std::string& driver, const std::vector<drav1::Claim>& claims) {
  return CallPlugin<PrepareResult, drav1::NodePrepareResourcesRequest,
                    drav1beta1::NodePrepareResourcesRequest, drav1beta1::NodePrepareResourcesResponse>(
      driver, claims, "NodePrepareResources", "failed to get gRPC client for driver " + driver,
      [](auto& stub, grpc::ClientContext* context, const auto& request, auto* response) {
        return stub.NodePrepareResources(context, request, response);
      });
}

KubeletDraStandIn::UnprepareResult KubeletDraStandIn::NodeUnprepareResources(
    const std::string& driver, const std::vector<drav1::Claim>& claims) {
  return CallPlugin<UnprepareResult, drav1::NodeUnprepareResourcesRequest,
                    drav1beta1::NodeUnprepareResourcesRequest, drav1beta1::NodeUnprepareResourcesResponse>(
      driver, claims, "NodeUnprepareResources", "get gRPC client for DRA driver " + driver,
      [](auto& stub, grpc::ClientContext* context, const auto& request, auto* response) {
        return stub.NodeUnprepareResources(context, request, response);
      });
}

}  // namespace tessera::testing
