#include "dra/allocator.h"

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <tuple>

#include "dra/cel.h"
#include "dra/quantity.h"

namespace tessera::testing::dra {
namespace {

// kube-scheduler's limit on results in one allocation (AllocationResultsMaxSize).
constexpr size_t kMaxResultsPerClaim = 32;

std::string Str(const Json& object, const char* field) {
  if (!object.is_object() || !object.contains(field) || !object[field].is_string()) return "";
  return object[field].get<std::string>();
}

const Json& Field(const Json& object, const char* field) {
  static const Json null;
  if (!object.is_object() || !object.contains(field)) return null;
  return object[field];
}

bool Flag(const Json& object, const char* field) {
  const Json& value = Field(object, field);
  return value.is_boolean() && value.get<bool>();
}

std::string ClaimLabel(const Json& claim) {
  return Str(Field(claim, "metadata"), "namespace") + "/" + Str(Field(claim, "metadata"), "name");
}

// "domain/name" for a capacity, attribute or counter key of a driver's device.
std::string Qualified(const std::string& driver, const std::string& key) {
  return key.find('/') == std::string::npos ? driver + "/" + key : key;
}

Result<Quantity> QuantityField(const Json& value, const std::string& what) {
  if (!value.is_string()) return Error{what + ": expected a quantity string, got " + value.dump()};
  auto q = Quantity::Parse(value.get<std::string>());
  if (!q.ok()) return q.error().Wrap(what);
  return *q;
}

std::string List(const std::vector<Quantity>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + values[i].String();
  return out + "]";
}

// ---- the devices of the pools a node can use ------------------------------

struct RangePolicy {
  Quantity min;
  std::optional<Quantity> max, step;
};

struct RequestPolicy {
  std::optional<Quantity> default_value;
  std::vector<Quantity> valid_values;
  std::optional<RangePolicy> range;
};

struct Capacity {
  std::string key;        // as the device publishes it (and the result names it)
  std::string qualified;  // domain/name
  Quantity value;
  std::optional<RequestPolicy> policy;
};

struct CounterUse {
  std::string counter_set;
  std::map<std::string, Quantity> counters;
};

struct Device {
  std::string driver, pool, name, id;
  size_t pool_index = 0;
  bool node_local = false;  // selected by a node name (slice's or its own)
  Json node_selector;       // the selector that chose it, when one did
  bool multi = false;       // allowMultipleAllocations
  std::vector<Capacity> capacity;
  std::vector<CounterUse> consumes;
  Json taints;
  Json attributes;
  CelDevice cel;
};

struct Pool {
  std::string driver, name;
  bool incomplete = false;
  bool invalid = false;
  std::string problem;
  std::vector<size_t> devices;  // indices into the device table, in search order
  std::map<std::string, std::map<std::string, Quantity>> counter_sets;
  std::map<std::string, std::vector<CounterUse>> consumption;  // every device of the pool, by name
  std::string id() const { return driver + "/" + name; }
  void Invalidate(const std::string& why) {
    problem += std::string(problem.empty() ? "" : "; ") + (invalid ? "" : "is invalid: ") + why;
    invalid = true;
  }
};

Result<std::vector<CounterUse>> ParseConsumption(const Json& device, const std::string& what) {
  std::vector<CounterUse> out;
  const Json& consumes = Field(device, "consumesCounters");
  if (consumes.is_null()) return out;
  if (!consumes.is_array()) return Error{what + ": consumesCounters must be a list"};
  for (const Json& use : consumes) {
    CounterUse parsed;
    parsed.counter_set = Str(use, "counterSet");
    const Json& counters = Field(use, "counters");
    if (counters.is_object()) {
      for (const auto& [name, counter] : counters.items()) {
        auto value = QuantityField(Field(counter, "value"), what + " counter " + name);
        if (!value.ok()) return value.error();
        parsed.counters[name] = *value;
      }
    }
    out.push_back(std::move(parsed));
  }
  return out;
}

Result<Capacity> ParseCapacity(const std::string& driver, const std::string& key, const Json& raw,
                               const std::string& what) {
  Capacity cap;
  cap.key = key;
  cap.qualified = Qualified(driver, key);
  auto value = QuantityField(Field(raw, "value"), what + " capacity " + key);
  if (!value.ok()) return value.error();
  cap.value = *value;
  const Json& policy = Field(raw, "requestPolicy");
  if (policy.is_object()) {
    RequestPolicy parsed;
    if (!Field(policy, "default").is_null()) {
      auto d = QuantityField(policy["default"], what + " capacity " + key + " requestPolicy.default");
      if (!d.ok()) return d.error();
      parsed.default_value = *d;
    }
    if (Field(policy, "validValues").is_array()) {
      for (const Json& v : policy["validValues"]) {
        auto q = QuantityField(v, what + " capacity " + key + " requestPolicy.validValues");
        if (!q.ok()) return q.error();
        parsed.valid_values.push_back(*q);
      }
    }
    const Json& range = Field(policy, "validRange");
    if (range.is_object()) {
      RangePolicy r;
      auto min = QuantityField(Field(range, "min"), what + " capacity " + key + " validRange.min");
      if (!min.ok()) return min.error();
      r.min = *min;
      if (!Field(range, "max").is_null()) {
        auto max = QuantityField(range["max"], what + " capacity " + key + " validRange.max");
        if (!max.ok()) return max.error();
        r.max = *max;
      }
      if (!Field(range, "step").is_null()) {
        auto step = QuantityField(range["step"], what + " capacity " + key + " validRange.step");
        if (!step.ok()) return step.error();
        if (step->CeilValue() <= 0)
          return Error{what + " capacity " + key + ": validRange.step must be positive"};
        r.step = *step;
      }
      parsed.range = r;
    }
    cap.policy = parsed;
  }
  return cap;
}

// NodeSelector matching: terms are ORed, the requirements of a term ANDed;
// matchFields knows metadata.name, as in Kubernetes.
bool RequirementMatches(const Json& requirement, const std::string& value, bool present) {
  const std::string op = Str(requirement, "operator");
  std::vector<std::string> values;
  if (Field(requirement, "values").is_array()) {
    for (const Json& v : requirement["values"]) {
      if (v.is_string()) values.push_back(v.get<std::string>());
    }
  }
  const bool listed = std::find(values.begin(), values.end(), value) != values.end();
  if (op == "In") return present && listed;
  if (op == "NotIn") return !present || !listed;
  if (op == "Exists") return present;
  if (op == "DoesNotExist") return !present;
  if ((op == "Gt" || op == "Lt") && present && values.size() == 1) {
    try {
      const long long have = std::stoll(value), want = std::stoll(values[0]);
      return op == "Gt" ? have > want : have < want;
    } catch (...) {
      return false;
    }
  }
  return false;
}

bool NodeSelectorMatches(const Json& selector, const Json& node) {
  const Json& labels = Field(Field(node, "metadata"), "labels");
  const std::string node_name = Str(Field(node, "metadata"), "name");
  for (const Json& term :
       Field(selector, "nodeSelectorTerms").is_array() ? selector["nodeSelectorTerms"] : Json::array()) {
    const Json& expressions = Field(term, "matchExpressions");
    const Json& fields = Field(term, "matchFields");
    if ((!expressions.is_array() || expressions.empty()) && (!fields.is_array() || fields.empty())) continue;
    bool all = true;
    for (const Json& r : expressions.is_array() ? expressions : Json::array()) {
      const std::string key = Str(r, "key");
      const bool present = labels.is_object() && labels.contains(key) && labels[key].is_string();
      all = all && RequirementMatches(r, present ? labels[key].get<std::string>() : "", present);
    }
    for (const Json& r : fields.is_array() ? fields : Json::array()) {
      all = all && Str(r, "key") == "metadata.name" && RequirementMatches(r, node_name, true);
    }
    if (all) return true;
  }
  return false;
}

// How a slice (or device) chooses nodes: 1 = this node by name, 2 = all nodes,
// 3 = by selector, 0 = not this node, -1 = nothing set.
int NodeChoice(const Json& object, const Json& node, const std::string& node_name) {
  const std::string name = Str(object, "nodeName");
  if (!name.empty()) return name == node_name ? 1 : 0;
  if (Flag(object, "allNodes")) return 2;
  if (Field(object, "nodeSelector").is_object())
    return NodeSelectorMatches(object["nodeSelector"], node) ? 3 : 0;
  return -1;
}

// ---- allocation state -----------------------------------------------------

using Amounts = std::map<std::string, Quantity>;  // qualified capacity name -> amount

struct Existing {
  std::map<std::string, std::string> exclusive;                   // device id -> claim holding it alone
  std::map<std::string, Amounts> shared;                          // device id -> capacity consumed by shares
  std::map<std::string, std::vector<std::string>> share_holders;  // device id -> claims sharing it
  std::set<std::string> allocated;                                // any of the above
};

struct Request {
  std::string name;  // as results name it: "req" or "req/sub"
  std::string base, sub;
  std::string class_name;
  const Json* device_class = nullptr;
  std::vector<CelSelector> class_selectors, selectors;
  bool all = false;
  int64_t count = 1;
  std::vector<std::pair<std::string, Quantity>> capacity_requests;
  Json tolerations;
  std::vector<size_t> all_devices;  // allocationMode All
};

struct Constraint {
  std::vector<std::string> requests;  // empty: all
  std::string attribute;              // fully qualified
  bool match = true;                  // matchAttribute; else distinctAttribute
  std::vector<Json> taken;            // attribute values of the devices added, in order
};

struct ClaimWork {
  const Json* json = nullptr;
  std::string label;
  std::vector<std::vector<Request>> requests;  // per request: its alternatives
  std::vector<Constraint> constraints;
  std::vector<int> chosen;  // per request: the alternative allocated
};

struct Taken {
  size_t device = 0;
  std::string request;  // result name
  const Request* from = nullptr;
  std::string share_id;                      // shared devices only
  std::map<std::string, Quantity> consumed;  // by published key; shared devices only
  Amounts consumed_qualified;
  bool charged_counters = false;
};

bool Tolerates(const Json& toleration, const Json& taint) {
  const std::string effect = Str(toleration, "effect");
  if (!effect.empty() && effect != Str(taint, "effect")) return false;
  const std::string key = Str(toleration, "key");
  const std::string op = Str(toleration, "operator").empty() ? "Equal" : Str(toleration, "operator");
  if (op == "Exists") return key.empty() || key == Str(taint, "key");
  return key == Str(taint, "key") && Str(toleration, "value") == Str(taint, "value");
}

// The first taint that keeps a request away from a device, or null.
const Json* BlockingTaint(const Device& device, const Request& request) {
  if (!device.taints.is_array()) return nullptr;
  for (const Json& taint : device.taints) {
    const std::string effect = Str(taint, "effect");
    if (effect != "NoSchedule" && effect != "NoExecute") continue;
    bool tolerated = false;
    for (const Json& toleration : request.tolerations.is_array() ? request.tolerations : Json::array()) {
      tolerated = tolerated || Tolerates(toleration, taint);
    }
    if (!tolerated) return &taint;
  }
  return nullptr;
}

const Json* LookupAttribute(const Device& device, const std::string& qualified) {
  if (device.attributes.is_object() && device.attributes.contains(qualified))
    return &device.attributes[qualified];
  const auto slash = qualified.find('/');
  if (slash == std::string::npos || qualified.substr(0, slash) != device.driver) return nullptr;
  const std::string name = qualified.substr(slash + 1);
  if (device.attributes.is_object() && device.attributes.contains(name)) return &device.attributes[name];
  return nullptr;
}

bool ConstraintApplies(const Constraint& constraint, const Request& request) {
  if (constraint.requests.empty()) return true;
  for (const auto& name : constraint.requests) {
    if (name == request.base || (!request.sub.empty() && name == request.name)) return true;
  }
  return false;
}

// The consumed amount of one capacity for one allocation (KEP-5075).
Quantity ConsumedAmount(const std::optional<Quantity>& requested, const Capacity& cap) {
  if (!requested) return cap.policy && cap.policy->default_value ? *cap.policy->default_value : cap.value;
  if (!cap.policy) return *requested;
  if (cap.policy->range) {
    const RangePolicy& range = *cap.policy->range;
    if (*requested < range.min) return range.min;
    if (!range.step) return *requested;
    // Whole units, like Kubernetes' integer path (Value() rounds up).
    const int64_t want = requested->CeilValue(), min = range.min.CeilValue(), step = range.step->CeilValue();
    const int64_t added = want - min;
    const int64_t steps = added / step + (added % step != 0 ? 1 : 0);
    return Quantity::FromInt(min + steps * step, range.step->format());
  }
  if (!cap.policy->valid_values.empty()) {
    for (const Quantity& valid : cap.policy->valid_values) {
      if (*requested <= valid) return valid;
    }
  }
  return *requested;
}

// Why an amount breaks the capacity's request policy; empty when it does not.
std::string PolicyViolation(const Quantity& amount, const Capacity& cap) {
  if (!cap.policy) return "";
  if (cap.policy->default_value && amount == *cap.policy->default_value) return "";
  if (cap.policy->range) {
    const RangePolicy& range = *cap.policy->range;
    if (range.max && amount > *range.max)
      return "is above the request policy's maximum " + range.max->String();
    if (range.step) {
      const int64_t step = range.step->CeilValue();
      if ((amount.CeilValue() - range.min.CeilValue()) % step != 0) {
        return "is not " + range.min.String() + " plus a multiple of " + range.step->String();
      }
    }
    return "";
  }
  if (!cap.policy->valid_values.empty()) {
    for (const Quantity& valid : cap.policy->valid_values) {
      if (amount == valid) return "";
    }
    return "is not one of the valid values " + List(cap.policy->valid_values);
  }
  return "";
}

// ---- one Allocate call ----------------------------------------------------

class Run {
 public:
  Run(const ClusterState& state, const AllocatorOptions& options, const Json& node)
      : state_(state), options_(options), node_(node), node_name_(Str(Field(node, "metadata"), "name")) {}

  Result<std::vector<Json>, AllocationFailure> Allocate(const std::vector<Json>& claims) {
    if (auto status = GatherPools(); !status.ok()) return Invalid(status.error().message);
    BuildOrder();
    if (auto status = GatherExisting(claims); !status.ok()) return Invalid(status.error().message);
    for (const Json& claim : claims) {
      auto work = PrepareClaim(claim);
      if (!work.ok()) return Invalid(work.error().message);
      claims_.push_back(std::move(*work));
    }
    for (size_t c = 0; c < claims_.size(); ++c) {
      for (auto& alternatives : claims_[c].requests) {
        for (auto& request : alternatives) {
          if (auto status = PrepareAll(c, request); !status.ok()) return Invalid(status.error().message);
        }
      }
    }
    results_.assign(claims_.size(), {});
    const bool found = Search(0, 0, -1, 0, 0);
    if (fatal_) return *fatal_;
    if (!found) return Explain();
    std::vector<Json> out;
    for (size_t c = 0; c < claims_.size(); ++c) out.push_back(AllocationJson(c));
    return out;
  }

 private:
  AllocationFailure Invalid(const std::string& message) {
    AllocationFailure failure;
    failure.kind = AllocationFailure::Kind::kInvalid;
    failure.message = message;
    return failure;
  }

  // -- pools --

  Status GatherPools() {
    struct Group {
      std::string driver, name;
      std::vector<const Json*> slices;
    };
    std::map<std::pair<std::string, std::string>, Group> groups;
    for (const Json& slice : state_.resource_slices) {
      const Json& spec = Field(slice, "spec");
      const std::string driver = Str(spec, "driver");
      const std::string pool = Str(Field(spec, "pool"), "name");
      if (driver.empty() || pool.empty()) {
        return Error{"ResourceSlice " + Str(Field(slice, "metadata"), "name") +
                     " has no driver or pool name"};
      }
      Group& group = groups[{driver, pool}];
      group.driver = driver;
      group.name = pool;
      group.slices.push_back(&slice);
    }
    for (auto& [pool_key, group] : groups) {
      int64_t generation = std::numeric_limits<int64_t>::min();
      for (const Json* slice : group.slices) {
        const Json& g = Field(Field(Field(*slice, "spec"), "pool"), "generation");
        generation = std::max<int64_t>(generation, g.is_number_integer() ? g.get<int64_t>() : 0);
      }
      std::vector<const Json*> current;
      for (const Json* slice : group.slices) {
        const Json& g = Field(Field(Field(*slice, "spec"), "pool"), "generation");
        if ((g.is_number_integer() ? g.get<int64_t>() : 0) == generation) current.push_back(slice);
      }
      std::sort(current.begin(), current.end(), [](const Json* a, const Json* b) {
        return Str(Field(*a, "metadata"), "name") < Str(Field(*b, "metadata"), "name");
      });
      Pool pool;
      pool.driver = group.driver;
      pool.name = group.name;
      const Json& count = Field(Field(Field(*current[0], "spec"), "pool"), "resourceSliceCount");
      const int64_t expected = count.is_number_integer() ? count.get<int64_t>() : 1;
      if (static_cast<int64_t>(current.size()) != expected) {
        pool.incomplete = true;
        pool.problem = "is incomplete (" + std::to_string(current.size()) + " of " +
                       std::to_string(expected) + " slices of generation " + std::to_string(generation) + ")";
      }
      const size_t pool_index = pools_.size();
      std::set<std::string> names;
      std::vector<size_t> relevant;
      for (const Json* slice : current) {
        const Json& spec = Field(*slice, "spec");
        const std::string slice_name = Str(Field(*slice, "metadata"), "name");
        const Json& sets = Field(spec, "sharedCounters");
        for (const Json& set : sets.is_array() ? sets : Json::array()) {
          const std::string set_name = Str(set, "name");
          if (pool.counter_sets.count(set_name)) {
            pool.Invalidate("counter set " + set_name + " is defined twice");
          }
          auto& counters = pool.counter_sets[set_name];
          if (Field(set, "counters").is_object()) {
            for (const auto& [counter, raw] : set["counters"].items()) {
              auto value =
                  QuantityField(Field(raw, "value"), "ResourceSlice " + slice_name + " counter " + counter);
              if (!value.ok()) return value.error();
              counters[counter] = *value;
            }
          }
        }
        const int slice_choice = NodeChoice(spec, node_, node_name_);
        const bool per_device = Flag(spec, "perDeviceNodeSelection");
        const Json& devices = Field(spec, "devices");
        for (const Json& raw : devices.is_array() ? devices : Json::array()) {
          const std::string name = Str(raw, "name");
          const std::string what = "ResourceSlice " + slice_name + " device " + name;
          if (!names.insert(name).second) {
            pool.Invalidate("duplicate device name " + name);
          }
          auto consumes = ParseConsumption(raw, what);
          if (!consumes.ok()) return consumes.error();
          pool.consumption[name] = *consumes;
          int choice = per_device ? NodeChoice(raw, node_, node_name_) : slice_choice;
          if (choice <= 0) continue;
          Device device;
          device.driver = pool.driver;
          device.pool = pool.name;
          device.name = name;
          device.id = pool.driver + "/" + pool.name + "/" + name;
          device.pool_index = pool_index;
          device.node_local = choice == 1 || Flag(raw, "bindsToNode");
          if (choice == 3) device.node_selector = per_device ? raw["nodeSelector"] : spec["nodeSelector"];
          device.multi = Flag(raw, "allowMultipleAllocations");
          device.consumes = *consumes;
          device.taints = Field(raw, "taints");
          device.attributes = Field(raw, "attributes");
          const Json& capacity = Field(raw, "capacity");
          std::set<std::string> explicit_names;
          if (capacity.is_object()) {
            for (const auto& [key, value] : capacity.items()) {
              if (key.find('/') != std::string::npos) explicit_names.insert(key);
            }
            for (const auto& [key, value] : capacity.items()) {
              // The driver-qualified spelling wins over the bare one.
              if (key.find('/') == std::string::npos && explicit_names.count(pool.driver + "/" + key))
                continue;
              auto cap = ParseCapacity(pool.driver, key, value, what);
              if (!cap.ok()) return cap.error();
              device.capacity.push_back(*cap);
            }
          }
          if (!Field(raw, "bindingConditions").is_null() && !raw["bindingConditions"].empty()) continue;
          device.cel.driver = pool.driver;
          device.cel.attributes = device.attributes.is_null() ? Json::object() : device.attributes;
          device.cel.capacity = capacity.is_null() ? Json::object() : capacity;
          device.cel.allow_multiple_allocations = device.multi;
          relevant.push_back(devices_.size());
          devices_.push_back(std::move(device));
        }
      }
      // Every consumed counter must exist (once the pool is complete: a
      // missing counter slice may simply not have arrived yet).
      for (const auto& [name, uses] : pool.consumption) {
        if (pool.incomplete) break;
        for (const CounterUse& use : uses) {
          auto set = pool.counter_sets.find(use.counter_set);
          if (set == pool.counter_sets.end()) {
            pool.Invalidate("device " + name + " consumes from unknown counter set " + use.counter_set);
            continue;
          }
          for (const auto& [counter, amount] : use.counters) {
            if (!set->second.count(counter)) {
              pool.Invalidate("device " + name + " consumes unknown counter " + counter + " of counter set " +
                              use.counter_set);
            }
          }
        }
      }
      if (relevant.empty()) continue;  // nothing for this node
      pool.devices = std::move(relevant);
      pools_.push_back(std::move(pool));
    }
    return Status::Ok();
  }

  bool Usable(const Pool& pool) const { return !pool.incomplete && !pool.invalid; }

  // -- what other claims hold --

  Status GatherExisting(const std::vector<Json>& claims) {
    std::set<std::string> allocating;
    for (const Json& claim : claims) {
      const std::string uid = Str(Field(claim, "metadata"), "uid");
      if (!uid.empty()) allocating.insert(uid);
      if (!Field(Field(claim, "status"), "allocation").is_null()) {
        return Error{"claim " + ClaimLabel(claim) + " is already allocated"};
      }
    }
    for (const Json& claim : state_.resource_claims) {
      const std::string uid = Str(Field(claim, "metadata"), "uid");
      if (!uid.empty() && allocating.count(uid)) continue;
      const Json& results = Field(Field(Field(Field(claim, "status"), "allocation"), "devices"), "results");
      for (const Json& result : results.is_array() ? results : Json::array()) {
        if (Flag(result, "adminAccess")) continue;  // admin access holds nothing
        const std::string driver = Str(result, "driver");
        const std::string id = driver + "/" + Str(result, "pool") + "/" + Str(result, "device");
        existing_.allocated.insert(id);
        if (Field(result, "shareID").is_null()) {
          existing_.exclusive[id] = ClaimLabel(claim);
          continue;
        }
        existing_.share_holders[id].push_back(ClaimLabel(claim));
        Amounts& amounts = existing_.shared[id];
        const Json& consumed = Field(result, "consumedCapacity");
        if (consumed.is_object()) {
          for (const auto& [key, value] : consumed.items()) {
            auto q = QuantityField(value, "claim " + ClaimLabel(claim) + " consumedCapacity " + key);
            if (!q.ok()) return q.error();
            const std::string name = Qualified(driver, key);
            amounts[name] = amounts.count(name) ? amounts[name] + *q : *q;
          }
        }
      }
    }
    // Counters held by allocated devices, per pool.
    for (const Pool& pool : pools_) {
      for (const auto& [name, uses] : pool.consumption) {
        if (!existing_.allocated.count(pool.driver + "/" + pool.name + "/" + name)) continue;
        for (const CounterUse& use : uses) {
          for (const auto& [counter, amount] : use.counters)
            AddCounter(existing_counters_, pool.id(), use.counter_set, counter, amount);
        }
      }
    }
    return Status::Ok();
  }

  using Counters =
      std::map<std::string, std::map<std::string, std::map<std::string, Quantity>>>;  // pool, set, counter

  static void AddCounter(Counters& counters, const std::string& pool, const std::string& set,
                         const std::string& counter, const Quantity& amount) {
    auto& slot = counters[pool][set];
    auto it = slot.find(counter);
    if (it == slot.end()) {
      slot.emplace(counter, amount);
    } else {
      it->second = it->second + amount;
    }
  }

  static Quantity CounterValue(const Counters& counters, const std::string& pool, const std::string& set,
                               const std::string& counter) {
    auto p = counters.find(pool);
    if (p == counters.end()) return Quantity();
    auto s = p->second.find(set);
    if (s == p->second.end()) return Quantity();
    auto c = s->second.find(counter);
    return c == s->second.end() ? Quantity() : c->second;
  }

  // -- claims --

  Result<Request> PrepareRequest(const Json& spec, const std::string& base, const std::string& sub,
                                 const std::string& label) {
    Request request;
    request.base = base;
    request.sub = sub;
    request.name = sub.empty() ? base : base + "/" + sub;
    const std::string where = "claim " + label + ", request " + request.name;
    if (Flag(spec, "adminAccess")) {
      return Error{where + ": adminAccess is outside what this allocator stand-in covers"};
    }
    request.class_name = Str(spec, "deviceClassName");
    if (request.class_name.empty()) return Error{where + ": missing device class name"};
    for (const Json& device_class : state_.device_classes) {
      if (Str(Field(device_class, "metadata"), "name") == request.class_name)
        request.device_class = &device_class;
    }
    if (request.device_class == nullptr) {
      return Error{where + ": could not retrieve device class " + request.class_name + ": not found"};
    }
    const Json& class_selectors = Field(Field(*request.device_class, "spec"), "selectors");
    for (size_t i = 0; i < (class_selectors.is_array() ? class_selectors.size() : 0); ++i) {
      const std::string expression = Str(Field(class_selectors[i], "cel"), "expression");
      if (expression.empty())
        return Error{"class " + request.class_name + ": selector #" + std::to_string(i) +
                     ": CEL expression empty"};
      auto compiled = CelSelector::Compile(expression);
      if (!compiled.ok()) {
        return compiled.error().Wrap("class " + request.class_name + ": selector #" + std::to_string(i) +
                                     ": CEL compile error");
      }
      request.class_selectors.push_back(*compiled);
    }
    const Json& selectors = Field(spec, "selectors");
    for (size_t i = 0; i < (selectors.is_array() ? selectors.size() : 0); ++i) {
      const std::string expression = Str(Field(selectors[i], "cel"), "expression");
      if (expression.empty())
        return Error{where + ", selector #" + std::to_string(i) + ": CEL expression empty"};
      auto compiled = CelSelector::Compile(expression);
      if (!compiled.ok()) {
        return compiled.error().Wrap("claim " + label + ": selector #" + std::to_string(i) +
                                     ": CEL compile error");
      }
      request.selectors.push_back(*compiled);
    }
    const std::string mode = Str(spec, "allocationMode").empty() ? "ExactCount" : Str(spec, "allocationMode");
    if (mode == "All") {
      request.all = true;
    } else if (mode == "ExactCount") {
      const Json& count = Field(spec, "count");
      request.count = count.is_number_integer() ? count.get<int64_t>() : 1;
      if (request.count < 1) return Error{where + ": count must be at least 1"};
    } else {
      return Error{where + ": unsupported count mode " + mode};
    }
    const Json& requests = Field(Field(spec, "capacity"), "requests");
    if (requests.is_object()) {
      for (const auto& [name, value] : requests.items()) {
        auto q = QuantityField(value, where + ": capacity.requests " + name);
        if (!q.ok()) return q.error();
        request.capacity_requests.emplace_back(name, *q);
      }
    }
    request.tolerations = Field(spec, "tolerations");
    return request;
  }

  Result<ClaimWork> PrepareClaim(const Json& claim) {
    ClaimWork work;
    work.json = &claim;
    work.label = ClaimLabel(claim);
    const Json& devices = Field(Field(claim, "spec"), "devices");
    const Json& requests = Field(devices, "requests");
    std::set<std::string> names;
    for (const Json& request : requests.is_array() ? requests : Json::array()) {
      const std::string name = Str(request, "name");
      if (name.empty() || !names.insert(name).second) {
        return Error{"claim " + work.label + ": request names must be set and unique (\"" + name + "\")"};
      }
      std::vector<Request> alternatives;
      if (Field(request, "exactly").is_object()) {
        auto prepared = PrepareRequest(request["exactly"], name, "", work.label);
        if (!prepared.ok()) return prepared.error();
        alternatives.push_back(std::move(*prepared));
      } else if (Field(request, "firstAvailable").is_array() && !request["firstAvailable"].empty()) {
        for (const Json& sub : request["firstAvailable"]) {
          auto prepared = PrepareRequest(sub, name, Str(sub, "name"), work.label);
          if (!prepared.ok()) return prepared.error();
          alternatives.push_back(std::move(*prepared));
        }
      } else {
        return Error{"claim " + work.label + ", request " + name +
                     ": neither exactly nor firstAvailable is set"};
      }
      work.requests.push_back(std::move(alternatives));
    }
    work.chosen.assign(work.requests.size(), -1);
    const Json& constraints = Field(devices, "constraints");
    for (size_t i = 0; i < (constraints.is_array() ? constraints.size() : 0); ++i) {
      const Json& raw = constraints[i];
      Constraint constraint;
      if (Field(raw, "requests").is_array()) {
        for (const Json& r : raw["requests"]) constraint.requests.push_back(r.get<std::string>());
      }
      if (!Str(raw, "matchAttribute").empty()) {
        constraint.attribute = Str(raw, "matchAttribute");
      } else if (!Str(raw, "distinctAttribute").empty()) {
        constraint.attribute = Str(raw, "distinctAttribute");
        constraint.match = false;
      } else {
        return Error{"claim " + work.label + ", constraint #" + std::to_string(i) + ": empty constraint"};
      }
      work.constraints.push_back(std::move(constraint));
    }
    return work;
  }

  // allocationMode All: every matching device of the node's pools, fixed
  // up front; an incomplete or invalid pool makes "all" unknowable.
  Status PrepareAll(size_t claim, Request& request) {
    if (!request.all) return Status::Ok();
    const std::string where = "claim " + claims_[claim].label + ", request " + request.name;
    for (const Pool& pool : pools_) {
      if (pool.incomplete)
        return Error{where + ": asks for all devices, but resource pool " + pool.id() +
                     " is currently being updated"};
      if (pool.invalid)
        return Error{where + ": asks for all devices, but resource pool " + pool.id() +
                     " is currently invalid"};
      for (size_t device : pool.devices) {
        auto selectable = Selectable(claim, request, device);
        if (!selectable.ok()) return selectable.error();
        if (!*selectable) continue;
        Taken probe;
        auto capacity = CheckCapacity(request, devices_[device], &probe, nullptr);
        if (!capacity.ok()) return capacity.error();
        if (!capacity->empty()) continue;
        request.all_devices.push_back(device);
      }
    }
    return Status::Ok();
  }

  // -- matching --

  // Whether the device passes the class's and the request's selectors; a
  // CEL runtime error is the allocation's error, as in kube-scheduler.
  Result<bool> Selectable(size_t claim, const Request& request, size_t device) {
    const auto key = std::make_pair(&request, device);
    if (auto it = selectable_.find(key); it != selectable_.end()) return it->second;
    const Device& d = devices_[device];
    bool match = true;
    for (size_t i = 0; match && i < request.class_selectors.size(); ++i) {
      auto result = request.class_selectors[i].Matches(d.cel);
      if (!result.ok()) {
        return result.error().Wrap("class " + request.class_name + ": selector #" + std::to_string(i) +
                                   " on device " + d.id + ": CEL runtime error");
      }
      match = *result;
    }
    for (size_t i = 0; match && i < request.selectors.size(); ++i) {
      auto result = request.selectors[i].Matches(d.cel);
      if (!result.ok()) {
        return result.error().Wrap("claim " + claims_[claim].label + ": selector #" + std::to_string(i) +
                                   " on device " + d.id + ": CEL runtime error");
      }
      match = *result;
    }
    selectable_[key] = match;
    return match;
  }

  // Fills `taken` with what the request would consume of the device and
  // returns empty, or returns why it does not fit. `in_progress` is what this
  // run already gave out of the device.
  Result<std::string> CheckCapacity(const Request& request, const Device& device, Taken* taken,
                                    const Amounts* in_progress) {
    // Requested names resolve against the device's capacities: the exact
    // key, or the same name with or without the driver's domain.
    std::map<std::string, Quantity> requested;  // qualified name -> amount
    std::map<std::string, std::string> spelled;
    for (const auto& [name, amount] : request.capacity_requests) {
      const Capacity* found = nullptr;
      for (const Capacity& cap : device.capacity) {
        if (cap.key == name) found = &cap;
      }
      if (found == nullptr) {
        const std::string qualified = Qualified(device.driver, name);
        for (const Capacity& cap : device.capacity) {
          if (cap.qualified == qualified) found = &cap;
        }
      }
      if (found == nullptr) return "has no capacity " + name;
      if (spelled.count(found->qualified)) {
        return Error{"claim request " + request.name + ": capacity " + found->qualified +
                     " requested both as " + spelled[found->qualified] + " and as " + name};
      }
      spelled[found->qualified] = name;
      requested[found->qualified] = amount;
    }
    const Amounts* existing = nullptr;
    if (auto it = existing_.shared.find(device.id); it != existing_.shared.end()) existing = &it->second;
    for (const Capacity& cap : device.capacity) {
      std::optional<Quantity> want;
      if (auto it = requested.find(cap.qualified); it != requested.end()) want = it->second;
      const Quantity amount = ConsumedAmount(want, cap);
      if (amount.Sign() < 0)
        return Error{"capacity " + cap.key + " of device " + device.id + ": negative amount"};
      const std::string asked = want ? want->String() + " requested" : "nothing requested";
      if (std::string why = PolicyViolation(amount, cap); !why.empty()) {
        return "capacity " + cap.key + ": " + asked + ", " + amount.String() + " " + why;
      }
      Quantity used;
      if (existing && existing->count(cap.qualified)) used = existing->at(cap.qualified);
      if (in_progress && in_progress->count(cap.qualified)) used = used + in_progress->at(cap.qualified);
      if (used + amount > cap.value) {
        return "capacity " + cap.key + ": " + asked + " (consumes " + amount.String() + "), " +
               used.String() + " of " + cap.value.String() + " already consumed";
      }
      taken->consumed[cap.key] = amount;
      taken->consumed_qualified[cap.qualified] = amount;
    }
    return std::string();
  }

  // -- search state --

  bool InProgressExclusive(const std::string& id) const {
    auto it = exclusive_.find(id);
    return it != exclusive_.end() && it->second > 0;
  }
  bool InProgressShared(const std::string& id) const {
    auto it = shares_.find(id);
    return it != shares_.end() && it->second > 0;
  }

  // Why the device cannot be given to the request now (empty: it can); fills
  // `taken` when it can.
  Result<std::string> Availability(size_t claim, const Request& request, size_t device_index, Taken* taken) {
    const Device& device = devices_[device_index];
    if (auto it = existing_.exclusive.find(device.id); it != existing_.exclusive.end()) {
      return "allocated to claim " + it->second;
    }
    if (InProgressExclusive(device.id)) return std::string("taken by another request being allocated");
    if (!device.multi && (existing_.shared.count(device.id) || InProgressShared(device.id))) {
      // A device that stopped being shareable gets no new allocations.
      return std::string("shared by other claims and not multi-allocatable now");
    }
    if (const Json* taint = BlockingTaint(device, request)) {
      return "tainted " + Str(*taint, "key") + "=" + Str(*taint, "value") + ":" + Str(*taint, "effect") +
             " and the request does not tolerate it";
    }
    // Counters: a shared device's count once, when it is first given out.
    const bool counted =
        device.multi && (existing_.allocated.count(device.id) || InProgressShared(device.id));
    if (!device.consumes.empty() && !counted) {
      const Pool& pool = pools_[device.pool_index];
      for (const CounterUse& use : device.consumes) {
        for (const auto& [counter, amount] : use.counters) {
          const Quantity total = pool.counter_sets.at(use.counter_set).at(counter);
          const Quantity used = CounterValue(existing_counters_, pool.id(), use.counter_set, counter) +
                                CounterValue(counters_, pool.id(), use.counter_set, counter);
          if (used + amount > total) {
            return "counter " + counter + " of counter set " + use.counter_set + ": needs " +
                   amount.String() + ", " + (total - used).String() + " of " + total.String() + " left";
          }
        }
      }
      taken->charged_counters = true;
    }
    for (const Constraint& constraint : claims_[claim].constraints) {
      if (!ConstraintApplies(constraint, request)) continue;
      const Json* value = LookupAttribute(device, constraint.attribute);
      const std::string kind = constraint.match ? "matchAttribute " : "distinctAttribute ";
      if (value == nullptr) return "lacks attribute " + constraint.attribute + " (" + kind + "constraint)";
      for (const Json& other : constraint.taken) {
        if (constraint.match && other != *value)
          return "attribute " + constraint.attribute + " differs (matchAttribute)";
        if (!constraint.match && other == *value)
          return "attribute " + constraint.attribute + " repeats (distinctAttribute)";
      }
    }
    const Amounts* in_progress = nullptr;
    if (auto it = capacity_.find(device.id); it != capacity_.end()) in_progress = &it->second;
    auto capacity = CheckCapacity(request, device, taken, in_progress);
    if (!capacity.ok()) return capacity.error();
    return *capacity;
  }

  void Take(size_t claim, const Taken& taken) {
    const Device& device = devices_[taken.device];
    if (device.multi) {
      ++shares_[device.id];
      Amounts& amounts = capacity_[device.id];
      for (const auto& [name, amount] : taken.consumed_qualified) {
        amounts[name] = amounts.count(name) ? amounts[name] + amount : amount;
      }
    } else {
      ++exclusive_[device.id];
    }
    if (taken.charged_counters) {
      const Pool& pool = pools_[device.pool_index];
      for (const CounterUse& use : device.consumes) {
        for (const auto& [counter, amount] : use.counters)
          AddCounter(counters_, pool.id(), use.counter_set, counter, amount);
      }
    }
    for (Constraint& constraint : claims_[claim].constraints) {
      if (ConstraintApplies(constraint, *taken.from))
        constraint.taken.push_back(*LookupAttribute(device, constraint.attribute));
    }
    results_[claim].push_back(taken);
  }

  void Release(size_t claim) {
    const Taken taken = results_[claim].back();
    results_[claim].pop_back();
    const Device& device = devices_[taken.device];
    if (device.multi) {
      --shares_[device.id];
      Amounts& amounts = capacity_[device.id];
      for (const auto& [name, amount] : taken.consumed_qualified) amounts[name] = amounts[name] - amount;
    } else {
      --exclusive_[device.id];
    }
    if (taken.charged_counters) {
      const Pool& pool = pools_[device.pool_index];
      for (const CounterUse& use : device.consumes) {
        for (const auto& [counter, amount] : use.counters) {
          AddCounter(counters_, pool.id(), use.counter_set, counter, Quantity() - amount);
        }
      }
    }
    for (Constraint& constraint : claims_[claim].constraints) {
      if (ConstraintApplies(constraint, *taken.from)) constraint.taken.pop_back();
    }
  }

  // Gives the device to the request if it can; false otherwise (or on a
  // fatal error, recorded in fatal_).
  bool TryTake(size_t claim, const Request& request, size_t device) {
    Taken taken;
    taken.device = device;
    taken.request = request.name;
    taken.from = &request;
    auto why = Availability(claim, request, device, &taken);
    if (!why.ok()) {
      Fail(why.error().message);
      return false;
    }
    if (!why->empty()) return false;
    if (devices_[device].multi) taken.share_id = options_.share_id ? options_.share_id() : RandomUuid();
    Take(claim, taken);
    return true;
  }

  void Fail(const std::string& message) {
    if (!fatal_) {
      fatal_ = AllocationFailure{};
      fatal_->kind = AllocationFailure::Kind::kInvalid;
      fatal_->message = message;
    }
  }

  // Claim c, request r, alternative alt (-1: try each), device k of it;
  // ExactCount devices come from `start` on so that each set is tried once.
  bool Search(size_t c, size_t r, int alt, int64_t k, size_t start) {
    if (fatal_) return false;
    if (++steps_ > options_.max_steps) {
      Fail("gave up after " + std::to_string(options_.max_steps) + " search steps");
      return false;
    }
    if (c == claims_.size()) return true;
    ClaimWork& claim = claims_[c];
    if (r == claim.requests.size()) return Search(c + 1, 0, -1, 0, 0);
    if (alt < 0) {
      for (size_t a = 0; a < claim.requests[r].size(); ++a) {
        if (Search(c, r, static_cast<int>(a), 0, 0)) {
          claim.chosen[r] = static_cast<int>(a);
          return true;
        }
        if (fatal_) return false;
      }
      return false;
    }
    const Request& request = claim.requests[r][static_cast<size_t>(alt)];
    const int64_t needed = request.all ? static_cast<int64_t>(request.all_devices.size()) : request.count;
    if (request.all && needed == 0) return false;  // "all" needs at least one device
    if (k == needed) return Search(c, r + 1, -1, 0, 0);
    if (results_[c].size() + static_cast<size_t>(needed - k) > kMaxResultsPerClaim) return false;
    if (request.all) {
      const size_t device = request.all_devices[static_cast<size_t>(k)];
      if (!TryTake(c, request, device)) return false;
      if (Search(c, r, alt, k + 1, 0)) return true;
      Release(c);
      return false;
    }
    for (size_t position = start; position < order_.size(); ++position) {
      const size_t device = order_[position];
      auto selectable = Selectable(c, request, device);
      if (!selectable.ok()) {
        Fail(selectable.error().message);
        return false;
      }
      if (!*selectable || !TryTake(c, request, device)) {
        if (fatal_) return false;
        continue;
      }
      if (Search(c, r, alt, k + 1, position + 1)) return true;
      Release(c);
      if (fatal_) return false;
    }
    return false;
  }

  // -- the answer --

  Json AllocationJson(size_t c) const {
    const ClaimWork& claim = claims_[c];
    Json results = Json::array();
    bool node_local = false;
    Json match_fields = Json::array(), match_expressions = Json::array();
    for (const Taken& taken : results_[c]) {
      const Device& device = devices_[taken.device];
      Json result = {{"request", taken.request},
                     {"driver", device.driver},
                     {"pool", device.pool},
                     {"device", device.name}};
      if (taken.from->tolerations.is_array() && !taken.from->tolerations.empty()) {
        result["tolerations"] = taken.from->tolerations;
      }
      if (device.multi) {
        result["shareID"] = taken.share_id;
        if (!taken.consumed.empty()) {
          Json consumed = Json::object();
          for (const auto& [key, amount] : taken.consumed) consumed[key] = amount.String();
          result["consumedCapacity"] = consumed;
        }
      }
      results.push_back(result);
      node_local = node_local || device.node_local;
      // Single-term selectors of the chosen devices are merged.
      const Json& terms = Field(device.node_selector, "nodeSelectorTerms");
      if (terms.is_array() && terms.size() == 1) {
        for (const char* part : {"matchFields", "matchExpressions"}) {
          Json& into = std::string(part) == "matchFields" ? match_fields : match_expressions;
          for (const Json& requirement : Field(terms[0], part).is_array() ? terms[0][part] : Json::array()) {
            if (std::find(into.begin(), into.end(), requirement) == into.end()) into.push_back(requirement);
          }
        }
      }
    }
    Json allocation = {{"devices", {{"results", results}}}};

    // Configuration: each class's once (FromClass), then the claim's (FromClaim).
    Json config = Json::array();
    std::map<std::string, std::pair<size_t, size_t>> class_configs;
    const size_t request_count = claim.requests.size();
    for (size_t r = 0; r < request_count; ++r) {
      const Request& request = claim.requests[r][static_cast<size_t>(std::max(claim.chosen[r], 0))];
      auto seen = class_configs.find(request.class_name);
      if (seen != class_configs.end()) {
        for (size_t i = seen->second.first; i < seen->second.second; ++i)
          config[i]["requests"].push_back(request.name);
        continue;
      }
      const size_t first = config.size();
      const Json& class_config = Field(Field(*request.device_class, "spec"), "config");
      for (const Json& entry : class_config.is_array() ? class_config : Json::array()) {
        Json item = {{"source", "FromClass"}, {"requests", Json::array({request.name})}};
        if (Field(entry, "opaque").is_object()) item["opaque"] = entry["opaque"];
        config.push_back(item);
      }
      class_configs[request.class_name] = {first, config.size()};
    }
    const Json& claim_config = Field(Field(Field(*claim.json, "spec"), "devices"), "config");
    for (const Json& entry : claim_config.is_array() ? claim_config : Json::array()) {
      Json item = {{"source", "FromClaim"}};
      if (Field(entry, "requests").is_array() && !entry["requests"].empty())
        item["requests"] = entry["requests"];
      if (Field(entry, "opaque").is_object()) item["opaque"] = entry["opaque"];
      bool applies = !item.contains("requests");
      for (size_t r = 0; !applies && r < request_count; ++r) {
        const Request& request = claim.requests[r][static_cast<size_t>(std::max(claim.chosen[r], 0))];
        for (const Json& name : item["requests"]) {
          applies = applies || name == request.base || (!request.sub.empty() && name == request.name);
        }
      }
      if (applies) config.push_back(item);
    }
    for (Json& item : config) {
      if (item.contains("requests") && item["requests"].size() == request_count) item.erase("requests");
    }
    if (!config.empty()) allocation["devices"]["config"] = config;

    if (node_local) {
      allocation["nodeSelector"] = {
          {"nodeSelectorTerms",
           Json::array({{{"matchFields", Json::array({{{"key", "metadata.name"},
                                                       {"operator", "In"},
                                                       {"values", Json::array({node_name_})}}})}}})}};
    } else if (!match_fields.empty() || !match_expressions.empty()) {
      Json term = Json::object();
      if (!match_fields.empty()) term["matchFields"] = match_fields;
      if (!match_expressions.empty()) term["matchExpressions"] = match_expressions;
      allocation["nodeSelector"] = {{"nodeSelectorTerms", Json::array({term})}};
    }
    return allocation;
  }

  // Why nothing fit: each request against each device, with only what other
  // claims hold (not what this run tried).
  AllocationFailure Explain() {
    AllocationFailure failure;
    failure.kind = AllocationFailure::Kind::kUnsatisfiable;
    failure.message = "cannot allocate all claims on node " + node_name_;
    for (const Pool& pool : pools_) {
      if (!Usable(pool)) failure.reasons.push_back("resource pool " + pool.id() + " " + pool.problem);
    }
    bool each_fits = true;
    for (size_t c = 0; c < claims_.size(); ++c) {
      for (const auto& alternatives : claims_[c].requests) {
        for (const Request& request : alternatives) {
          const std::string where = "claim " + claims_[c].label + ", request " + request.name;
          int64_t fitting = 0;
          for (size_t device : order_) {
            auto selectable = Selectable(c, request, device);
            std::string why;
            if (!selectable.ok()) {
              why = selectable.error().message;
            } else if (!*selectable) {
              why = "not selected by the selectors of device class " + request.class_name +
                    " or of the request";
            } else {
              Taken probe;
              probe.device = device;
              probe.from = &request;
              // Constraints depend on the other devices: judged in the search only.
              std::vector<Constraint> saved;
              std::swap(saved, claims_[c].constraints);
              auto availability = Availability(c, request, device, &probe);
              std::swap(saved, claims_[c].constraints);
              why = availability.ok() ? *availability : availability.error().message;
            }
            if (why.empty()) {
              ++fitting;
            } else {
              failure.reasons.push_back(where + ": device " + devices_[device].id + " " + why);
            }
          }
          const int64_t needed = request.all
                                     ? std::max<int64_t>(1, static_cast<int64_t>(request.all_devices.size()))
                                     : request.count;
          if (request.all && request.all_devices.empty()) {
            failure.reasons.push_back(where + ": asks for all devices and none matches");
          }
          if (fitting < needed && alternatives.size() == 1) each_fits = false;
          failure.reasons.push_back(where + ": " + std::to_string(fitting) + " device(s) fit, " +
                                    (request.all ? "all matching" : std::to_string(request.count)) +
                                    " needed");
        }
      }
    }
    if (each_fits) {
      failure.reasons.push_back(
          "each request fits on its own but not together (devices, capacity or counters run out when "
          "combined, or a "
          "constraint cannot be met)");
    }
    return failure;
  }

  const ClusterState& state_;
  const AllocatorOptions& options_;
  const Json& node_;
  const std::string node_name_;

  std::vector<Device> devices_;
  std::vector<Pool> pools_;
  std::vector<size_t> order_;  // usable devices in search order
  Existing existing_;
  Counters existing_counters_;
  std::vector<ClaimWork> claims_;

  std::map<std::pair<const Request*, size_t>, bool> selectable_;
  std::map<std::string, int> exclusive_;     // device id -> in-progress exclusive allocations
  std::map<std::string, int> shares_;        // device id -> in-progress shares
  std::map<std::string, Amounts> capacity_;  // device id -> capacity given out in this run
  Counters counters_;                        // counters charged in this run
  std::vector<std::vector<Taken>> results_;  // per claim
  std::optional<AllocationFailure> fatal_;
  size_t steps_ = 0;

  // Devices of usable pools in (driver, pool, slice name, position) order.
  void BuildOrder() {
    std::vector<size_t> pool_order(pools_.size());
    for (size_t i = 0; i < pools_.size(); ++i) pool_order[i] = i;
    std::sort(pool_order.begin(), pool_order.end(), [&](size_t a, size_t b) {
      return std::tie(pools_[a].driver, pools_[a].name) < std::tie(pools_[b].driver, pools_[b].name);
    });
    for (size_t p : pool_order) {
      if (!Usable(pools_[p])) continue;
      order_.insert(order_.end(), pools_[p].devices.begin(), pools_[p].devices.end());
    }
  }
};

}  // namespace

std::string AllocationFailure::Describe() const {
  std::string out = message;
  for (const auto& reason : reasons) out += "\n  " + reason;
  return out;
}

bool AllocationFailure::Mentions(const std::string& text) const {
  if (message.find(text) != std::string::npos) return true;
  return std::any_of(reasons.begin(), reasons.end(),
                     [&](const std::string& r) { return r.find(text) != std::string::npos; });
}

std::string RandomUuid() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const uint64_t high = rng(), low = rng();
  char buffer[37];
  std::snprintf(buffer, sizeof(buffer), "%08x-%04x-4%03x-%04x-%012llx", static_cast<unsigned>(high >> 32),
                static_cast<unsigned>((high >> 16) & 0xFFFF), static_cast<unsigned>(high & 0x0FFF),
                static_cast<unsigned>(0x8000 | (low >> 48 & 0x3FFF)),
                static_cast<unsigned long long>(low & 0xFFFFFFFFFFFFULL));
  return buffer;
}

Allocator::Allocator(ClusterState state, AllocatorOptions options)
    : state_(std::move(state)), options_(std::move(options)) {}

Result<std::vector<Json>, AllocationFailure> Allocator::Allocate(const Json& node,
                                                                 const std::vector<Json>& claims) const {
  Run run(state_, options_, node);
  return run.Allocate(claims);
}

Result<std::vector<Json>, AllocationFailure> Allocator::AllocateOnNode(
    const std::string& node_name, const std::vector<Json>& claims) const {
  return Allocate(Json{{"metadata", {{"name", node_name}}}}, claims);
}

}  // namespace tessera::testing::dra
