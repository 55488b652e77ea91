#include "node/pod_resources.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <iterator>
#include <map>
#include <ostream>
#include <set>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "podresources/v1/api.grpc.pb.h"

namespace tessera::node {
namespace {

// The kubelet's own PodResources client allows answers up to 16 MiB; gRPC's
// default of 4 MiB could be too small on a node with many pods.
constexpr int kMaxAnswerBytes = 16 * 1024 * 1024;
// While the kubelet restarts the channel backs off between connection
// attempts; keep that short so the shared channel recovers soon on its own.
constexpr int kInitialReconnectBackoffMs = 100;
constexpr int kMaxReconnectBackoffMs = 1000;

// gRPC's status codes are 0..16, in this order (grpc/status.h).
constexpr const char* kCodeNames[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};
static_assert(static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED) == 4 &&
              static_cast<int>(grpc::StatusCode::PERMISSION_DENIED) == 7 &&
              static_cast<int>(grpc::StatusCode::UNIMPLEMENTED) == 12 &&
              static_cast<int>(grpc::StatusCode::UNAUTHENTICATED) == 16);

const char* CodeName(grpc::StatusCode code) {
  const auto index = static_cast<size_t>(code);
  return index < std::size(kCodeNames) ? kCodeNames[index] : "unknown code";
}

std::string ChannelTarget(const std::string& path) {
  // "unix:///abs/path" for absolute paths; gRPC reads "unix:rel" as relative.
  return path.starts_with('/') ? "unix://" + path : "unix:" + path;
}

// Connects to the socket without gRPC to learn why gRPC could not: 0 when a
// listener accepted, else the errno (ENOENT, ECONNREFUSED, EACCES, ...).
int ProbeConnect(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);  // length checked by the caller
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  int result = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  int error = result == 0 ? 0 : errno;
  ::close(fd);
  return error == EAGAIN ? 0 : error;  // EAGAIN: a listener with a full backlog
}

std::string MissingSocket(const std::string& path) {
  return "the kubelet's pod-resources socket " + path +
         " does not exist (is the kubelet's PodResources API enabled / the directory mounted?)";
}

}  // namespace

std::ostream& operator<<(std::ostream& out, const ContainerDevices& devices) {
  out << devices.pod_namespace << "/" << devices.pod_name << "/" << devices.container_name << " "
      << devices.resource_name << " [";
  for (size_t i = 0; i < devices.device_ids.size(); ++i) out << (i == 0 ? "" : ", ") << devices.device_ids[i];
  out << "]";
  for (size_t i = 0; i < devices.cdi_devices.size(); ++i)
    out << (i == 0 ? " cdi [" : ", ") << devices.cdi_devices[i]
        << (i + 1 == devices.cdi_devices.size() ? "]" : "");
  return out;
}

std::vector<ContainerDevices> FlattenPodResources(const v1::ListPodResourcesResponse& response) {
  std::vector<ContainerDevices> flat;
  for (const auto& pod : response.pod_resources()) {
    for (const auto& container : pod.containers()) {
      // Index into `flat` of this container's entry per resource, and the IDs
      // already taken, so repeated entries (one per device) merge.
      std::map<std::string, size_t> entry_of_resource;
      std::map<std::string, std::set<std::string>> seen;
      for (const auto& devices : container.devices()) {
        if (devices.device_ids_size() == 0) continue;
        auto [it, inserted] = entry_of_resource.try_emplace(devices.resource_name(), flat.size());
        if (inserted) {
          flat.push_back(
              ContainerDevices{pod.namespace_(), pod.name(), container.name(), devices.resource_name(), {}});
        }
        ContainerDevices& entry = flat[it->second];
        auto& ids_seen = seen[devices.resource_name()];
        for (const auto& id : devices.device_ids()) {
          if (ids_seen.insert(id).second) entry.device_ids.push_back(id);
        }
      }
      // DRA: the CDI devices of all the container's claims, one entry.
      ContainerDevices claims{pod.namespace_(), pod.name(), container.name(), "", {}};
      std::set<std::string> cdi_seen;
      for (const auto& dynamic : container.dynamic_resources()) {
        for (const auto& resource : dynamic.claim_resources()) {
          for (const auto& cdi : resource.cdi_devices()) {
            if (!cdi.name().empty() && cdi_seen.insert(cdi.name()).second)
              claims.cdi_devices.push_back(cdi.name());
          }
        }
      }
      if (!claims.cdi_devices.empty()) flat.push_back(std::move(claims));
    }
  }
  return flat;
}

KubeletPodResources::KubeletPodResources(std::string socket_path, std::chrono::milliseconds timeout)
    : socket_path_(std::move(socket_path)), timeout_(timeout) {}

KubeletPodResources::~KubeletPodResources() = default;

std::shared_ptr<grpc::Channel> KubeletPodResources::Channel(
    const std::shared_ptr<grpc::Channel>& replace_if) {
  std::lock_guard lock(mu_);
  // Another thread may have replaced the failed channel already: use its.
  if (!channel_ || (replace_if && channel_ == replace_if)) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxAnswerBytes);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
    // A channel of its own, not one shared with other stubs to the same target.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ =
        grpc::CreateCustomChannel(ChannelTarget(socket_path_), grpc::InsecureChannelCredentials(), args);
  }
  return channel_;
}

Result<std::vector<ContainerDevices>> KubeletPodResources::List() {
  try {
    return ListOrError();
  } catch (const std::exception& e) {
    return Error{"reading pod resources from " + socket_path_ + " failed: " + e.what()};
  } catch (...) {
    return Error{"reading pod resources from " + socket_path_ + " failed (unknown exception)"};
  }
}

Result<std::vector<ContainerDevices>> KubeletPodResources::ListOrError() {
  if (socket_path_.size() >= sizeof(sockaddr_un::sun_path)) {
    return Error{"the pod-resources socket path " + socket_path_ + " is too long for a unix socket (" +
                 std::to_string(socket_path_.size()) + " bytes, at most " +
                 std::to_string(sizeof(sockaddr_un::sun_path) - 1) + ")"};
  }
  struct stat st {};
  if (::stat(socket_path_.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return Error{MissingSocket(socket_path_)};
    return Error{"cannot reach the kubelet's pod-resources socket " + socket_path_ + ": " +
                 std::strerror(errno)};
  }
  if (!S_ISSOCK(st.st_mode)) {
    return Error{socket_path_ + " is not a socket (expected the kubelet's pod-resources socket)"};
  }

  // One deadline for the whole call, retry included.
  const auto deadline = std::chrono::system_clock::now() + timeout_;
  std::shared_ptr<grpc::Channel> channel = Channel();
  v1::ListPodResourcesResponse response;
  grpc::Status status;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto stub = v1::PodResourcesLister::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(deadline);
    response.Clear();
    status = stub->List(&context, v1::ListPodResourcesRequest(), &response);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE || attempt == 1) break;
    // The channel could not connect, possibly only because it is backing off
    // after the old socket went away: once more on a fresh channel.
    channel = Channel(channel);
  }
  if (status.ok()) return FlattenPodResources(response);

  const std::string timeout_ms = std::to_string(timeout_.count());
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return Error{"the kubelet did not answer PodResources List on " + socket_path_ + " within " + timeout_ms +
                 " ms (deadline exceeded)"};
  }
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    // gRPC's wording of connection errors varies by version: ask the socket.
    switch (int error = ProbeConnect(socket_path_)) {
      case 0:
        break;  // something listens now; report what gRPC said
      case ENOENT:
        return Error{MissingSocket(socket_path_)};
      case ECONNREFUSED:
        return Error{"the kubelet's pod-resources socket " + socket_path_ +
                     " refused the connection (connection refused: no kubelet is listening on it; is it "
                     "restarting?)"};
      case EACCES:
      case EPERM:
        return Error{"cannot connect to the kubelet's pod-resources socket " + socket_path_ +
                     ": permission denied (the agent must run privileged)"};
      default:
        return Error{"cannot connect to the kubelet's pod-resources socket " + socket_path_ + ": " +
                     std::strerror(error)};
    }
  }
  return Error{"PodResources List on " + socket_path_ + " failed: gRPC status " +
               CodeName(status.error_code()) + " (" + std::to_string(static_cast<int>(status.error_code())) +
               "): " + status.error_message()};
}

}  // namespace tessera::node
