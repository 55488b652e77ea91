#include "vgpu/config.h"

#include <strings.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "contract/container_contract.h"
#include "vgpu/json.h"

namespace tessera::vgpu {
namespace {

bool parse_percent(const char* text, int* out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < 0 || v > 100) return false;
  *out = static_cast<int>(v);
  return true;
}

const char* process_getenv(void*, const char* name) {
  return getenv(name);
}

}  // namespace

Config::Config() {
  for (int i = 0; i < kMaxConfigDevices; ++i) {
    hami_memory_by_index[i] = -1;
    hami_cores_by_index[i] = -1;
  }
}

const DeviceGrant* Config::grant_for(const char* uuid) const {
  if (uuid == nullptr) return nullptr;
  for (const auto& g : grants)
    if (strcasecmp(g.uuid.c_str(), uuid) == 0) return &g;
  return nullptr;
}

namespace {

// A device's limit: its grant's `from_grant` (allocation), else HAMi's value
// for its index, else HAMi's default; 0 (no limit) when none applies or
// control is disabled.
template <typename Limit, typename Hami>
Limit limit_for(const Config& c, const char* uuid, int index, Limit DeviceGrant::*from_grant,
                const Hami (&hami_by_index)[kMaxConfigDevices], Hami hami_default) {
  if (c.control_disabled) return 0;
  if (c.source == ConfigSource::kAllocation) {
    const DeviceGrant* g = c.grant_for(uuid);
    return g == nullptr ? 0 : g->*from_grant;
  }
  const Hami v = index >= 0 && index < kMaxConfigDevices && hami_by_index[index] >= 0 ? hami_by_index[index]
                                                                                      : hami_default;
  return v >= 0 ? static_cast<Limit>(v) : 0;
}

}  // namespace

uint64_t Config::memory_limit_for(const char* uuid, int index) const {
  return limit_for(*this, uuid, index, &DeviceGrant::memory_bytes, hami_memory_by_index, hami_memory_default);
}

int Config::cores_for(const char* uuid, int index) const {
  return limit_for(*this, uuid, index, &DeviceGrant::cores, hami_cores_by_index, hami_cores_default);
}

bool Config::device_visible(const char* uuid) const {
  if (!filters_devices()) return true;
  if (limits_unusable) return false;
  // The node's refusal is not the container's to lift with CUDA_DISABLE_CONTROL.
  if (unplaced_refused()) return false;
  if (source == ConfigSource::kAllocation) return grant_for(uuid) != nullptr;
  for (const auto& g : kubelet_gpus)  // unplaced_pods: whole-gpu
    if (uuid != nullptr && strcasecmp(g.c_str(), uuid) == 0) return true;
  return false;
}

bool parse_memory_size(const char* text, uint64_t* bytes) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || end == text) return false;
  unsigned shift = 0;
  switch (*end) {
    case '\0':
      break;
    case 'k':
    case 'K':
      shift = 10;
      ++end;
      break;
    case 'm':
    case 'M':
      shift = 20;
      ++end;
      break;
    case 'g':
    case 'G':
      shift = 30;
      ++end;
      break;
    default:
      return false;
  }
  if (*end == 'i' || *end == 'b' || *end == 'B') {  // tolerate "Mi", "MB", "MiB"
    if (*end == 'i') ++end;
    if (*end == 'b' || *end == 'B') ++end;
    if (shift == 0) return false;
  }
  if (*end != '\0') return false;
  if (shift != 0 && v > (~0ull >> shift)) return false;
  *bytes = static_cast<uint64_t>(v) << shift;
  return true;
}

bool parse_bool(const char* text) {
  if (text == nullptr) return false;
  return strcasecmp(text, "true") == 0 || strcmp(text, "1") == 0 || strcasecmp(text, "yes") == 0 ||
         strcasecmp(text, "on") == 0;
}

namespace {

// One device entry of the payload, checked by the contract's rules.
bool parse_device(const JsonValue& d, const std::string& where, DeviceGrant* out, std::string* error) {
  if (d.kind != JsonValue::Kind::kObject) {
    *error = where + ": not an object";
    return false;
  }
  const JsonValue* uuid = d.find("uuid");
  if (uuid == nullptr || uuid->kind != JsonValue::Kind::kString ||
      !contract::IsValidDeviceUuid(uuid->string)) {
    *error = where + ": no valid \"uuid\" (GPU-<8-4-4-4-12 hex> or a MIG UUID)";
    return false;
  }
  out->uuid = uuid->string;
  const JsonValue* mem = d.find("memoryMiB");
  if (mem == nullptr || !mem->is_integer || mem->integer < 0 || mem->integer > contract::kMaxMemoryMiB) {
    *error = where + ": \"memoryMiB\" must be an integer from 0 (no limit) to " +
             std::to_string(contract::kMaxMemoryMiB);
    return false;
  }
  out->memory_bytes = static_cast<uint64_t>(mem->integer) << 20;
  const JsonValue* cores = d.find("cores");
  if (cores == nullptr || !cores->is_integer || cores->integer < 0 ||
      cores->integer > contract::kMaxCoresPercent) {
    *error = where + ": \"cores\" must be an integer from 0 (no limit) to 100";
    return false;
  }
  out->cores = static_cast<int>(cores->integer);
  // Optional: a dynamic MIG instance tessera-node creates on the GPU "uuid"
  // (core/allocation_codec.h). libvgpu does not use it, but judges it as core
  // does so the two readers agree on every payload: an object with a profile
  // name of 1..32 bytes and a start 0..7, on a GPU-… UUID.
  if (const JsonValue* mig = d.find("mig")) {
    const JsonValue* profile = mig->kind == JsonValue::Kind::kObject ? mig->find("profile") : nullptr;
    const JsonValue* start = mig->kind == JsonValue::Kind::kObject ? mig->find("start") : nullptr;
    if (profile == nullptr || profile->kind != JsonValue::Kind::kString || profile->string.empty() ||
        profile->string.size() > 32 || start == nullptr || !start->is_integer || start->integer < 0 ||
        start->integer > 7 || out->uuid.rfind("GPU-", 0) != 0) {
      *error = where + ": \"mig\" must be {\"profile\": 1..32 characters, \"start\": 0..7} on a GPU-… uuid";
      return false;
    }
  }
  // Optional: an MPS client share (core/allocation.h). Judged as core does:
  // a boolean; when true, on a GPU-… UUID without "mig", memoryMiB >= 1 and
  // cores 1..100. libvgpu applies memoryMiB and cores as for any slice.
  if (const JsonValue* mps = d.find("mps")) {
    if (mps->kind != JsonValue::Kind::kBool) {
      *error = where + ": \"mps\" must be true or false";
      return false;
    }
    if (mps->boolean && (out->uuid.rfind("GPU-", 0) != 0 || d.find("mig") != nullptr || mem->integer < 1 ||
                         cores->integer < 1)) {
      *error =
          where +
          ": an MPS share (\"mps\": true) needs a GPU-… uuid, no \"mig\", memoryMiB >= 1 and cores 1..100";
      return false;
    }
  }
  return true;
}

// One container entry: its name and its devices.
bool parse_container(const JsonValue& c, const std::string& where, std::string* name,
                     std::vector<DeviceGrant>* grants, std::string* error) {
  if (c.kind != JsonValue::Kind::kObject) {
    *error = where + ": not an object";
    return false;
  }
  const JsonValue* n = c.find("name");
  if (n == nullptr || n->kind != JsonValue::Kind::kString || n->string.empty()) {
    *error = where + ": no non-empty string \"name\"";
    return false;
  }
  *name = n->string;
  const JsonValue* init = c.find("init");
  if (init != nullptr && init->kind != JsonValue::Kind::kBool) {
    *error = where + ": \"init\" must be true or false";
    return false;
  }
  const JsonValue* devices = c.find("devices");
  if (devices == nullptr || devices->kind != JsonValue::Kind::kArray || devices->array.empty()) {
    *error = where + ": no non-empty \"devices\" array";
    return false;
  }
  if (devices->array.size() > contract::kMaxDevicesPerContainer) {
    *error = where + ": more than " + std::to_string(contract::kMaxDevicesPerContainer) + " devices";
    return false;
  }
  grants->clear();
  for (size_t k = 0; k < devices->array.size(); ++k) {
    DeviceGrant g;
    if (!parse_device(devices->array[k], where + ".devices[" + std::to_string(k) + "]", &g, error))
      return false;
    for (const auto& other : *grants) {
      if (other.uuid == g.uuid) {
        *error = where + ": device " + g.uuid + " listed twice";
        return false;
      }
    }
    grants->push_back(std::move(g));
  }
  return true;
}

}  // namespace

bool parse_allocation(const char* json, const char* container_name, std::vector<DeviceGrant>* grants,
                      std::string* error) {
  JsonValue root;
  std::string why;
  if (!parse_json(json, &root, &why)) {
    *error = "malformed JSON: " + why;
    return false;
  }
  if (root.kind != JsonValue::Kind::kObject) {
    *error = "not a JSON object";
    return false;
  }
  const JsonValue* version = root.find("version");
  if (version == nullptr || !version->is_integer) {
    *error = "missing integer \"version\"";
    return false;
  }
  if (version->integer != contract::kAllocationVersion) {
    *error = "unsupported version " + std::to_string(version->integer) + " (this libvgpu reads version 1)";
    return false;
  }
  const JsonValue* node = root.find("node");
  if (node == nullptr || node->kind != JsonValue::Kind::kString || node->string.empty()) {
    *error = "missing non-empty string \"node\"";
    return false;
  }
  const JsonValue* containers = root.find("containers");
  if (containers == nullptr || containers->kind != JsonValue::Kind::kArray || containers->array.empty()) {
    *error = "missing or empty \"containers\" array";
    return false;
  }
  // Every entry is checked, not only ours: a payload is valid or not as a
  // whole, as the scheduler's own reader (core) judges it.
  const bool have_name = container_name != nullptr && *container_name != '\0';
  std::vector<std::string> names;
  std::vector<DeviceGrant> mine;
  bool found = false;
  for (size_t i = 0; i < containers->array.size(); ++i) {
    std::string name;
    std::vector<DeviceGrant> entry;
    if (!parse_container(containers->array[i], "containers[" + std::to_string(i) + "]", &name, &entry,
                         error)) {
      return false;
    }
    for (const auto& other : names) {
      if (other == name) {
        *error = "container \"" + name + "\" has two entries";
        return false;
      }
    }
    names.push_back(name);
    if ((have_name && name == container_name) || (!have_name && containers->array.size() == 1)) {
      mine = std::move(entry);
      found = true;
    }
  }
  if (!found) {
    *error = have_name ? std::string("no entry for container \"") + container_name + "\""
                       : std::string("several container entries and TESSERA_CONTAINER_NAME is not set");
    return false;
  }
  *grants = std::move(mine);
  return true;
}

namespace {

// TESSERA_UNPLACED_PODS / TESSERA_KUBELET_GPUS, read after the allocation:
// they matter only for a container that has none.
void load_unplaced_policy(const char* policy, const char* gpus, Config& c) {
  if (policy == nullptr) return;
  const std::string p = policy;
  if (p == contract::kUnplacedRefuse) {
    c.unplaced = UnplacedPolicy::kRefuse;
  } else if (p == contract::kUnplacedWholeGpu) {
    c.unplaced = UnplacedPolicy::kWholeGpu;
  } else {
    // Set by the node, not the user: an unknown value is read as the safe one.
    c.unplaced = UnplacedPolicy::kRefuse;
    c.problems.push_back("TESSERA_UNPLACED_PODS=" + p + " is not refuse or whole-gpu; refusing");
  }
  for (const char* at = gpus; at != nullptr && *at != '\0';) {
    const char* comma = strchr(at, ',');
    std::string uuid = comma ? std::string(at, comma) : std::string(at);
    if (!uuid.empty()) c.kubelet_gpus.push_back(uuid);
    at = comma ? comma + 1 : nullptr;
  }
  if (c.source == ConfigSource::kAllocation) return;
  if (c.unplaced == UnplacedPolicy::kRefuse) {
    c.problems.push_back(
        "no usable TESSERA_ALLOCATION: tessera-scheduler did not place this container's pod, and this node "
        "refuses "
        "GPUs to such pods (tessera-node unplaced_pods: refuse); no GPU is visible. Schedule the pod with "
        "schedulerName tessera-scheduler (in a namespace the webhook covers) to get a GPU slice");
  }
}

}  // namespace

Config load_config(EnvLookup lookup, void* context) {
  Config c;
  auto env = [&](const char* name) -> const char* {
    const char* v = lookup(context, name);
    return (v != nullptr && *v != '\0') ? v : nullptr;
  };

  if (const char* v = env(contract::kLogLevelEnv)) {
    int level = 0;
    if (parse_percent(v, &level) && level <= 4)
      c.log_level = level;
    else
      c.problems.push_back(std::string("LIBCUDA_LOG_LEVEL=") + v + " is not 0..4; using 2");
  }
  c.control_disabled = parse_bool(env(contract::kDisableControlEnv));
  c.oversubscribe = parse_bool(env(contract::kOversubscribeEnv));
  c.oom_killer = parse_bool(env(contract::kOomKillerEnv));
  if (const char* v = env(contract::kRegionEnv))
    c.region_path = v;
  else if (const char* h = env(contract::kSharedCacheEnv))
    c.region_path = h;
  if (const char* v = env(contract::kCorePolicyEnv)) {
    std::string p = v;
    for (auto& ch : p) ch = static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
    if (p == "force" || p == "disable" || p == "default")
      c.core_policy = p;
    else
      c.problems.push_back(std::string("GPU_CORE_UTILIZATION_POLICY=") + v + " is unknown; using default");
  }
  if (const char* v = env(contract::kTaskPriorityEnv)) c.priority = atoi(v);

  // HAMi's variables are always read: they are the fallback when the
  // allocation is absent or unusable.
  bool hami_any = false;
  if (const char* v = env(contract::kMemoryLimitEnv)) {
    uint64_t b = 0;
    if (parse_memory_size(v, &b)) {
      c.hami_memory_default = static_cast<int64_t>(b);
      hami_any = true;
    } else {
      c.problems.push_back(std::string("CUDA_DEVICE_MEMORY_LIMIT=") + v + " is not a size; ignored");
    }
  }
  if (const char* v = env(contract::kSmLimitEnv)) {
    int p = 0;
    if (parse_percent(v, &p)) {
      c.hami_cores_default = p;
      hami_any = true;
    } else {
      c.problems.push_back(std::string("CUDA_DEVICE_SM_LIMIT=") + v + " is not a percentage; ignored");
    }
  }
  for (int i = 0; i < kMaxConfigDevices; ++i) {
    char name[64];
    snprintf(name, sizeof(name), "%s_%d", contract::kMemoryLimitEnv, i);
    if (const char* v = env(name)) {
      uint64_t b = 0;
      if (parse_memory_size(v, &b)) {
        c.hami_memory_by_index[i] = static_cast<int64_t>(b);
        hami_any = true;
      } else {
        c.problems.push_back(std::string(name) + "=" + v + " is not a size; ignored");
      }
    }
    snprintf(name, sizeof(name), "%s_%d", contract::kSmLimitEnv, i);
    if (const char* v = env(name)) {
      int p = 0;
      if (parse_percent(v, &p)) {
        c.hami_cores_by_index[i] = p;
        hami_any = true;
      } else {
        c.problems.push_back(std::string(name) + "=" + v + " is not a percentage; ignored");
      }
    }
  }
  if (hami_any) c.source = ConfigSource::kHami;

  if (const char* json = env(contract::kAllocationEnv)) {
    std::string error;
    std::vector<DeviceGrant> grants;
    if (parse_allocation(json, env(contract::kContainerNameEnv), &grants, &error)) {
      c.grants = std::move(grants);
      c.source = ConfigSource::kAllocation;
    } else {
      c.problems.push_back("TESSERA_ALLOCATION ignored (" + error + "); falling back to " +
                           (hami_any ? "the CUDA_DEVICE_* variables" : "no limits"));
    }
  }
  load_unplaced_policy(env(contract::kUnplacedPodsEnv), env(contract::kKubeletGpusEnv), c);
  return c;
}

std::string resolve_limits_path(EnvLookup lookup, void* context, const char* fixed_dir,
                                const char* env_name) {
  struct stat st {};
  if (fixed_dir != nullptr && stat(fixed_dir, &st) == 0 && S_ISDIR(st.st_mode))
    return std::string(fixed_dir) + "/" + contract::kLimitsFileName;
  const char* v = lookup(context, env_name);
  return v != nullptr ? std::string(v) : std::string();
}

bool parse_limits(const char* json, std::vector<DeviceGrant>* grants, std::string* error,
                  UnplacedPolicy* unplaced) {
  if (unplaced != nullptr) *unplaced = UnplacedPolicy::kUnset;
  JsonValue root;
  std::string why;
  if (parse_json(json, &root, &why)) {
    const JsonValue* policy = root.kind == JsonValue::Kind::kObject ? root.find("unplaced") : nullptr;
    if (policy != nullptr) {
      const JsonValue* version = root.find("version");
      if (version == nullptr || !version->is_integer || version->integer != contract::kAllocationVersion) {
        *error = "missing or unsupported \"version\"";
        return false;
      }
      grants->clear();
      if (policy->kind == JsonValue::Kind::kString && policy->string == contract::kUnplacedRefuse) {
        if (unplaced != nullptr) *unplaced = UnplacedPolicy::kRefuse;
        return true;
      }
      const JsonValue* gpus = root.find("gpus");
      if (policy->kind != JsonValue::Kind::kString || policy->string != contract::kUnplacedWholeGpu ||
          gpus == nullptr || gpus->kind != JsonValue::Kind::kArray ||
          gpus->array.size() > contract::kMaxDevicesPerContainer) {
        *error =
            "\"unplaced\" must be \"refuse\", or \"whole-gpu\" with a \"gpus\" array of at most 16 UUIDs";
        return false;
      }
      for (const auto& g : gpus->array) {
        if (g.kind != JsonValue::Kind::kString || !contract::IsValidDeviceUuid(g.string)) {
          *error = "\"gpus\" holds something that is not a GPU UUID";
          return false;
        }
        grants->push_back(DeviceGrant{g.string, 0, 0});
      }
      if (unplaced != nullptr) *unplaced = UnplacedPolicy::kWholeGpu;
      return true;
    }
  }
  // No container name: the file holds this container's entry alone, so a
  // TESSERA_CONTAINER_NAME the container sets cannot pick another one.
  if (parse_allocation(json, nullptr, grants, error)) return true;
  if (error->rfind("several container entries", 0) == 0) *error = "more than one container entry";
  return false;
}

namespace {

bool same_grants(const std::vector<DeviceGrant>& a, const std::vector<DeviceGrant>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& g : a) {
    bool found = false;
    for (const auto& h : b)
      found = found || (strcasecmp(g.uuid.c_str(), h.uuid.c_str()) == 0 && g.memory_bytes == h.memory_bytes &&
                        g.cores == h.cores);
    if (!found) return false;
  }
  return true;
}

}  // namespace

void apply_limits_file(Config& c, const std::string& path, const char* text, const std::string& read_error) {
  c.limits_path = path;
  if (path.empty()) return;
  // The node (or tessera run) set limits up: the container may not switch
  // them off.
  if (c.control_disabled) {
    c.problems.push_back("CUDA_DISABLE_CONTROL ignored: limits file " + path + " is configured");
    c.control_disabled = false;
  }
  if (text == nullptr && read_error.empty()) {
    c.limits_pending = true;
    c.problems.push_back("limits file " + path +
                         " is not there yet; the environment's limits apply until it appears");
    return;
  }
  std::vector<DeviceGrant> grants;
  std::string error = read_error;
  UnplacedPolicy unplaced = UnplacedPolicy::kUnset;
  if (error.empty() && !parse_limits(text, &grants, &error, &unplaced)) error = "invalid: " + error;
  if (!error.empty()) {
    c.limits_unusable = true;
    c.problems.push_back("limits file " + path + " cannot be used (" + error + "); no GPU is visible");
    return;
  }
  if (unplaced != UnplacedPolicy::kUnset) {
    // The node says tessera did not place this pod: its policy, not the
    // environment's, and no limit a variable could set.
    if (c.source != ConfigSource::kNone || c.unplaced != unplaced)
      c.problems.push_back("limits file " + path + " says tessera-scheduler did not place this pod (" +
                           (unplaced == UnplacedPolicy::kRefuse ? "refuse" : "whole-gpu") +
                           "); the environment's allocation, limits and unplaced-pod policy are ignored");
    c.source = ConfigSource::kNone;
    c.grants.clear();
    c.hami_memory_default = -1;
    c.hami_cores_default = -1;
    for (int i = 0; i < kMaxConfigDevices; ++i) c.hami_memory_by_index[i] = c.hami_cores_by_index[i] = -1;
    c.unplaced = unplaced;
    c.kubelet_gpus.clear();
    for (const auto& g : grants) c.kubelet_gpus.push_back(g.uuid);
    c.limits_from_file = true;
    return;
  }
  if (c.source == ConfigSource::kAllocation && !same_grants(c.grants, grants))
    c.problems.push_back("TESSERA_ALLOCATION disagrees with limits file " + path +
                         "; the limits file applies");
  else if (c.source == ConfigSource::kHami)
    c.problems.push_back("CUDA_DEVICE_MEMORY_LIMIT / CUDA_DEVICE_SM_LIMIT ignored: limits file " + path +
                         " applies");
  // The file carries no compute policy; the environment may choose between
  // the policies that hold the quota (force, default), not switch it off.
  if (c.core_policy == "disable") {
    c.problems.push_back("GPU_CORE_UTILIZATION_POLICY=disable ignored: limits file " + path +
                         " applies; the compute quota is held (policy default)");
    c.core_policy = "default";
  }
  c.grants = std::move(grants);
  c.source = ConfigSource::kAllocation;
  c.limits_from_file = true;
}

void apply_pod_limits_file(Config& c, const std::string& path, const char* text,
                           const std::string& read_error, bool from_fixed_dir) {
  if (path.empty() || c.limits_unusable) return;
  if (!c.limits_path.empty() && !c.limits_pending) return;  // the node's file applies
  if (text == nullptr && read_error.empty()) return;
  if (text != nullptr && read_error.empty() && text[strspn(text, " \t\r\n")] == '\0') return;
  const std::string node_path = c.limits_path;
  const bool pending = c.limits_pending;
  if (pending)
    std::erase_if(c.problems,
                  [&](const std::string& p) { return p.rfind("limits file " + node_path, 0) == 0; });
  apply_limits_file(c, path, text, read_error);
  if (!from_fixed_dir) c.limits_from_file = false;
  if (pending) {
    // Watch for the node's file still; until it is there, the pod's holds.
    c.limits_path = node_path;
    c.limits_pending = true;
    if (!c.limits_unusable)
      c.problems.push_back("limits file " + node_path + " is not there yet; the pod's own limits (" + path +
                           ", read-only) apply until it appears");
  }
}

bool read_small_file(const std::string& path, std::string* text, std::string* error, bool* missing) {
  *missing = false;
  FILE* f = fopen(path.c_str(), "re");
  if (f == nullptr) {
    if (errno == ENOENT) {
      *missing = true;
      return false;
    }
    *error = std::string("cannot open: ") + strerror(errno);
    return false;
  }
  char buf[4096];
  size_t n = 0;
  text->clear();
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
    text->append(buf, n);
    if (text->size() > (1u << 20)) {
      fclose(f);
      *error = "larger than 1 MiB";
      return false;
    }
  }
  bool failed = ferror(f) != 0;
  fclose(f);
  if (failed) *error = "read error";
  return !failed;
}

Config load_config_from_process_env() {
  Config c = load_config(&process_getenv, nullptr);
  const std::string path = resolve_limits_path(&process_getenv, nullptr, contract::kLimitsContainerDir);
  if (!path.empty()) {
    std::string text, error;
    bool missing = false;
    bool ok = read_small_file(path, &text, &error, &missing);
    apply_limits_file(c, path, ok ? text.c_str() : nullptr, error);
  }
  const std::string pod_path = resolve_limits_path(&process_getenv, nullptr, contract::kPodLimitsContainerDir,
                                                   contract::kPodLimitsEnv);
  if (!pod_path.empty() && (c.limits_path.empty() || c.limits_pending)) {
    std::string text, error;
    bool missing = false;
    bool ok = read_small_file(pod_path, &text, &error, &missing);
    struct stat st {};
    const bool fixed = stat(contract::kPodLimitsContainerDir, &st) == 0 && S_ISDIR(st.st_mode);
    apply_pod_limits_file(c, pod_path, ok ? text.c_str() : nullptr, error, fixed);
  }
  return c;
}

}  // namespace tessera::vgpu
