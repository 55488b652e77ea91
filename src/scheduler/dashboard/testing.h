// A small cluster for the dashboard's tests (unit, integration, Chromium):
// the Node and Pod objects as the API server holds them and the metrics text
// each node's tessera-node would serve, with the figures a page must show.
// Header-only; not part of the library's interface.
//
//   gpu-a      2 × 16000 MiB: ml/train-1 (8000 MiB, 50 %) and ml/train-2
//              (4000 MiB, 30 %) on GPU 0
//   gpu-b      2 × 16000 MiB: web/infer-1 (2 vGPUs of 2000 MiB, 20 %), and
//              web/garbled, bound with an allocation annotation that is not JSON
//   cpu-only   no tessera.io/gpu-inventory annotation
//   broken     an inventory annotation that is not JSON
//   ml/waiting pending: PodScheduled=False with kube-scheduler's message
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/prometheus_text.h"
#include "core/allocation_codec.h"
#include "scheduler/testing.h"

namespace tessera::scheduler::dashboard::testing {

using Json = nlohmann::json;

// The figures the pages must show.
inline constexpr int kGpus = 4;
inline constexpr int64_t kMemoryCapacityMiB = 4 * 16000;
inline constexpr int64_t kMemoryAllocatedMiB = 8000 + 4000 + 2 * 2000;
inline constexpr int kCoresAllocated = 50 + 30 + 2 * 20;
inline constexpr int64_t kMemoryUsedMiB = 6000 + 0 + 1500 + 1000;
inline constexpr int kUtilizationSum = 70 + 0 + 20 + 10;
inline constexpr const char* kWaitingMessage = "0/4 nodes are available: 2 Insufficient nvidia.com/gpumem";

inline std::string Uuid(const std::string& node, int gpu) {
  return scheduler::testing::GpuUuid(node == "gpu-a" ? 1 : 2, gpu);
}

inline Json WithAddress(Json node, const std::string& address) {
  node["status"] = {{"addresses",
                     {{{"type", "Hostname"}, {"address", "h-" + address}},
                      {{"type", "InternalIP"}, {"address", address}}}}};
  return node;
}

inline std::vector<Json> Nodes(const std::string& address = "127.0.0.1") {
  Json broken = WithAddress(scheduler::testing::NodeWithGpus("broken", 9, 1, 16000), address);
  broken["metadata"]["annotations"][std::string(core::kInventoryAnnotation)] = "{not json";
  Json cpu_only = {
      {"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "cpu-only"}}}, {"spec", Json::object()}};
  return {WithAddress(scheduler::testing::NodeWithGpus("gpu-a", 1, 2, 16000), address),
          WithAddress(scheduler::testing::NodeWithGpus("gpu-b", 2, 2, 16000), address),
          WithAddress(cpu_only, address), broken};
}

inline Json BoundPod(const std::string& ns, const std::string& name, int gpus, int64_t memory, int cores,
                     const std::string& node, const std::vector<int>& gpu_indexes) {
  Json pod = scheduler::testing::GpuPod(ns, name, gpus, memory, cores);
  core::PodAllocation a;
  a.node = node;
  core::ContainerAllocation c;
  c.container = "app";
  for (int g : gpu_indexes) c.devices.push_back({Uuid(node, g), memory, cores});
  a.containers.push_back(c);
  pod["metadata"]["annotations"][std::string(core::kAllocationAnnotation)] = *core::EncodeAllocation(a);
  pod["metadata"]["creationTimestamp"] = "2030-01-01T00:00:00Z";
  pod["spec"]["nodeName"] = node;
  pod["status"] = {{"phase", "Running"}};
  return pod;
}

inline std::vector<Json> Pods() {
  Json garbled = BoundPod("web", "garbled", 1, 1000, 10, "gpu-b", {1});
  garbled["metadata"]["annotations"][std::string(core::kAllocationAnnotation)] = "not-json";
  Json waiting = scheduler::testing::GpuPod("ml", "waiting", 1, 20000, 10);
  waiting["metadata"]["creationTimestamp"] = "2030-01-01T00:05:00Z";
  waiting["status"] = {{"phase", "Pending"},
                       {"conditions",
                        {{{"type", "PodScheduled"},
                          {"status", "False"},
                          {"reason", "Unschedulable"},
                          {"message", kWaitingMessage}}}}};
  return {BoundPod("ml", "train-1", 1, 8000, 50, "gpu-a", {0}),
          BoundPod("ml", "train-2", 1, 4000, 30, "gpu-a", {0}),
          BoundPod("web", "infer-1", 2, 2000, 20, "gpu-b", {0, 1}), garbled, waiting};
}

// What tessera-node on `node` serves at /metrics ("" for nodes without one).
inline std::string MetricsText(const std::string& node) {
  if (node != "gpu-a" && node != "gpu-b") return "";
  constexpr double kMiB = 1024.0 * 1024.0;
  PrometheusText t;
  t.Describe("tessera_gpu_memory_used_bytes", MetricType::kGauge, "used");
  t.Describe("tessera_gpu_utilization_percent", MetricType::kGauge, "utilization");
  t.Describe("tessera_container_memory_used_bytes", MetricType::kGauge, "used");
  t.Describe("tessera_container_memory_limit_bytes", MetricType::kGauge, "limit");
  t.Describe("tessera_container_compute_share_percent", MetricType::kGauge, "share");
  auto gpu = [&](int g, double used_mib, double util) {
    t.Add("tessera_gpu_memory_used_bytes", {{"gpu_uuid", Uuid(node, g)}}, used_mib * kMiB);
    t.Add("tessera_gpu_utilization_percent", {{"gpu_uuid", Uuid(node, g)}}, util);
  };
  auto slice = [&](int g, const std::string& ns, const std::string& pod, double used_mib, double limit_mib,
                   double share) {
    MetricLabels l = {
        {"namespace", ns}, {"pod", pod}, {"container", "app"}, {"gpu_uuid", Uuid(node, g)}, {"region", pod}};
    t.Add("tessera_container_memory_used_bytes", l, used_mib * kMiB);
    t.Add("tessera_container_memory_limit_bytes", l, limit_mib * kMiB);
    t.Add("tessera_container_compute_share_percent", l, share);
  };
  if (node == "gpu-a") {
    gpu(0, 6000, 70);
    gpu(1, 0, 0);
    slice(0, "ml", "train-1", 5000, 8000, 45);
    slice(0, "ml", "train-2", 1000, 4000, 25);
  } else {
    gpu(0, 1500, 20);
    gpu(1, 1000, 10);
    slice(0, "web", "infer-1", 1500, 2000, 20);
    slice(1, "web", "infer-1", 1000, 2000, 10);
  }
  return t.Render();
}

}  // namespace tessera::scheduler::dashboard::testing
