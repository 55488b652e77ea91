// Least privilege, checked against what the binaries do: every call that
// tessera-scheduler, tessera-node, `tessera webhook-certs` and kubectl-tessera
// made against the API-server stand-in while the end-to-end scenarios of
// tests/integration/{scheduler,node,certs,kubectl} ran, and tessera-node in
// deploy/dra's enforcement-only role in tests/integration/dra (recorded by the
// stand-in into TESSERA_APISERVER_REQUEST_LOG files, one per program; the
// security_record_* tests of this folder's CMakeLists.txt run them first) is
// compared with the RBAC objects in deploy/:
//  - every call is allowed by the rules bound to that binary's ServiceAccount;
//  - every (rule, verb, resource) is used by some call, or is listed in
//    kUnusedOnPurpose below with the reason.
// docs/security.md says what this found.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// One API call as RBAC sees it.
struct Call {
  std::string verb;  // get list watch create update patch delete deletecollection
  std::string group;
  std::string resource;
  std::string subresource;
  std::string ns;
  std::string name;
  std::string line;  // as recorded, for messages
};

// "/api/v1/namespaces/ns/pods/name/binding" -> Call; false for non-resource URLs.
bool ParseCall(const std::string& method, const std::string& path, bool watch, Call* call) {
  std::vector<std::string> parts;
  std::stringstream in(path);
  for (std::string part; std::getline(in, part, '/');) {
    if (!part.empty()) parts.push_back(part);
  }
  size_t i = 0;
  if (parts.size() >= 2 && parts[0] == "api") {
    i = 2;
  } else if (parts.size() >= 3 && parts[0] == "apis") {
    call->group = parts[1];
    i = 3;
  } else {
    return false;
  }
  if (i + 1 < parts.size() && parts[i] == "namespaces" && i + 2 < parts.size()) {
    call->ns = parts[i + 1];
    i += 2;
  }
  if (i >= parts.size()) return false;
  call->resource = parts[i++];
  if (i < parts.size()) call->name = parts[i++];
  if (i < parts.size()) call->subresource = parts[i++];
  if (method == "GET") {
    call->verb = watch ? "watch" : call->name.empty() ? "list" : "get";
  } else if (method == "POST") {
    call->verb = "create";
  } else if (method == "PUT") {
    call->verb = "update";
  } else if (method == "PATCH") {
    call->verb = "patch";
  } else if (method == "DELETE") {
    call->verb = call->name.empty() ? "deletecollection" : "delete";
  } else {
    call->verb = method;
  }
  // POST .../pods/<name>/binding creates the subresource; its name is the pod's.
  return true;
}

// The calls a program recorded that tessera's binaries made.
std::vector<Call> ReadCalls(const std::string& file) {
  std::vector<Call> calls;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields;
    std::stringstream ls(line);
    for (std::string f; std::getline(ls, f, '\t');) fields.push_back(f);
    if (fields.size() < 5) continue;
    // tessera's client (kube::CurlTransport) says "tessera"; kubectl's dispatcher and the test
    // programs' own HTTP clients (cpp-httplib) say otherwise and are not the binaries'.
    if (fields[3] != "tessera") continue;
    Call call;
    call.line = line;
    if (ParseCall(fields[0], fields[1], fields[2] == "watch", &call)) calls.push_back(call);
  }
  return calls;
}

struct Rule {
  std::string source;  // "ClusterRole/x" or "Role/ns/x", for messages
  std::string ns;      // "" = cluster-wide (ClusterRoleBinding)
  std::vector<std::string> groups, resources, verbs, names;
};

std::vector<std::string> Strings(const YAML::Node& node) {
  std::vector<std::string> out;
  if (node && node.IsSequence()) {
    for (const auto& n : node) out.push_back(n.as<std::string>());
  }
  return out;
}

bool Has(const std::vector<std::string>& list, const std::string& value) {
  for (const auto& v : list) {
    if (v == value || v == "*") return true;
  }
  return false;
}

// Every RBAC object in deploy/, as `kubectl apply -k deploy/` puts them in
// kube-system (deploy/kustomization.yaml's namespace).
struct Rbac {
  std::map<std::string, std::vector<YAML::Node>> roles;  // "ClusterRole/x", "Role/x" -> rules
  std::vector<YAML::Node> bindings;
};

Rbac ReadDeploy(const std::string& dir) {
  Rbac rbac;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml" || entry.path().filename() == "kustomization.yaml") continue;
    for (const YAML::Node& doc : YAML::LoadAllFromFile(entry.path().string())) {
      if (!doc.IsMap() || !doc["kind"]) continue;
      std::string kind = doc["kind"].as<std::string>();
      if (kind == "ClusterRole" || kind == "Role") {
        std::vector<YAML::Node> rules;
        for (const auto& r : doc["rules"]) rules.push_back(r);
        rbac.roles[kind + "/" + doc["metadata"]["name"].as<std::string>()] = rules;
      } else if (kind == "ClusterRoleBinding" || kind == "RoleBinding") {
        rbac.bindings.push_back(doc);
      }
    }
  }
  return rbac;
}

constexpr const char* kNamespace = "kube-system";

// Roles bound to a ServiceAccount that deploy/ does not define: the stock roles
// of the kube-scheduler container, which shares tessera-scheduler's pod (and so
// its ServiceAccount). Neither tessera binary relies on them.
const std::set<std::string> kStockRoles = {"ClusterRole/system:kube-scheduler",
                                           "ClusterRole/system:volume-scheduler"};

// The rules of `role` ("ClusterRole/x" or "Role/x"), bound in `ns` ("" = cluster-wide).
std::vector<Rule> RulesOfRole(const Rbac& rbac, const std::string& role, const std::string& ns) {
  std::vector<Rule> rules;
  auto found = rbac.roles.find(role);
  if (found == rbac.roles.end()) return rules;
  for (const YAML::Node& r : found->second) {
    Rule rule;
    rule.source = role;
    rule.ns = ns;
    rule.groups = Strings(r["apiGroups"]);
    rule.resources = Strings(r["resources"]);
    rule.verbs = Strings(r["verbs"]);
    rule.names = Strings(r["resourceNames"]);
    rules.push_back(rule);
  }
  return rules;
}

std::vector<Rule> RulesOf(const Rbac& rbac, const std::string& account) {
  std::vector<Rule> rules;
  for (const YAML::Node& b : rbac.bindings) {
    bool bound = false;
    for (const auto& s : b["subjects"]) {
      if (s["kind"].as<std::string>() == "ServiceAccount" && s["name"].as<std::string>() == account)
        bound = true;
    }
    if (!bound) continue;
    std::string role = b["roleRef"]["kind"].as<std::string>() + "/" + b["roleRef"]["name"].as<std::string>();
    bool namespaced = b["kind"].as<std::string>() == "RoleBinding";
    auto found = rbac.roles.find(role);
    if (found == rbac.roles.end()) {
      EXPECT_TRUE(kStockRoles.count(role)) << account << " is bound to " << role << ", which deploy/ lacks";
      continue;
    }
    for (Rule& rule : RulesOfRole(rbac, role, namespaced ? kNamespace : "")) rules.push_back(std::move(rule));
  }
  return rules;
}

std::string ResourceOf(const Call& c) {
  return c.subresource.empty() ? c.resource : c.resource + "/" + c.subresource;
}

// The permission `verb resource` of `rule` as a string, e.g. "ClusterRole/x: patch nodes".
std::string Permission(const Rule& rule, const std::string& verb, const std::string& resource) {
  return rule.source + ": " + verb + " " + resource;
}

// Whether `rule` allows `call`; `used` collects the permissions it exercised.
bool Allows(const Rule& rule, const Call& call, const std::string& call_ns) {
  if (!rule.ns.empty() && rule.ns != call_ns) return false;
  if (!Has(rule.groups, call.group) || !Has(rule.verbs, call.verb) || !Has(rule.resources, ResourceOf(call)))
    return false;
  if (!rule.names.empty() && (call.name.empty() || !Has(rule.names, call.name))) return false;
  return true;
}

// Why `list` stays granted although the recorded scenarios only watch.
constexpr const char* kListFallback =
    "the informers start with a streaming list (a watch with sendInitialEvents, KEP-3157) and fall back "
    "to paginated lists on a server that refuses it (src/kube/informer.cc); the stand-in offers streaming "
    "lists, so the recorded scenarios never take the fallback that older API servers need";

// Unused permissions kept on purpose, with why the scenarios cannot show them.
// ("<account> <role>: <verb> <resource>" -> reason).
const std::map<std::string, std::string> kUnusedOnPurpose = {
    {"tessera-scheduler ClusterRole/tessera-scheduler: get pods",
     "Scheduler::GetPod asks the API only when its pod informer has not yet seen the pod (a race the "
     "scenarios "
     "hit in some runs and not in others)"},
    {"tessera-scheduler ClusterRole/tessera-scheduler: get nodes",
     "the dashboard's API probe (GET nodes/tessera-dashboard-probe, src/scheduler/scheduler.cc); the "
     "recorded "
     "scenarios run without the dashboard, whose fixed default port would collide between tests run side by "
     "side, and tests/integration/dashboard runs it against its own API server"},
    {"tessera-scheduler ClusterRole/tessera-scheduler: list nodes", kListFallback},
    {"tessera-node ClusterRole/tessera-node: list nodes", kListFallback},
    {"tessera-node ClusterRole/tessera-node: list pods", kListFallback},
    {"tessera-dra-enforcer ClusterRole/tessera-dra-enforcer: list pods", kListFallback},
};

// Whether `a` and `b` grant a verb on a resource (of an API group) in common.
bool ShareAPermission(const Rule& a, const Rule& b) {
  for (const auto& group : a.groups) {
    for (const auto& resource : a.resources) {
      if (!Has(b.groups, group) || !Has(b.resources, resource)) continue;
      for (const auto& verb : a.verbs) {
        if (Has(b.verbs, verb)) return true;
      }
    }
  }
  return false;
}

class RbacCallsTest : public ::testing::Test {
 protected:
  // `account`: a ServiceAccount, or "ClusterRole/<name>" for the rules of that role alone.
  // `others`: ServiceAccounts of binaries whose calls are in the same logs (the log
  // cannot tell two tessera binaries apart). Their rules must grant no permission
  // (verb on a resource) that `account`'s grant, so a call is theirs exactly when one
  // of their permissions covers it; those calls are left out here (checked in their
  // own right elsewhere).
  void Check(const std::vector<std::string>& logs, const std::string& account,
             const std::vector<std::string>& others = {}) {
    Rbac rbac = ReadDeploy(std::string(TESSERA_SOURCE_DIR) + "/deploy");
    std::vector<Rule> rules =
        account.rfind("ClusterRole/", 0) == 0 ? RulesOfRole(rbac, account, "") : RulesOf(rbac, account);
    ASSERT_FALSE(rules.empty()) << "no rules for " << account << " in deploy/";
    std::vector<Rule> others_rules;
    for (const std::string& other : others) {
      std::vector<Rule> theirs = RulesOf(rbac, other);
      ASSERT_FALSE(theirs.empty()) << "no rules for " << other << " in deploy/";
      for (const Rule& their : theirs) {
        for (const Rule& rule : rules) {
          ASSERT_FALSE(ShareAPermission(rule, their))
              << rule.source << " and " << their.source << " grant a verb on a resource in common: the "
              << "calls in the log can no longer be told apart";
        }
        others_rules.push_back(their);
      }
    }
    auto on_theirs = [&](const Call& call) {
      for (const Rule& their : others_rules) {
        if (Has(their.groups, call.group) && Has(their.resources, ResourceOf(call)) &&
            Has(their.verbs, call.verb)) {
          return true;
        }
      }
      return false;
    };
    std::set<std::string> used;
    size_t total = 0;
    for (const std::string& log : logs) {
      std::string file = std::string(TESSERA_SECURITY_CALL_DIR) + "/" + log;
      ASSERT_TRUE(fs::exists(file)) << file << " is missing: run `ctest -R security` (the security_record_* "
                                    << "tests record it)";
      std::vector<Call> calls = ReadCalls(file);
      std::erase_if(calls, on_theirs);
      EXPECT_FALSE(calls.empty()) << file << " records no call of " << account
                                  << ": the scenarios did not reach the API server";
      total += calls.size();
      for (const Call& call : calls) {
        bool allowed = false;
        for (const Rule& rule : rules) {
          if (Allows(rule, call, call.ns)) {
            allowed = true;
            used.insert(Permission(rule, call.verb, ResourceOf(call)));
          }
        }
        EXPECT_TRUE(allowed) << account << " may not " << call.verb << " " << ResourceOf(call)
                             << (call.group.empty() ? "" : "." + call.group)
                             << (call.ns.empty() ? "" : " in " + call.ns)
                             << (call.name.empty() ? "" : " (" + call.name + ")")
                             << " — recorded: " << call.line;
      }
    }
    std::cout << account << ": " << total << " calls, " << used.size() << " permissions used\n";
    for (const Rule& rule : rules) {
      for (const std::string& verb : rule.verbs) {
        for (const std::string& resource : rule.resources) {
          std::string permission = Permission(rule, verb, resource);
          if (used.count(permission)) continue;
          EXPECT_TRUE(kUnusedOnPurpose.count(account + " " + permission))
              << account << " is granted \"" << permission << "\" but no scenario used it: trim deploy/ or "
              << "list it in kUnusedOnPurpose with the reason";
        }
      }
    }
  }
};

TEST(RbacCallParsing, VerbsResourcesAndNamespacesAsRbacNamesThem) {
  Call c;
  ASSERT_TRUE(ParseCall("POST", "/api/v1/namespaces/ml/pods/train/binding", false, &c));
  EXPECT_EQ(c.verb, "create");
  EXPECT_EQ(ResourceOf(c), "pods/binding");
  EXPECT_EQ(c.ns, "ml");
  Call w;
  ASSERT_TRUE(ParseCall("GET", "/api/v1/pods", true, &w));
  EXPECT_EQ(w.verb, "watch");
  Call l;
  ASSERT_TRUE(ParseCall("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", false, &l));
  EXPECT_EQ(l.verb, "list");
  EXPECT_EQ(l.group, "coordination.k8s.io");
  Call n;
  EXPECT_FALSE(ParseCall("GET", "/healthz", false, &n));
  // A rule limited by name does not allow a list, nor another name.
  Rule r{"Role/x", "kube-system", {""}, {"secrets"}, {"get", "list"}, {"tls"}};
  Call get;
  ASSERT_TRUE(ParseCall("GET", "/api/v1/namespaces/kube-system/secrets/tls", false, &get));
  EXPECT_TRUE(Allows(r, get, "kube-system"));
  EXPECT_FALSE(Allows(r, get, "default"));
  Call other;
  ASSERT_TRUE(ParseCall("GET", "/api/v1/namespaces/kube-system/secrets/other", false, &other));
  EXPECT_FALSE(Allows(r, other, "kube-system"));
  Call list;
  ASSERT_TRUE(ParseCall("GET", "/api/v1/namespaces/kube-system/secrets", false, &list));
  EXPECT_FALSE(Allows(r, list, "kube-system"));
}

// tessera-scheduler and its init container `tessera webhook-certs` share the
// ServiceAccount tessera-scheduler.
TEST_F(RbacCallsTest, TheSchedulerAndItsInitContainerUseExactlyTheirRules) {
  Check({"scheduler.calls", "webhook-certs.calls"}, "tessera-scheduler");
}

TEST_F(RbacCallsTest, TheNodeAgentUsesExactlyItsRules) {
  Check({"node.calls", "node-mig.calls"}, "tessera-node");
}

// tessera-node in its enforcement-only role beside tessera-dra (deploy/dra/enforcer.yaml, the
// ServiceAccount tessera-dra-enforcer), recorded while dra_integration_test ran it as that
// manifest does: a process over its claim killed, the Event on its pod. tessera-dra made its
// calls to the same API server; they are on its permissions (slices, claims, its Node, a pod
// read by name), none of which the enforcer has.
TEST_F(RbacCallsTest, TheEnforcementOnlyNodeAgentBesideTesseraDraUsesExactlyItsRules) {
#ifndef TESSERA_RECORDS_DRA_ENFORCER
  GTEST_SKIP() << "tests/integration/dra is not built here: nothing recorded its calls";
#endif
  Check({"dra-enforcer.calls"}, "tessera-dra-enforcer", {"tessera-dra"});
}

// kubectl-tessera runs with the user's credentials; deploy/ offers the
// ClusterRole tessera-viewer to bind to those who may run it.
TEST_F(RbacCallsTest, KubectlTesseraNeedsOnlyTheViewerRole) {
  Check({"kubectl.calls"}, "ClusterRole/tessera-viewer");
}

}  // namespace
