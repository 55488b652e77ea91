#include "core/mig/layout.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <functional>

#include "base/yaml_config.h"

namespace tessera::core::mig {
namespace {

// An error at `node`: "<source>:<line>: <path>: <what>".
Error At(const std::string& source, const YAML::Node& node, const std::string& path,
         const std::string& what) {
  const int line = node.Mark().line >= 0 ? node.Mark().line + 1 : 0;
  return Error{source + (line > 0 ? ":" + std::to_string(line) : "") + ": " + path + ": " + what};
}

std::string Quote(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "nothing";
}

bool AllDigits(std::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// mig-parted's profile spelling: [<c>c.]<g>g.<mem>gb[+me|+gfx|+me.all|-me].
bool IsProfileName(std::string_view name) {
  size_t c = name.find("c.");
  if (c != std::string_view::npos && c < name.find('g')) {
    if (!AllDigits(name.substr(0, c))) return false;
    name.remove_prefix(c + 2);
  }
  const size_t g = name.find("g.");
  if (g == std::string_view::npos || !AllDigits(name.substr(0, g))) return false;
  name.remove_prefix(g + 2);
  const size_t gb = name.find("gb");
  if (gb == std::string_view::npos || !AllDigits(name.substr(0, gb))) return false;
  name.remove_prefix(gb + 2);
  return name.empty() || name == "+me" || name == "+gfx" || name == "+me.all" || name == "-me";
}

// "0x20B010DE" (mig-parted's DeviceID: device << 16 | vendor); 4-digit device
// ids ("0x20B0") get NVIDIA's vendor id.
Result<uint32_t> ParsePciId(std::string_view text) {
  std::string_view hex = text;
  if (hex.size() > 2 && hex[0] == '0' && (hex[1] == 'x' || hex[1] == 'X')) hex.remove_prefix(2);
  const bool ok = (hex.size() == 8 || hex.size() == 4) && std::all_of(hex.begin(), hex.end(), [](char c) {
                    return std::isxdigit(static_cast<unsigned char>(c));
                  });
  if (!ok) return Error{"must be a PCI device id like '0x20B010DE', got '" + std::string(text) + "'"};
  uint32_t id = static_cast<uint32_t>(std::stoul(std::string(hex), nullptr, 16));
  if (hex.size() == 4) id = (id << 16) | 0x10DEu;
  return id;
}

Result<LayoutEntry> ParseEntry(const YAML::Node& node, const std::string& source, const std::string& path) {
  if (!node.IsMap()) return At(source, node, path, "must be a mapping, got " + Quote(node));
  LayoutEntry entry;
  entry.line = node.Mark().line + 1;
  bool has_devices = false, has_enabled = false, has_mig_devices = false;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key_node = it->first;
    const std::string key = key_node.as<std::string>();
    const YAML::Node value = it->second;
    const std::string at = path + "." + key;
    if (key == "device-filter") {
      std::vector<YAML::Node> items;
      if (value.IsScalar()) {
        items.push_back(value);
      } else if (value.IsSequence()) {
        for (size_t i = 0; i < value.size(); ++i) items.push_back(value[i]);
      } else {
        return At(source, value, at, "must be a PCI device id or a list of them, got " + Quote(value));
      }
      for (const YAML::Node& item : items) {
        if (!item.IsScalar()) return At(source, item, at, "must be a PCI device id, got " + Quote(item));
        Result<uint32_t> id = ParsePciId(item.Scalar());
        if (!id.ok()) return At(source, item, at, id.error().message);
        entry.device_filter.push_back(*id);
      }
    } else if (key == "devices") {
      has_devices = true;
      const std::string must = "must be 'all' or a list of GPU indices, got ";
      if (value.IsScalar()) {
        if (value.Scalar() != "all") return At(source, value, at, must + Quote(value));
        entry.all_devices = true;
      } else if (value.IsSequence()) {
        entry.all_devices = false;
        for (size_t i = 0; i < value.size(); ++i) {
          const YAML::Node item = value[i];
          Result<int64_t> index = item.IsScalar() ? config::ParseInteger(item.Scalar(), 0, 1023)
                                                  : Result<int64_t>(Error{"must be an index"});
          if (!index.ok()) return At(source, item, at, must + "the element " + Quote(item));
          entry.devices.push_back(static_cast<int>(*index));
        }
      } else {
        return At(source, value, at, must + Quote(value));
      }
    } else if (key == "mig-enabled") {
      has_enabled = true;
      Result<bool> enabled = value.IsScalar()
                                 ? config::ParseBool(value.Scalar())
                                 : Result<bool>(Error{"must be true or false, got " + Quote(value)});
      if (!enabled.ok()) return At(source, value, at, enabled.error().message);
      entry.mig_enabled = *enabled;
    } else if (key == "mig-devices") {
      has_mig_devices = true;
      if (value.IsNull()) continue;  // "mig-devices:" with nothing: none
      if (!value.IsMap())
        return At(source, value, at, "must be a mapping of MIG profile to count, got " + Quote(value));
      for (auto d = value.begin(); d != value.end(); ++d) {
        const YAML::Node name_node = d->first, count_node = d->second;
        const std::string profile = name_node.as<std::string>();
        if (!IsProfileName(profile))
          return At(
              source, name_node, at,
              "'" + profile + "' is not a MIG profile name (like '1g.10gb', '1g.10gb+me', '1c.3g.40gb')");
        Result<int64_t> count = count_node.IsScalar() ? config::ParseInteger(count_node.Scalar(), 0, 64)
                                                      : Result<int64_t>(Error{"must be a count"});
        if (!count.ok())
          return At(source, count_node, at + "." + profile,
                    "must be a count from 0 to 64, got " + Quote(count_node));
        for (const auto& [seen, n] : entry.mig_devices) {
          if (seen == profile) return At(source, name_node, at, "'" + profile + "' is listed twice");
        }
        entry.mig_devices.emplace_back(profile, static_cast<int>(*count));
      }
    } else {
      return At(source, key_node, path,
                "unknown key '" + key + "' (an entry has device-filter, devices, mig-enabled, mig-devices)");
    }
  }
  if (!has_devices) return At(source, node, path, "missing required key 'devices'");
  if (!has_enabled) return At(source, node, path, "missing required key 'mig-enabled'");
  if (entry.mig_enabled && !has_mig_devices)
    return At(source, node, path, "missing 'mig-devices' (required when mig-enabled is true; {} for none)");
  const bool any =
      std::any_of(entry.mig_devices.begin(), entry.mig_devices.end(), [](auto& d) { return d.second > 0; });
  if (!entry.mig_enabled && any)
    return At(source, node, path, "lists mig-devices although mig-enabled is false");
  return entry;
}

std::string Names(const std::map<std::string, std::vector<LayoutEntry>>& configs) {
  std::string out;
  for (const auto& [name, entries] : configs) out += (out.empty() ? "" : ", ") + name;
  return out;
}

bool Selects(const LayoutEntry& entry, const NodeGpu& gpu) {
  if (!entry.device_filter.empty() && std::find(entry.device_filter.begin(), entry.device_filter.end(),
                                                gpu.identity.pci_device_id) == entry.device_filter.end())
    return false;
  return entry.all_devices ||
         std::find(entry.devices.begin(), entry.devices.end(), gpu.index) != entry.devices.end();
}

std::string Counts(std::span<const std::pair<std::string, int>> counts) {
  std::string out;
  for (const auto& [name, n] : counts) {
    if (n > 0) out += (out.empty() ? "" : ", ") + std::to_string(n) + " x " + name;
  }
  return out.empty() ? "none" : out;
}

}  // namespace

Result<LayoutFile> ParseLayout(std::string_view yaml, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return Error{source + ":" + std::to_string(e.mark.line + 1) + ": not YAML: " + e.msg};
  }
  if (!root.IsMap()) return Error{source + ": must be a mapping with 'version: v1' and 'mig-configs'"};
  LayoutFile file;
  file.source = source;
  bool has_version = false;
  try {
    for (auto it = root.begin(); it != root.end(); ++it) {
      const YAML::Node key_node = it->first;
      const std::string key = key_node.as<std::string>();
      const YAML::Node value = it->second;
      if (key == "version") {
        has_version = true;
        if (!value.IsScalar() || value.Scalar() != "v1")
          return At(source, value, key, "must be v1 (mig-parted's spec version), got " + Quote(value));
      } else if (key == "mig-configs") {
        if (!value.IsMap() || value.size() == 0)
          return At(source, value, key,
                    "must be a mapping of configuration names to entries, got " + Quote(value));
        for (auto c = value.begin(); c != value.end(); ++c) {
          const YAML::Node name_node = c->first, entries_node = c->second;
          const std::string name = name_node.as<std::string>();
          const std::string path = key + "." + name;
          if (!entries_node.IsSequence() || entries_node.size() == 0)
            return At(source, entries_node, path,
                      "must be a non-empty list of entries, got " + Quote(entries_node));
          std::vector<LayoutEntry> entries;
          for (size_t i = 0; i < entries_node.size(); ++i) {
            TESSERA_ASSIGN_OR_RETURN(
                LayoutEntry entry, ParseEntry(entries_node[i], source, path + "[" + std::to_string(i) + "]"));
            entries.push_back(std::move(entry));
          }
          if (!file.configs.emplace(name, std::move(entries)).second)
            return At(source, name_node, key, "configuration '" + name + "' is defined twice");
        }
      } else {
        return At(source, key_node, key, "unknown key (a layout file has 'version' and 'mig-configs')");
      }
    }
  } catch (const YAML::Exception& e) {  // a key that is not a scalar
    return Error{source + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg};
  }
  if (!has_version) return Error{source + ": missing 'version: v1'"};
  if (file.configs.empty()) return Error{source + ": missing 'mig-configs'"};
  return file;
}

Result<std::vector<Instance>> PackInstances(const Model& model,
                                            std::span<const std::pair<std::string, int>> counts,
                                            std::span<const Instance> prefer) {
  // What to place, largest first: the big profiles have the fewest starts.
  std::vector<const Profile*> order;
  uint32_t compute = 0;
  for (const auto& [name, n] : counts) {
    if (n <= 0) continue;
    if (name.find("c.") != std::string::npos && name.find("c.") < name.find('g'))
      return Error{"'" + name + "' is a compute-instance profile; tessera creates one compute instance per " +
                   "GPU instance, so layouts name GPU-instance profiles ('3g.40gb')"};
    const Profile* p = model.FindProfile(name);
    if (p == nullptr)
      return Error{"profile '" + name + "' does not exist on " + model.key +
                   " (its profiles: " + model.ProfileNames() + ")"};
    if (static_cast<uint32_t>(n) > p->max_instances)
      return Error{std::to_string(n) + " x " + name + " is more than the " +
                   std::to_string(p->max_instances) + " instance(s) of " + name + " a " + model.key +
                   " holds"};
    for (int i = 0; i < n; ++i) order.push_back(p);
    compute += p->compute_slices * static_cast<uint32_t>(n);
  }
  const std::string what = Counts(counts);
  if (compute > model.compute_slices)
    return Error{what + " need " + std::to_string(compute) + " compute slices; a " + model.key + " has " +
                 std::to_string(model.compute_slices)};
  std::stable_sort(order.begin(), order.end(), [](const Profile* a, const Profile* b) {
    return std::tie(b->memory_slices, b->compute_slices) < std::tie(a->memory_slices, a->compute_slices);
  });

  // Per profile, the starts to try: the preferred (current) ones first.
  std::map<std::string, std::vector<uint32_t>> candidates;
  for (const Profile* p : order) {
    auto& c = candidates[p->name];
    if (!c.empty()) continue;
    for (const Instance& in : prefer) {
      if (in.profile == p->name &&
          std::find(p->starts.begin(), p->starts.end(), in.start) != p->starts.end() &&
          std::find(c.begin(), c.end(), in.start) == c.end())
        c.push_back(in.start);
    }
    for (uint32_t s : p->starts) {
      if (std::find(c.begin(), c.end(), s) == c.end()) c.push_back(s);
    }
  }

  // Depth-first over the instances; instances of one profile take candidates
  // in increasing candidate order (combinations, not permutations).
  std::vector<Instance> placed;
  std::vector<size_t> chosen;  // candidate index per placed instance
  std::function<bool(uint32_t)> place = [&](uint32_t used) -> bool {
    const size_t i = placed.size();
    if (i == order.size()) return true;
    const Profile& p = *order[i];
    const auto& c = candidates[p.name];
    size_t first = (i > 0 && order[i - 1] == order[i]) ? chosen[i - 1] + 1 : 0;
    for (size_t k = first; k < c.size(); ++k) {
      const uint32_t mask = ((1u << p.memory_slices) - 1u) << c[k];
      if ((used & mask) != 0) continue;
      placed.push_back({p.name, c[k]});
      chosen.push_back(k);
      if (place(used | mask)) return true;
      placed.pop_back();
      chosen.pop_back();
    }
    return false;
  };
  if (!place(0))
    return Error{what + " do not fit the placements of a " + model.key +
                 " (no arrangement without overlapping memory slices)"};
  std::sort(placed.begin(), placed.end(),
            [](const Instance& a, const Instance& b) { return a.start < b.start; });
  return placed;
}

Result<NodePlan> ResolveLayout(const LayoutFile& file, std::string_view config_name,
                               std::span<const NodeGpu> gpus) {
  auto config = file.configs.find(std::string(config_name));
  if (config == file.configs.end())
    return Error{"no MIG configuration '" + std::string(config_name) + "' in " + file.source +
                 " (it has: " + Names(file.configs) + ")"};
  const std::vector<LayoutEntry>& entries = config->second;
  for (size_t e = 0; e < entries.size(); ++e) {
    for (int index : entries[e].devices) {
      const bool present =
          std::any_of(gpus.begin(), gpus.end(), [&](const NodeGpu& g) { return g.index == index; });
      if (!present)
        return Error{"MIG configuration '" + config->first + "' entry " + std::to_string(e) + " (" +
                     file.source + ":" + std::to_string(entries[e].line) + ") names GPU " +
                     std::to_string(index) + ", which this node does not have (it has " +
                     std::to_string(gpus.size()) + " GPU(s))"};
    }
  }

  NodePlan out;
  out.config = config->first;
  for (const NodeGpu& gpu : gpus) {
    GpuPlan plan;
    plan.index = gpu.index;
    for (size_t e = 0; e < entries.size(); ++e) {
      if (Selects(entries[e], gpu)) plan.entry = static_cast<int>(e);  // the last one decides
    }
    const std::string who = "GPU " + std::to_string(gpu.index) + " (" + gpu.identity.name + ")";
    auto fail = [&](const std::string& why) {
      out.failures.push_back({gpu.index, Error{who + ", MIG configuration '" + config->first + "' entry " +
                                               std::to_string(plan.entry) + ": " + why}});
    };
    if (plan.entry < 0) {
      plan.note = "no entry of '" + config->first + "' selects it";
      out.plans.push_back(std::move(plan));
      continue;
    }
    const LayoutEntry& entry = entries[static_cast<size_t>(plan.entry)];
    Result<const Model*> model = RecogniseModel(gpu.identity);
    if (model.ok()) plan.model = (*model)->key;
    if (!gpu.mig_capable) {
      if (entry.mig_enabled && !entry.all_devices) {
        fail("MIG asked of a GPU that has no MIG");
        continue;
      }
      plan.note = "not MIG-capable";
      out.plans.push_back(std::move(plan));
      continue;
    }
    if (!entry.mig_enabled) {
      plan.action = GpuAction::kDisable;
      out.plans.push_back(std::move(plan));
      continue;
    }
    if (!model.ok()) {
      fail(model.error().message);
      continue;
    }
    Result<std::vector<Instance>> packed = PackInstances(**model, entry.mig_devices, gpu.current);
    if (!packed.ok()) {
      fail(packed.error().message);
      continue;
    }
    plan.action = GpuAction::kEnable;
    plan.instances = std::move(packed).value();
    out.plans.push_back(std::move(plan));
  }
  return out;
}

InstanceDiff DiffInstances(const Model& model, std::span<const Instance> wanted,
                           std::span<const ExistingInstance> existing) {
  InstanceDiff diff;
  std::vector<bool> matched(wanted.size(), false);
  for (const ExistingInstance& e : existing) {
    bool found = false;
    for (size_t w = 0; w < wanted.size() && !found; ++w) {
      if (!matched[w] && wanted[w] == e.instance) matched[w] = found = true;
    }
    if (found) {
      diff.keep.push_back(e);
    } else if (e.in_use) {
      diff.blocked.push_back(e);
    } else {
      diff.destroy.push_back(e);
    }
  }
  // What will be there after destroying: kept and blocked instances.
  std::vector<Instance> after;
  for (const auto* group : {&diff.keep, &diff.blocked}) {
    for (const ExistingInstance& e : *group) after.push_back(e.instance);
  }
  for (size_t w = 0; w < wanted.size(); ++w) {
    if (matched[w]) continue;
    if (CanAdd(model, after, wanted[w])) {
      after.push_back(wanted[w]);
      diff.create.push_back(wanted[w]);
    } else {
      diff.deferred.push_back(wanted[w]);
    }
  }
  return diff;
}

}  // namespace tessera::core::mig
