// KubeletStandIn: the kubelet's side of the device-plugin API (v1beta1), for
// tests. It speaks the real gRPC protocol over unix sockets, like a kubelet:
//  - serves Registration on <dir>/kubelet.sock and checks each RegisterRequest
//    the way the kubelet does (API version, resource name shape, endpoint a
//    plain file name in the same dir);
//  - dials the plugin back on <dir>/<endpoint>. It records whether the
//    plugin's socket was already answering at registration time (a real
//    kubelet fails the plugin otherwise), then consumes ListAndWatch in the
//    background, keeping the latest device list. Like a kubelet it keeps one
//    plugin per resource name: a registration replaces the plugin of its
//    resource and leaves the others' (NVIDIA's mixed MIG strategy registers
//    one per MIG profile). Calls without a resource name go to the resource
//    registered last;
//  - calls GetDevicePluginOptions, GetPreferredAllocation, Allocate and
//    PreStartContainer on request;
//  - Restart(): stops serving, deletes kubelet.sock and every other socket in
//    the dir (as a starting kubelet clears its plugin dir) and serves again.
//
// With a pod-resources socket path it also serves the PodResources API v1
// (v1.PodResourcesLister) there, as a kubelet does on
// /var/lib/kubelet/pod-resources/kubelet.sock:
//  - AdmitContainer() plays the kubelet admitting a container that requests
//    some devices: it calls the plugin's Allocate with them and, when that
//    succeeds, assigns them to the container (resource = the registered
//    plugin's resource name). RemovePod() is the pod being deleted;
//  - List reports every admitted pod with, per container, one ContainerDevices
//    per device and NUMA node of the device (as a kubelet does); Get one pod
//    (an unknown pod is an error with the kubelet's code and wording);
//    GetAllocatableResources the healthy devices of the latest ListAndWatch list;
//  - AdmitClaimContainer() plays the kubelet starting a container whose DRA
//    claims its DRA plugin prepared: List and Get report them in the
//    container's dynamic_resources (claim, driver, pool, device, CDI devices);
//  - Restart() deletes and recreates this socket too, and keeps the pods (a
//    kubelet restores assignments from its checkpoint).
//
// Thread-safety: all public members are safe from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "podresources/v1/api.grpc.pb.h"

namespace tessera::testing {

class KubeletStandIn {
 public:
  struct Registration {
    v1beta1::RegisterRequest request;
    bool accepted = false;            // passed the kubelet's checks
    std::string rejection;            // why not, when !accepted
    bool plugin_was_serving = false;  // the endpoint answered GetDevicePluginOptions during Register
    v1beta1::DevicePluginOptions plugin_options;
  };

  // `dir` is the plugin directory (must exist; keep it short: unix socket
  // paths are limited to 107 bytes). `pod_resources_socket`, when not empty,
  // is where the PodResources API is served (its directory is created).
  explicit KubeletStandIn(std::string dir, std::string pod_resources_socket = "");
  ~KubeletStandIn();
  KubeletStandIn(const KubeletStandIn&) = delete;
  KubeletStandIn& operator=(const KubeletStandIn&) = delete;

  // Serves Registration on <dir>/kubelet.sock (and the PodResources API when
  // configured). Returns false if binding failed.
  bool Start();
  // Stops serving and closes the stream to the plugin; kubelet.sock and the
  // pod-resources socket are removed.
  void Stop();
  // A kubelet restart: Stop, delete every socket in the dir (as a starting
  // kubelet does; `wipe_plugin_sockets` false keeps the others), Start. The
  // admitted pods are kept.
  bool Restart(bool wipe_plugin_sockets = true);

  std::string socket_path() const { return dir_ + "/kubelet.sock"; }
  const std::string& pod_resources_socket_path() const { return pod_resources_socket_; }

  std::vector<Registration> registrations() const;
  // Waits until at least `count` registrations were recorded.
  bool WaitForRegistrations(size_t count, std::chrono::milliseconds timeout) const;

  // The latest list received on ListAndWatch, and how many lists arrived so far
  // (since Start; Restart resets neither).
  std::vector<v1beta1::Device> devices() const;
  uint64_t device_lists_received() const;
  // Waits until the latest list satisfies `predicate`.
  bool WaitForDevices(const std::function<bool(const std::vector<v1beta1::Device>&)>& predicate,
                      std::chrono::milliseconds timeout) const;
  // The same for the plugin of `resource` (empty until it registered and sent a list).
  std::vector<v1beta1::Device> devices(const std::string& resource) const;
  bool WaitForDevices(const std::string& resource,
                      const std::function<bool(const std::vector<v1beta1::Device>&)>& predicate,
                      std::chrono::milliseconds timeout) const;

  // Calls on the most recently accepted plugin.
  grpc::Status GetDevicePluginOptions(v1beta1::DevicePluginOptions* response);
  grpc::Status Allocate(const v1beta1::AllocateRequest& request, v1beta1::AllocateResponse* response);
  grpc::Status GetPreferredAllocation(const v1beta1::PreferredAllocationRequest& request,
                                      v1beta1::PreferredAllocationResponse* response);
  grpc::Status PreStartContainer(const v1beta1::PreStartContainerRequest& request);

  // The kubelet admitting container `container` of pod `ns`/`pod` with the
  // devices `device_ids` of the registered plugin: Allocate is called with
  // them and, if it succeeds, the devices are the container's (List reports
  // them) and the plugin's answer is copied to `response` (may be null). A
  // failed Allocate records nothing. No devices: the container is recorded
  // without calling the plugin, as a kubelet does for containers that request
  // none. Devices held by another container are refused (FAILED_PRECONDITION),
  // as a kubelet never hands out a device twice. Admitting a container again
  // replaces its devices.
  grpc::Status AdmitContainer(const std::string& ns, const std::string& pod, const std::string& container,
                              const std::vector<std::string>& device_ids,
                              v1beta1::ContainerAllocateResponse* response);
  // The same with the devices of the plugin of `resource`.
  grpc::Status AdmitContainer(const std::string& ns, const std::string& pod, const std::string& container,
                              const std::string& resource, const std::vector<std::string>& device_ids,
                              v1beta1::ContainerAllocateResponse* response);
  // One allocated device of a container's DRA claim, as PodResources lists it
  // (a ClaimResource of the claim's DynamicResource).
  struct ClaimDevice {
    std::string claim_namespace;
    std::string claim_name;
    std::string driver;
    std::string pool;
    std::string device;
    std::vector<std::string> cdi_devices;  // fully qualified: "<kind>=<name>"
  };
  // The kubelet starting container `container` of pod `ns`/`pod` with DRA
  // claims its DRA plugin prepared (the kubelet DRA stand-in's
  // NodePrepareResources answer has the CDI IDs): List and Get report one
  // DynamicResource per claim, in the order given, each with its devices. No
  // plugin is called. Admitting again replaces the container's claims; its
  // device-plugin devices stay (and AdmitContainer keeps its claims).
  void AdmitClaimContainer(const std::string& ns, const std::string& pod, const std::string& container,
                           std::vector<ClaimDevice> claims);
  // The pod was deleted: it is no longer listed and its devices are free.
  void RemovePod(const std::string& ns, const std::string& pod);

 private:
  class RegistrationService;
  class PodResourcesService;

  struct AssignedDevice {
    std::string id;
    std::vector<int64_t> numa_nodes;  // from the device list at admission
  };
  struct AdmittedContainer {
    std::string name;
    std::string resource_name;  // empty when it holds no devices
    std::vector<AssignedDevice> devices;
    std::vector<ClaimDevice> claims{};  // DRA, in admission order
  };
  struct AdmittedPod {
    std::string ns;
    std::string name;
    std::vector<AdmittedContainer> containers;  // in admission order
  };

  // Callers hold mu_.
  AdmittedPod* FindPodLocked(const std::string& ns, const std::string& pod);
  // The container's record, added (and its pod) when new: admitted last.
  AdmittedContainer& ContainerLocked(const std::string& ns, const std::string& pod,
                                     const std::string& container);
  void FillPodLocked(const AdmittedPod& pod, v1::PodResources* out) const;
  bool StartPodResourcesServer();

  // A registered plugin: its endpoint and the latest list it sent.
  struct Plugin {
    std::string endpoint_path;  // "" after a restart until it registers again
    std::vector<v1beta1::Device> devices;
    uint64_t lists_received = 0;
  };
  // The ListAndWatch stream of one plugin.
  struct Watch {
    std::shared_ptr<grpc::ClientContext> context;
    std::thread thread;
  };

  void OnRegister(const v1beta1::RegisterRequest& request, Registration& record);
  void StartWatch(const std::string& resource, const std::string& endpoint_path);
  void StopWatch();
  std::unique_ptr<v1beta1::DevicePlugin::Stub> PluginStub() const;

  const std::string dir_;
  const std::string pod_resources_socket_;
  std::unique_ptr<RegistrationService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<PodResourcesService> pod_resources_service_;
  std::unique_ptr<grpc::Server> pod_resources_server_;

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::vector<Registration> registrations_;  // guarded by mu_
  std::map<std::string, Plugin> plugins_;    // guarded by mu_; by resource name
  std::string last_resource_name_;           // guarded by mu_; registered last, kept across restarts
  std::vector<AdmittedPod> pods_;            // guarded by mu_; in admission order
  uint64_t lists_received_ = 0;              // guarded by mu_; of every plugin
  std::map<std::string, Watch> watches_;     // guarded by watch_mu_; contexts cancelled under mu_ too
  std::mutex watch_mu_;                      // serialises StartWatch/StopWatch
};

// How many of `devices` (a ListAndWatch list) the plugin reports Healthy.
size_t CountHealthy(const std::vector<v1beta1::Device>& devices);

}  // namespace tessera::testing
