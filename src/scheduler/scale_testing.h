// A cluster as a large operator's API server holds it, for the scale
// benchmark (bench/scale) and the memory footprint test: Nodes as a kubelet
// and the node controller publish them (~7 KB of JSON at 8 GPUs, a tessera
// inventory among them) and Running pods of training jobs (~2.7 KB with a
// tessera allocation). Header-only; not part of the library's interface.
// Node addresses are on the loopback range (127.0.100.0 and up): the
// dashboard scrapes each node's InternalIP, and nothing may leave the machine.
#pragma once

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/allocation_codec.h"
#include "core/pod_request.h"
#include "scheduler/cluster_state.h"
#include "scheduler/testing.h"

namespace tessera::scheduler::testing {

using Json = nlohmann::json;

// A Node as a kubelet and the cloud's node controller publish it, with a
// tessera inventory: ~6.6 KB of JSON at 8 GPUs.
inline Json RealisticNode(const std::string& name, int id, int gpus, const std::string& heartbeat) {
  Json node = NodeWithGpus(name, id + 1, gpus, 81920, 10, "NVIDIA A100-SXM4-80GB", heartbeat);
  Json& meta = node["metadata"];
  meta["uid"] = "0c2f1d3e-" + std::to_string(100000 + id) + "-4a5b-9c8d-7e6f5a4b3c2d";
  meta["creationTimestamp"] = "2026-01-05T08:00:00Z";
  meta["labels"] = {{"kubernetes.io/hostname", name},
                    {"kubernetes.io/arch", "amd64"},
                    {"kubernetes.io/os", "linux"},
                    {"beta.kubernetes.io/arch", "amd64"},
                    {"beta.kubernetes.io/os", "linux"},
                    {"node.kubernetes.io/instance-type", "p4de.24xlarge"},
                    {"topology.kubernetes.io/region", "us-east-1"},
                    {"topology.kubernetes.io/zone", "us-east-1" + std::string(1, char('a' + id % 4))},
                    {"nvidia.com/gpu.present", "true"},
                    {"nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"},
                    {"nvidia.com/gpu.count", std::to_string(gpus)},
                    {"nvidia.com/gpu.memory", "81920"},
                    {"tessera.io/node", "enabled"},
                    {"pool", "gpu-" + std::to_string(id % 16)}};
  meta["annotations"]["node.alpha.kubernetes.io/ttl"] = "0";
  meta["annotations"]["volumes.kubernetes.io/controller-managed-attach-detach"] = "true";
  meta["annotations"]["csi.volume.kubernetes.io/nodeid"] =
      "{\"ebs.csi.aws.com\":\"i-0" + std::to_string(700000000 + id) + "\"}";
  node["spec"] = {{"podCIDR", "10.1." + std::to_string(id % 250) + ".0/24"},
                  {"podCIDRs", {"10.1." + std::to_string(id % 250) + ".0/24"}},
                  {"providerID", "aws:///us-east-1a/i-0" + std::to_string(700000000 + id)},
                  {"taints", {{{"key", "nvidia.com/gpu"}, {"value", "present"}, {"effect", "NoSchedule"}}}}};
  Json capacity = {{"cpu", "96"},           {"memory", "1176522256Ki"}, {"ephemeral-storage", "1873285Mi"},
                   {"pods", "250"},         {"hugepages-1Gi", "0"},     {"hugepages-2Mi", "0"},
                   {"nvidia.com/gpu", "80"}};
  Json conditions = Json::array();
  for (const char* type : {"MemoryPressure", "DiskPressure", "PIDPressure", "Ready"}) {
    const bool ready = std::strcmp(type, "Ready") == 0;
    conditions.push_back({{"type", type},
                          {"status", ready ? "True" : "False"},
                          {"lastHeartbeatTime", "2026-01-05T09:59:30Z"},
                          {"lastTransitionTime", "2026-01-05T08:00:00Z"},
                          {"reason", ready ? "KubeletReady" : std::string("KubeletHasNo") + type},
                          {"message", ready ? "kubelet is posting ready status"
                                            : std::string("kubelet has no ") + type + " on this node"}});
  }
  Json images = Json::array();
  for (int i = 0; i < 12; ++i) {
    images.push_back(
        {{"names",
          {"registry.example.com/ml/training-image-" + std::to_string(i) +
               "@sha256:4c1d7a0e2b8f9d6c5a3b1e0f7d2c9a8b6e4f3d1c0b9a8e7f6d5c4b3a2e1f0d9c",
           "registry.example.com/ml/training-image-" + std::to_string(i) + ":v1." + std::to_string(i)}},
         {"sizeBytes", 4000000000LL + i * 12345678LL}});
  }
  node["status"] = {
      {"capacity", capacity},
      {"allocatable", capacity},
      {"conditions", conditions},
      {"addresses",
       {{{"type", "InternalIP"},
         {"address", "127.0." + std::to_string(100 + id / 250) + "." + std::to_string(id % 250)}},
        {{"type", "Hostname"}, {"address", name}},
        {{"type", "InternalDNS"}, {"address", name + ".ec2.internal"}}}},
      {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", 10250}}}}},
      {"nodeInfo",
       {{"machineID", "ec2" + std::to_string(1000000 + id)},
        {"systemUUID", "ec2" + std::to_string(1000000 + id)},
        {"bootID", "b7c1e2d3-" + std::to_string(id)},
        {"kernelVersion", "6.1.0-18-cloud-amd64"},
        {"osImage", "Debian GNU/Linux 12 (bookworm)"},
        {"containerRuntimeVersion", "containerd://1.7.13"},
        {"kubeletVersion", "v1.31.2"},
        {"kubeProxyVersion", "v1.31.2"},
        {"operatingSystem", "linux"},
        {"architecture", "amd64"}}},
      {"images", images}};
  return node;
}

// A Running pod of a training job as the API server stores it: ~2.1 KB.
inline Json RealisticPod(int p, int gpus, int64_t mem, int cores) {
  const std::string name = "train-" + std::to_string(p / 8) + "-worker-" + std::to_string(p % 8);
  Json pod = GpuPod("team-" + std::to_string(p % 40), name, gpus, mem, cores);
  Json& meta = pod["metadata"];
  meta["uid"] = "6f1e2d3c-" + std::to_string(10000000 + p) + "-4b5a-8c9d-0e1f2a3b4c5d";
  meta["generateName"] = "train-" + std::to_string(p / 8) + "-worker-";
  meta["creationTimestamp"] = "2026-01-05T09:00:00Z";
  meta["labels"] = {{"app.kubernetes.io/name", "trainer"},
                    {"job-name", "train-" + std::to_string(p / 8)},
                    {"batch.kubernetes.io/job-name", "train-" + std::to_string(p / 8)},
                    {"controller-uid", "a1b2c3d4-" + std::to_string(p / 8)}};
  meta["ownerReferences"] = {{{"apiVersion", "batch/v1"},
                              {"kind", "Job"},
                              {"name", "train-" + std::to_string(p / 8)},
                              {"uid", "a1b2c3d4-" + std::to_string(p / 8)},
                              {"controller", true},
                              {"blockOwnerDeletion", true}}};
  Json& c = pod["spec"]["containers"][0];
  c["image"] = "registry.example.com/ml/training-image-3:v1.3";
  c["command"] = {"python", "-m", "train", "--config", "/etc/train/config.yaml"};
  c["env"] = {{{"name", "RANK"}, {"value", std::to_string(p % 8)}},
              {{"name", "WORLD_SIZE"}, {"value", "8"}},
              {{"name", "MASTER_ADDR"}, {"value", "train-" + std::to_string(p / 8) + "-worker-0"}}};
  c["resources"]["requests"] = {{"cpu", "4"}, {"memory", "32Gi"}};
  c["volumeMounts"] = {{{"name", "config"}, {"mountPath", "/etc/train"}},
                       {{"name", "kube-api-access"},
                        {"mountPath", "/var/run/secrets/kubernetes.io/serviceaccount"},
                        {"readOnly", true}}};
  c["terminationMessagePath"] = "/dev/termination-log";
  c["imagePullPolicy"] = "IfNotPresent";
  Json& spec = pod["spec"];
  spec["restartPolicy"] = "Never";
  spec["serviceAccountName"] = "trainer";
  spec["dnsPolicy"] = "ClusterFirst";
  spec["priority"] = 0;
  spec["tolerations"] = {{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}},
                         {{"key", "node.kubernetes.io/not-ready"},
                          {"operator", "Exists"},
                          {"effect", "NoExecute"},
                          {"tolerationSeconds", 300}}};
  spec["volumes"] = {{{"name", "config"}, {"configMap", {{"name", "train-config"}}}}};
  Json conditions = Json::array();
  for (const char* type :
       {"PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"}) {
    conditions.push_back(
        {{"type", type}, {"status", "True"}, {"lastTransitionTime", "2026-01-05T09:00:05Z"}});
  }
  pod["status"] = {{"phase", "Running"},
                   {"conditions", conditions},
                   {"hostIP", "127.0.100." + std::to_string(p % 250)},
                   {"podIP", "127.1." + std::to_string(p % 250) + "." + std::to_string(p % 200)},
                   {"startTime", "2026-01-05T09:00:01Z"},
                   {"qosClass", "Burstable"},
                   {"containerStatuses",
                    {{{"name", "app"},
                      {"ready", true},
                      {"restartCount", 0},
                      {"image", "registry.example.com/ml/training-image-3:v1.3"},
                      {"imageID", "registry.example.com/ml/training-image-3@sha256:4c1d7a0e2b8f9d6c5a3b"},
                      {"containerID", "containerd://9f8e7d6c5b4a" + std::to_string(p)},
                      {"started", true},
                      {"state", {{"running", {{"startedAt", "2026-01-05T09:00:04Z"}}}}}}}}};
  return pod;
}

// Fills `server` (the API-server stand-in, or anything with its CreateObject)
// with `nodes` RealisticNodes of `gpus` GPUs named gpu-node-<i> (into
// `names`) and `pods` RealisticPods bound round-robin with allocations a
// scheduler would have made. Returns the pods created, or -1 on an error.
template <typename Server>
int PopulateCluster(Server& server, int nodes, int gpus, int pods, std::vector<std::string>* names) {
  const std::string heartbeat = Heartbeat(std::chrono::system_clock::now());
  ClusterState placer;
  for (int n = 0; n < nodes; ++n) {
    names->push_back("gpu-node-" + std::to_string(n));
    Json node = RealisticNode(names->back(), n, gpus, heartbeat);
    placer.UpsertNode(node);
    if (!server.CreateObject("nodes", std::move(node)).ok()) return -1;
  }
  int placed = 0;
  for (int p = 0; p < pods && nodes > 0; ++p) {
    Json pod = RealisticPod(p, 1, 2000 + (p % 7) * 1000, 5 + (p % 4) * 5);
    auto request = core::DerivePodRequest(pod, {});
    if (!request.ok()) return -1;
    const std::string& node = (*names)[p % nodes];
    const std::string key =
        pod["metadata"]["namespace"].get<std::string>() + "/" + pod["metadata"]["name"].get<std::string>();
    auto alloc = placer.Reserve(key, *request, node, core::GpuOrder::kSpread, std::chrono::hours(24));
    if (!alloc.ok()) continue;
    auto text = core::EncodeAllocation(*alloc);
    if (!text.ok()) return -1;
    pod["metadata"]["annotations"][std::string(core::kAllocationAnnotation)] = *text;
    pod["spec"]["nodeName"] = node;
    if (!server.CreateObject("pods", std::move(pod)).ok()) return -1;
    ++placed;
  }
  return placed;
}

}  // namespace tessera::scheduler::testing
