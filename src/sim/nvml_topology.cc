// NVML topology: a GPU's NUMA node and CPU affinity (its node's CPUs on this
// machine, all CPUs if the node does not exist), the common ancestor of two
// GPUs (GPUs 2k and 2k+1 on one NUMA node share a PCIe switch; others on a
// node meet at the host bridge, across nodes at the system), peer-to-peer
// status (over NVLink, or within a NUMA node) and NVLink state, the configured
// links spread over the GPU's peers by link index.
#include <cstdio>
#include <cstring>
#include <vector>

#include "sim/nvml_internal.h"

namespace tessera::sim::nvml {
namespace {

// NVLink links are spread over the GPU's peers in order.
int LinkPeer(int gpu, unsigned link) {
  std::vector<int> peers;
  for (unsigned p = 0; p < File()->gpu_count; ++p) {
    if (Gpu(gpu).nvlink_links[p] > 0) peers.push_back(static_cast<int>(p));
  }
  if (peers.empty()) return -1;
  return peers[link % peers.size()];
}

// An NVLink entry point's prologue: NVML_ERROR_NOT_SUPPORTED on a GPU without
// NVLink, NVML_ERROR_INVALID_ARGUMENT for a link it does not have; then
// body(peer), the GPU at the other end of the link or -1.
template <typename Body>
nvmlReturn_t OnNvLink(nvmlDevice_t device, unsigned link, Body&& body) {
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    const unsigned links = ModelOf(d.gpu).nvlink_count;
    if (links == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= links) return NVML_ERROR_INVALID_ARGUMENT;
    return body(LinkPeer(d.gpu, link));
  });
}

}  // namespace

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node) {
  return DeviceValue(device, node,
                     [&](const nvmlDevice_st& d) { return static_cast<unsigned>(Gpu(d.gpu).numa_node); });
}

nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long* cpuSet) {
  if (cpuSet == nullptr || cpuSetSize == 0) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    // The CPUs of the GPU's NUMA node on this machine, or all CPUs when the
    // machine has no such node.
    std::memset(cpuSet, 0, cpuSetSize * sizeof(unsigned long));
    char path[96];
    std::snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", Gpu(d.gpu).numa_node);
    FILE* f = std::fopen(path, "r");
    if (f == nullptr) f = std::fopen("/sys/devices/system/cpu/online", "r");
    char list[1024] = {};
    if (f != nullptr) {
      if (std::fgets(list, sizeof(list), f) == nullptr) list[0] = '\0';
      std::fclose(f);
    }
    const unsigned bits = static_cast<unsigned>(8 * sizeof(unsigned long));
    char* save = nullptr;
    for (char* tok = strtok_r(list, ",\n", &save); tok != nullptr; tok = strtok_r(nullptr, ",\n", &save)) {
      unsigned a = 0, b = 0;
      const int n = std::sscanf(tok, "%u-%u", &a, &b);
      if (n == 1) b = a;
      for (unsigned c = a; c <= b && c / bits < cpuSetSize; ++c) cpuSet[c / bits] |= 1ul << (c % bits);
    }
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t* pathInfo) {
  if (pathInfo == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device1, [&](const nvmlDevice_st& d) {
    const nvmlDevice_st* other = nullptr;
    if (nvmlReturn_t r = ResolveDevice(device2, &other); r != NVML_SUCCESS) return r;
    const int a = d.gpu, b = other->gpu;
    // GPUs pair up behind PCIe switches; pairs share a NUMA node's host bridge.
    if (a == b)
      *pathInfo = NVML_TOPOLOGY_INTERNAL;
    else if (a / 2 == b / 2 && Gpu(a).numa_node == Gpu(b).numa_node)
      *pathInfo = NVML_TOPOLOGY_SINGLE;
    else if (Gpu(a).numa_node == Gpu(b).numa_node)
      *pathInfo = NVML_TOPOLOGY_NODE;
    else
      *pathInfo = NVML_TOPOLOGY_SYSTEM;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                    nvmlGpuP2PCapsIndex_t p2pIndex, nvmlGpuP2PStatus_t* p2pStatus) {
  if (p2pStatus == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device1, [&](const nvmlDevice_st& d) {
    const nvmlDevice_st* other = nullptr;
    if (nvmlReturn_t r = ResolveDevice(device2, &other); r != NVML_SUCCESS) return r;
    const int a = d.gpu, b = other->gpu;
    const bool nvlink = a != b && Gpu(a).nvlink_links[b] > 0;
    const bool pcie = a != b && Gpu(a).numa_node == Gpu(b).numa_node;
    switch (p2pIndex) {
      case NVML_P2P_CAPS_INDEX_NVLINK:
        *p2pStatus = nvlink ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        break;
      case NVML_P2P_CAPS_INDEX_READ:
      case NVML_P2P_CAPS_INDEX_WRITE:
      case NVML_P2P_CAPS_INDEX_ATOMICS:
      case NVML_P2P_CAPS_INDEX_PROP:
        *p2pStatus = nvlink || pcie ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED;
        break;
      default:
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t* isActive) {
  if (isActive == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return OnNvLink(device, link, [&](int peer) {
    *isActive = peer >= 0 ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t* pci) {
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return OnNvLink(device, link, [&](int peer) {
    if (peer < 0) return NVML_ERROR_NOT_FOUND;
    FillPci(peer, pci);
    return NVML_SUCCESS;
  });
}
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t* pci) {
  return nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link, pci);
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::nvml
