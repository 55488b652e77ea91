#include "kubectl/render.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/allocation_codec.h"
#include "core/fit.h"
#include "core/node_state.h"
#include "core/pod_request.h"
#include "kubectl/hami_allocation.h"
#include "kubectl/table.h"

namespace tessera::kubectl {
namespace {

std::string Percent(int64_t part, int64_t whole) {
  if (whole <= 0) return "-";
  return std::to_string(part * 100 / whole) + "%";
}

std::string Mi(int64_t mib) {
  return std::to_string(mib) + "Mi";
}

std::string InventoryText(const NodeView& node) {
  switch (node.inventory) {
    case InventoryState::kMissing:
      return "none";
    case InventoryState::kCorrupt:
      return "corrupt: " + node.inventory_error;
    case InventoryState::kOk:
      break;
  }
  std::string text =
      node.stale ? "stale (heartbeat " + std::to_string(node.heartbeat_age_seconds) + "s ago)" : "ok";
  if (!node.problems.empty()) text += "; " + std::to_string(node.problems.size()) + " pod(s) not accounted";
  return text;
}

std::string PodStatus(const PodView& pod) {
  if (!pod.allocation_error.empty()) return "corrupt: " + pod.allocation_error;
  if (!pod.accounting_error.empty()) return "mismatch: " + pod.accounting_error;
  if (!pod.containers.empty()) return pod.bound ? "placed" : "placed (binding)";
  if (pod.bound) return "unplaced";
  return "pending";
}

bool IsMig(const core::DeviceSlice& d) {
  return !d.mig_profile.empty();
}

// The instances of `node` on GPU `uuid`.
std::vector<const MigInstanceView*> MigOn(const NodeView& node, const std::string& uuid) {
  std::vector<const MigInstanceView*> out;
  for (const MigInstanceView& m : node.mig) {
    if (m.gpu_uuid == uuid) out.push_back(&m);
  }
  return out;
}

// "held/instances" of a set of MIG instances ("-" for a GPU not in MIG mode).
std::string MigCount(const std::vector<const MigInstanceView*>& instances) {
  size_t held = 0;
  for (const MigInstanceView* m : instances) held += !m->Holder().empty();
  return std::to_string(held) + "/" + std::to_string(instances.size());
}

// Memory of the instances someone holds: what is allocated on a MIG GPU.
int64_t MigHeldMemory(const std::vector<const MigInstanceView*>& instances) {
  int64_t mib = 0;
  for (const MigInstanceView* m : instances) {
    if (!m->Holder().empty()) mib += m->memory_mib;
  }
  return mib;
}

std::string MigUuidText(const MigInstanceView& m) {
  return m.mig_uuid.empty() ? "(not created yet)" : m.mig_uuid;
}

// The pods with a slice on each GPU UUID.
std::map<std::string, std::set<std::string>> PodsByGpu(const ClusterView& view) {
  std::map<std::string, std::set<std::string>> out;
  for (const PodView& pod : view.pods) {
    if (pod.terminal || !pod.accounting_error.empty()) continue;
    for (const auto& c : pod.containers) {
      for (const auto& d : c.devices) out[d.uuid].insert(pod.key());
    }
  }
  return out;
}

// Each line of `text` with `prefix` before it.
std::string Indent(const std::string& text, const std::string& prefix) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += prefix + text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return out;
}

std::string Join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

std::string RequestText(const core::ContainerRequest& c) {
  std::string memory = c.memory_percent   ? std::to_string(*c.memory_percent) + "% of the GPU's memory"
                       : c.memory_mib > 0 ? Mi(c.memory_mib)
                                          : "the whole GPU's memory";
  std::string cores = c.cores == 0     ? "no compute limit"
                      : c.cores == 100 ? "100% cores (exclusive)"
                                       : std::to_string(c.cores) + "% cores";
  return std::to_string(c.gpus) + " vGPU" + (c.gpus == 1 ? "" : "s") + " x " + memory + ", " + cores;
}

std::string StringAt(const Json& object, const char* pointer) {
  const Json::json_pointer p(pointer);
  if (!object.contains(p) || !object[p].is_string()) return "";
  return object[p].get<std::string>();
}

// The PodScheduled condition, as kube-scheduler wrote it ("" when none).
std::string ScheduledCondition(const Json& pod) {
  const Json::json_pointer p("/status/conditions");
  if (!pod.contains(p) || !pod[p].is_array()) return "";
  for (const Json& c : pod[p]) {
    if (!c.is_object() || c.value("type", "") != "PodScheduled") continue;
    std::string text = "PodScheduled=" + c.value("status", "?");
    if (c.contains("reason") && c["reason"].is_string()) text += " (" + c["reason"].get<std::string>() + ")";
    if (c.contains("message") && c["message"].is_string()) text += ": " + c["message"].get<std::string>();
    return text;
  }
  return "";
}

void WhyPlaced(const ClusterView& view, const PodView& pod, std::string& out) {
  out += "Why placed:\n";
  if (pod.source == AllocationSource::kTessera) {
    out += "  tessera-scheduler chose node " + pod.node +
           " (its extender filter and prioritize over the GPU\n"
           "  inventories) and wrote the slices into the pod with the Binding (" +
           std::string(core::kAllocationAnnotation) + ").\n";
  } else if (pod.source == AllocationSource::kHami) {
    out += "  HAMi's scheduler placed it (" + std::string(kHamiAllocatedAnnotation) +
           "); tessera accounts its slices like its own.\n";
  }
  if (!pod.accounting_error.empty()) {
    out += "  But its slices do not match the node's inventory: " + pod.accounting_error + "\n";
    return;
  }
  const NodeView* node = view.FindNode(pod.node);
  if (node == nullptr || node->inventory != InventoryState::kOk) return;
  std::set<std::string> uuids;
  for (const auto& c : pod.containers) {
    for (const auto& d : c.devices) uuids.insert(d.uuid);
  }
  out += "  Its GPUs now, with every pod on them:\n";
  for (const auto& g : node->state.gpus()) {
    if (!uuids.count(g.gpu.uuid)) continue;
    if (core::IsMigMode(g.gpu.mode)) {
      const auto instances = MigOn(*node, g.gpu.uuid);
      out += "    GPU " + std::to_string(g.gpu.index) + " (" + g.gpu.uuid +
             "): " + core::SharingModeName(g.gpu.mode) + ", " + std::to_string(instances.size()) +
             " MIG instance(s)" + (g.gpu.healthy ? "" : ", UNHEALTHY") + "\n";
      for (const MigInstanceView* m : instances) {
        const std::string holder = m->Holder();
        out += "      " + m->profile + " at " + m->Placement() + "  " + (holder.empty() ? "free" : holder) +
               (m->mig_uuid.empty() ? "  (not created yet)" : "") + "\n";
      }
      continue;
    }
    const std::string mode =
        g.gpu.mode == core::SharingMode::kVgpu ? "" : std::string(core::SharingModeName(g.gpu.mode)) + ", ";
    out += "    GPU " + std::to_string(g.gpu.index) + " (" + g.gpu.uuid + "): " + mode +
           Mi(g.used.memory_mib) + " of " + Mi(g.gpu.memory_mib) + " allocated, " +
           std::to_string(g.used.cores) + "% of " + std::to_string(g.gpu.cores) + "% cores, " +
           std::to_string(g.used.slots) + " of " + std::to_string(g.gpu.slots) + " vGPUs" +
           (g.gpu.healthy ? "" : ", UNHEALTHY");
    const std::string over = g.Overcommit();
    out += over.empty() ? "\n" : ", OVERCOMMITTED: " + over + "\n";
  }
}

void WhyPending(const ClusterView& view, const PodView& pod, const DescribeOptions& options,
                std::string& out) {
  out += "Why pending:\n";
  if (pod.scheduler_name != options.scheduler_name) {
    out += "  schedulerName is \"" + pod.scheduler_name + "\", not \"" + options.scheduler_name +
           "\": tessera's webhook did not hand this pod to tessera (is its namespace excluded, or was the "
           "webhook down when it was created?)\n";
  }
  if (const std::string condition = ScheduledCondition(pod.object); !condition.empty()) {
    out += "  kube-scheduler: " + condition + "\n";
  } else {
    out += "  kube-scheduler has not reported on it yet (no PodScheduled condition)\n";
  }
  auto request = core::DerivePodRequest(pod.object, core::ResourceConfig{});
  if (!request.ok()) {
    out += "  Its request cannot be placed anywhere: " + request.error().message + "\n";
    return;
  }
  if (pod.asks_dynamic_mig) {
    // kubectl does not replay the scheduler's MIG placement; it says where
    // the pod could go at all and what is there.
    out += "  It asks for dynamic MIG (" + std::string(kVgpuModeAnnotation) +
           ": mig): only GPUs in mig-dynamic mode take it.\n";
    Table table({"NODE", "MIG-DYNAMIC GPUS"});
    for (const NodeView& node : view.nodes) {
      if (node.inventory != InventoryState::kOk) continue;
      std::vector<std::string> gpus;
      for (const auto& g : node.state.gpus()) {
        if (g.gpu.mode != core::SharingMode::kMigDynamic) continue;
        gpus.push_back("GPU " + std::to_string(g.gpu.index) + " (" +
                       std::to_string(MigOn(node, g.gpu.uuid).size()) + " instance(s)" +
                       (g.gpu.healthy ? "" : ", UNHEALTHY") + ")");
      }
      if (!gpus.empty()) table.Add({node.name, Join(gpus, ", ")});
    }
    if (table.rows() == 0) {
      out += "    no node has a GPU in mig-dynamic mode (tessera-node's mig_dynamic_gpus, docs/mig.md)\n";
    } else {
      out += Indent(table.Render(), "    ");
    }
    return;
  }
  out += "  tessera's fit against the current inventories and allocations:\n";
  Table table({"NODE", "VERDICT"});
  for (const NodeView& node : view.nodes) {
    if (node.inventory == InventoryState::kMissing) continue;  // not a tessera GPU node
    if (node.inventory == InventoryState::kCorrupt) {
      table.Add({node.name, "GPU inventory unreadable: " + node.inventory_error});
      continue;
    }
    if (node.stale) {
      table.Add({node.name, "GPU inventory stale (heartbeat " + std::to_string(node.heartbeat_age_seconds) +
                                "s ago): is tessera-node running there?"});
      continue;
    }
    core::FitResult fit = core::FitNode(node.state, *request);
    if (fit.fits) {
      std::vector<std::string> gpus;
      for (const auto& c : fit.placement.containers) {
        for (const auto& s : c.slices) gpus.push_back(std::to_string(node.state.gpus()[s.gpu].gpu.index));
      }
      table.Add({node.name, "fits now (GPU " + Join(gpus, ",") + "): kube-scheduler will place it on retry"});
    } else {
      table.Add({node.name, fit.message});
    }
  }
  if (table.rows() == 0) {
    out += "    no node publishes a GPU inventory (is tessera-node running on the GPU nodes?)\n";
    return;
  }
  out += Indent(table.Render(), "    ");
}

}  // namespace

std::string TopNodes(const ClusterView& view) {
  Table table({"NAME", "GPUS", "MEMORY", "MEMORY%", "CORES", "CORES%", "VGPUS", "MIG", "PODS", "INVENTORY"});
  for (const NodeView& node : view.nodes) {
    if (node.inventory != InventoryState::kOk) {
      table.Add({node.name, "-", "-", "-", "-", "-", "-", "-", "-", InventoryText(node)});
      continue;
    }
    const core::GpuTotals t = core::TotalsOf(node.state.gpus());
    const std::string gpus = std::to_string(t.healthy) + "/" + std::to_string(t.gpus);
    // MIG GPUs offer no slices; the memory of their held instances is allocated.
    std::vector<const MigInstanceView*> instances;
    for (const MigInstanceView& m : node.mig) instances.push_back(&m);
    const bool any_mig = std::any_of(node.state.gpus().begin(), node.state.gpus().end(),
                                     [](const core::GpuState& g) { return core::IsMigMode(g.gpu.mode); });
    const int64_t memory = t.memory_allocated_mib + MigHeldMemory(instances);
    table.Add(
        {node.name, t.healthy == t.gpus ? gpus : gpus + " healthy", Mi(memory) + "/" + Mi(t.memory_mib),
         Percent(memory, t.memory_mib), std::to_string(t.cores_allocated) + "/" + std::to_string(t.cores),
         Percent(t.cores_allocated, t.cores), std::to_string(t.slots_used) + "/" + std::to_string(t.slots),
         any_mig ? MigCount(instances) : "-", std::to_string(node.pods.size()), InventoryText(node)});
  }
  if (table.rows() == 0) return "No nodes.\n";
  return table.Render();
}

std::string TopGpus(const ClusterView& view, const std::string& node_name) {
  const auto pods = PodsByGpu(view);
  Table table({"NODE", "INDEX", "UUID", "MODEL", "HEALTH", "MODE", "MEMORY", "MEMORY%", "CORES", "VGPUS",
               "MIG", "PODS"});
  Table mig({"NODE", "GPU", "PROFILE", "PLACEMENT", "MEMORY", "MIG-UUID", "HEALTH", "POD"});
  for (const NodeView& node : view.nodes) {
    if (!node_name.empty() && node.name != node_name) continue;
    if (node.inventory != InventoryState::kOk) {
      if (!node_name.empty()) return "Node " + node.name + ": GPU inventory " + InventoryText(node) + "\n";
      continue;
    }
    for (const auto& g : node.state.gpus()) {
      std::string health = g.gpu.healthy ? "healthy" : "UNHEALTHY";
      if (!g.gpu.held_by.empty()) health += ", held by " + g.gpu.held_by;
      if (!g.Overcommit().empty()) health += ", OVERCOMMITTED";
      auto it = pods.find(g.gpu.uuid);
      const std::string pod_count = std::to_string(it == pods.end() ? 0 : it->second.size());
      if (core::IsMigMode(g.gpu.mode)) {
        const auto instances = MigOn(node, g.gpu.uuid);
        const int64_t memory = MigHeldMemory(instances);
        table.Add({node.name, std::to_string(g.gpu.index), g.gpu.uuid, g.gpu.model, health,
                   core::SharingModeName(g.gpu.mode), Mi(memory) + "/" + Mi(g.gpu.memory_mib),
                   Percent(memory, g.gpu.memory_mib), "-", "-", MigCount(instances), pod_count});
        for (const MigInstanceView* m : instances) {
          const std::string holder = m->Holder();
          mig.Add({node.name, std::to_string(m->gpu_index), m->profile, m->Placement(), Mi(m->memory_mib),
                   MigUuidText(*m), m->healthy ? "healthy" : "UNHEALTHY", holder.empty() ? "-" : holder});
        }
        continue;
      }
      if (g.gpu.replicas > 0) {
        // Replicas kube-scheduler counts: tessera allocates nothing here.
        table.Add({node.name, std::to_string(g.gpu.index), g.gpu.uuid, g.gpu.model, health,
                   core::SharingModeName(g.gpu.mode), "-", "-", "-",
                   std::to_string(g.gpu.replicas) + " replicas", "-", pod_count});
        continue;
      }
      table.Add({node.name, std::to_string(g.gpu.index), g.gpu.uuid, g.gpu.model, health,
                 core::SharingModeName(g.gpu.mode), Mi(g.used.memory_mib) + "/" + Mi(g.gpu.memory_mib),
                 Percent(g.used.memory_mib, g.gpu.memory_mib),
                 std::to_string(g.used.cores) + "/" + std::to_string(g.gpu.cores),
                 std::to_string(g.used.slots) + "/" + std::to_string(g.gpu.slots), "-", pod_count});
    }
  }
  if (!node_name.empty() && view.FindNode(node_name) == nullptr) return "Node " + node_name + " not found.\n";
  if (table.rows() == 0) return "No GPUs: no node publishes a readable GPU inventory.\n";
  if (mig.rows() == 0) return table.Render();
  return table.Render() + "\nMIG instances:\n" + mig.Render();
}

std::string TopPods(const ClusterView& view, const std::string& ns) {
  Table table({"NAMESPACE", "NAME", "NODE", "VGPUS", "MIG", "MEMORY", "CORES", "BY", "STATUS"});
  for (const PodView& pod : view.pods) {
    if (!ns.empty() && pod.ns != ns) continue;
    if (pod.terminal) continue;
    if (!pod.asks_gpu && pod.source == AllocationSource::kNone) continue;
    int vgpus = 0;
    int64_t memory = 0;
    int cores = 0;
    std::vector<std::string> profiles;  // its MIG instances
    for (const auto& c : pod.containers) {
      for (const auto& d : c.devices) {
        if (IsMig(d)) {
          profiles.push_back(d.mig_profile);
        } else {
          ++vgpus;
        }
        memory += d.memory_mib;
        cores += d.cores;
      }
    }
    const bool shown = pod.allocation_error.empty() && !pod.containers.empty();
    table.Add({pod.ns, pod.name, pod.node.empty() ? "<none>" : pod.node, shown ? std::to_string(vgpus) : "-",
               shown && !profiles.empty() ? Join(profiles, ",") : "-", shown ? Mi(memory) : "-",
               shown ? std::to_string(cores) + "%" : "-",
               pod.source == AllocationSource::kNone ? "-" : AllocationSourceName(pod.source),
               PodStatus(pod)});
  }
  if (table.rows() == 0) {
    return ns.empty() ? "No GPU pods.\n" : "No GPU pods in namespace " + ns + ".\n";
  }
  return table.Render();
}

std::string DescribePod(const ClusterView& view, const PodView& pod, const DescribeOptions& options) {
  std::string out;
  auto field = [&](const std::string& name, const std::string& value) {
    out += name + ":" + std::string(name.size() < 13 ? 13 - name.size() : 1, ' ') + value + "\n";
  };
  field("Name", pod.name);
  field("Namespace", pod.ns);
  field("Node",
        pod.node.empty() ? "<none>" : pod.node + (pod.bound ? "" : " (chosen, binding not seen yet)"));
  field("Phase", pod.phase.empty() ? "<unknown>" : pod.phase);
  field("Scheduler", pod.scheduler_name.empty() ? "<default>" : pod.scheduler_name);
  std::string allocation = "none";
  if (pod.source == AllocationSource::kTessera)
    allocation = "tessera (" + std::string(core::kAllocationAnnotation) + ")";
  if (pod.source == AllocationSource::kHami)
    allocation = "HAMi (" + std::string(kHamiAllocatedAnnotation) + ")";
  if (!pod.allocation_error.empty()) allocation = "CORRUPT: " + pod.allocation_error;
  field("Allocation", allocation);

  out += "Requests:\n";
  auto request = core::DerivePodRequest(pod.object, core::ResourceConfig{});
  if (!request.ok()) {
    out += "  invalid: " + request.error().message + "\n";
  } else if (request->containers.empty() && request->init_containers.empty()) {
    out += "  no GPU\n";
  } else {
    for (const auto& c : request->init_containers) out += "  " + c.name + " (init): " + RequestText(c) + "\n";
    for (const auto& c : request->containers) out += "  " + c.name + ": " + RequestText(c) + "\n";
  }

  if (!pod.containers.empty()) {
    const NodeView* node = view.FindNode(pod.node);
    const bool known = node != nullptr && node->inventory == InventoryState::kOk;
    Table table({"CONTAINER", "GPU", "UUID", "MODEL", "MEMORY", "CORES"});
    Table mig({"CONTAINER", "GPU", "UUID", "PROFILE", "PLACEMENT", "MEMORY", "MIG-UUID"});
    for (const auto& c : pod.containers) {
      for (const auto& d : c.devices) {
        std::string index = "?";
        std::string model = "(not in the node's inventory)";
        if (known) {
          if (int i = node->state.IndexOf(d.uuid); i >= 0) {
            index = std::to_string(node->state.gpus()[i].gpu.index);
            model = node->state.gpus()[i].gpu.model;
          }
        }
        const std::string container = c.container + (c.init ? " (init)" : "");
        if (IsMig(d)) {
          // The instance as the node lists it, when the pod's claim was matched.
          const MigInstanceView* instance = nullptr;
          if (known) {
            for (const MigInstanceView* m : MigOn(*node, d.uuid)) {
              if (m->pod == pod.key() && m->container == c.container && m->profile == d.mig_profile &&
                  m->start == d.mig_start)
                instance = m;
            }
          }
          mig.Add({container, index, d.uuid, d.mig_profile,
                   instance != nullptr ? instance->Placement() : std::to_string(d.mig_start) + ":?",
                   Mi(d.memory_mib), instance != nullptr ? MigUuidText(*instance) : "?"});
          continue;
        }
        table.Add({container, index, d.uuid, model, d.memory_mib == 0 ? "no limit" : Mi(d.memory_mib),
                   d.cores == 0 ? "no limit" : std::to_string(d.cores) + "%"});
      }
    }
    if (table.rows() > 0) out += "Slices:\n" + Indent(table.Render(), "  ");
    if (mig.rows() > 0) out += "MIG instances:\n" + Indent(mig.Render(), "  ");
  }

  if (pod.terminal) {
    out += "Status:       finished (" + pod.phase + "): its slices are free again\n";
  } else if (!pod.allocation_error.empty()) {
    out +=
        "Why:\n  its allocation annotation cannot be read, so neither tessera-scheduler nor tessera-node "
        "can\n"
        "  account or enforce its slices. The error: " +
        pod.allocation_error + "\n";
  } else if (!pod.containers.empty()) {
    WhyPlaced(view, pod, out);
  } else if (pod.bound && pod.asks_gpu) {
    out +=
        "Why placed:\n  bound to " + pod.node + " by " +
        (pod.scheduler_name.empty() ? std::string("the default scheduler") : pod.scheduler_name) +
        " without a tessera allocation: tessera-node treats it by its unplaced_pods setting (docs/node.md)\n";
  } else if (!pod.bound && (pod.asks_gpu || !request.ok())) {
    WhyPending(view, pod, options, out);
  }

  out += "Events:\n";
  if (!options.events_error.empty()) {
    out += "  cannot list them: " + options.events_error + "\n";
  } else if (options.events.empty()) {
    out += "  <none>\n";
  } else {
    Table table({"TYPE", "REASON", "FROM", "MESSAGE"});
    for (const Json& e : options.events) {
      table.Add({e.value("type", ""), e.value("reason", ""), StringAt(e, "/source/component"),
                 e.value("message", "")});
    }
    out += Indent(table.Render(), "  ");
  }
  return out;
}

}  // namespace tessera::kubectl
