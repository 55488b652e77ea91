// Which pod and container holds which device: read from the kubelet's
// PodResources API v1 (`v1.PodResourcesLister/List`, served by the kubelet on
// /var/lib/kubelet/pod-resources/kubelet.sock).
//
// The device plugin's Allocate is not told which pod it serves, so the agent
// learns the pod of each container's devices here, afterwards; joining device
// IDs to region directories is done elsewhere. PodResourcesSource is the seam
// that code depends on (tests substitute a fake); KubeletPodResources is the
// real one, speaking gRPC to the kubelet.
#pragma once

#include <chrono>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/result.h"

namespace grpc {
class Channel;
}  // namespace grpc
namespace v1 {
class ListPodResourcesResponse;
}  // namespace v1

namespace tessera::node {

// Where a kubelet with the default root directory serves the API.
inline constexpr const char* kDefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock";

// The devices of one extended resource held by one container.
struct ContainerDevices {
  std::string pod_namespace;
  std::string pod_name;
  std::string container_name;
  std::string resource_name;            // e.g. "nvidia.com/gpu"
  std::vector<std::string> device_ids;  // as the device plugin advertised them; no duplicates
  // Dynamic Resource Allocation: the fully qualified CDI device names of the
  // container's claims (PodResources `dynamic_resources`), in an entry of
  // their own with resource_name "" and no device_ids; no duplicates.
  std::vector<std::string> cdi_devices{};
  bool operator==(const ContainerDevices&) const = default;
  // "ns/pod/container nvidia.com/gpu [id, id]", for logs and test failures.
  friend std::ostream& operator<<(std::ostream& out, const ContainerDevices& devices);
};

class PodResourcesSource {
 public:
  virtual ~PodResourcesSource() = default;
  // Every container on the node that holds device-plugin devices: one entry per
  // container and resource, in the order the kubelet lists them. Containers
  // without devices are left out. An error means nothing could be learned this
  // time (the caller keeps its previous view and asks again later).
  virtual Result<std::vector<ContainerDevices>> List() = 0;
};

// Flattens a List answer into ContainerDevices. A kubelet sends one
// `ContainerDevices` message per device (and per NUMA node of a device), so the
// entries of one container and resource are merged, keeping the first
// occurrence of each device ID. Resources with no device IDs and containers
// with no devices are left out; CPUs and memory are ignored. A container's DRA
// claims' CDI devices (every claim, every driver) make one more entry with
// cdi_devices set (claim_regions.h reads it).
std::vector<ContainerDevices> FlattenPodResources(const v1::ListPodResourcesResponse& response);

// PodResourcesSource over the kubelet's unix socket.
//
// Errors come back as values naming the socket: missing socket (the API
// disabled or the directory not mounted into the agent), nobody listening
// (the kubelet down or restarting), permission denied, no answer within the
// timeout, or the gRPC status the kubelet returned. No exception escapes.
//
// One gRPC channel is kept and reused. A kubelet restart deletes and recreates
// the socket; a call that finds the channel unable to connect is retried once
// on a fresh channel, so the first List after the restart already works.
//
// Thread-safety: List may be called from any number of threads at once.
class KubeletPodResources final : public PodResourcesSource {
 public:
  // `socket_path`: the kubelet's socket, normally kDefaultPodResourcesSocket.
  // `timeout`: the most one List call may take, connecting included.
  explicit KubeletPodResources(std::string socket_path,
                               std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ~KubeletPodResources() override;
  KubeletPodResources(const KubeletPodResources&) = delete;
  KubeletPodResources& operator=(const KubeletPodResources&) = delete;

  Result<std::vector<ContainerDevices>> List() override;

  const std::string& socket_path() const { return socket_path_; }

 private:
  Result<std::vector<ContainerDevices>> ListOrError();
  // The shared channel; when `replace_if` is the current one, a new channel
  // replaces it first (it failed to connect).
  std::shared_ptr<grpc::Channel> Channel(const std::shared_ptr<grpc::Channel>& replace_if = nullptr);

  const std::string socket_path_;
  const std::chrono::milliseconds timeout_;

  std::mutex mu_;
  std::shared_ptr<grpc::Channel> channel_;  // guarded by mu_
};

}  // namespace tessera::node
