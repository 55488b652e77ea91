// tessera-dra end to end (docs/dra.md): the binary on two simulated A100s
// publishes its ResourceSlices to the API-server stand-in and registers with
// the kubelet DRA stand-in; claims are allocated by the kube-scheduler
// stand-in (consumable capacity) and prepared through the kubelet's real gRPC
// calls; the CDI spec's edits are applied to vgpu_probe, a CUDA program, as a
// container runtime would (mounts become the host paths behind them), and
// libvgpu holds it to exactly the claim's share.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <httplib.h>
#include "apiserver/fake_apiserver.h"
#include "base/testing.h"
#include "core/inventory_codec.h"
#include "dra/scheduler_standin.h"
#include "dra/testing.h"
#include "host/nvml_inventory.h"
#include "kubelet_dra_standin.h"
#include "kubelet_standin.h"
#include "node/node_monitor.h"
#include "node/process_inspector.h"
#include "testing/ports.h"
#include "testing/process.h"
#include "testing/sim_gpu.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using namespace std::chrono_literals;
using testing::KubeletDraStandIn;
using testing::dra::DraSchedulerStandIn;

constexpr const char* kDriver = "gpu.tessera.io";
constexpr auto kWait = 30s;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> Words(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// The n-th output line of vgpu_probe for `op`, split into words.
std::vector<std::string> ProbeLine(const std::string& out, const std::string& op, int n = 0) {
  for (const auto& line : Lines(out)) {
    auto w = Words(line);
    if (!w.empty() && w[0] == op && n-- == 0) return w;
  }
  return {};
}

// Kills and reaps a process when the test leaves the scope, so a failed
// assertion leaves none behind; the test sets the pid to -1 once it reaped it.
struct Reaper {
  pid_t& pid;
  ~Reaper() {
    if (pid > 0) testing::KillAndWait(pid, SIGKILL);
  }
};

// Whether `pid` ended; its wait status goes to `status`.
bool Reaped(pid_t& pid, int& status) {
  if (::waitpid(pid, &status, WNOHANG) != pid) return false;
  pid = -1;
  return true;
}

class DraIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_.MakeDir("reg");
    tmp_.MakeDir("plugins");
    tmp_.MakeDir("lib");
    fs::create_symlink(TESSERA_VGPU_LIB, root_ + "/lib/libvgpu.so");
    ASSERT_TRUE(api_.Start().ok());
    ASSERT_TRUE(api_.CreateObject("nodes", {{"metadata", {{"name", "node-a"}}}}).ok());
    ASSERT_TRUE(api_.CreateObject("deviceclasses", GpuClass()).ok());
    testing::KubeletDraOptions options;
    options.registry_dir = root_ + "/reg";
    options.retry_initial = 100ms;
    kubelet_ = std::make_unique<KubeletDraStandIn>(options);
    ASSERT_TRUE(kubelet_->Start());
  }
  void TearDown() override {
    StopDra(SIGKILL);
    kubelet_->Stop();
    api_.Stop();
  }

  // The DeviceClass of deploy/dra, as `kubectl apply -k deploy/dra` creates it.
  static Json GpuClass(const std::string& name = "gpu.tessera.io") {
    for (const auto& doc :
         YAML::LoadAllFromFile(std::string(TESSERA_SOURCE_DIR) + "/deploy/dra/deviceclasses.yaml")) {
      Json object = ToJson(doc);
      if (object["metadata"]["name"] == name) return object;
    }
    ADD_FAILURE() << "deploy/dra/deviceclasses.yaml has no DeviceClass " << name;
    return Json();
  }
  static Json ToJson(const YAML::Node& node) {
    if (node.IsMap()) {
      Json out = Json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = ToJson(kv.second);
      return out;
    }
    if (node.IsSequence()) {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(ToJson(item));
      return out;
    }
    return node.as<std::string>();  // a DeviceClass holds strings only
  }

  std::vector<std::string> DraArgs() const {
    return {TESSERA_DRA_BINARY,
            "--node-name",
            "node-a",
            "--api-server",
            api_.url(),
            "--registry-dir",
            root_ + "/reg",
            "--plugins-dir",
            root_ + "/plugins",
            "--cdi-dir",
            root_ + "/cdi",
            "--region-host-dir",
            root_ + "/regions",
            "--libvgpu-host-path",
            root_ + "/lib/libvgpu.so",
            "--nvml-library",
            TESSERA_SIM_NVML,
            "--device-nodes=false",
            "--remove-slices-on-exit=true"};
  }

  void StartDra(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = DraArgs();
    args.insert(args.end(), extra.begin(), extra.end());
    dra_ = testing::SpawnOnSimGpu(sim_, {.argv = args, .stdout_path = log_, .stderr_path = log_});
    ASSERT_GE(dra_, 0);
  }
  // Stops the plugin; returns its exit code.
  int StopDra(int signal) {
    if (dra_ < 0) return -1;
    ::kill(dra_, signal);
    const int code = testing::ExitCode(testing::WaitStatus(dra_));
    dra_ = -1;
    return code;
  }
  std::string Log() const { return testing::ReadFileOrEmpty(log_); }

  std::vector<Json> Slices() const { return api_.ListObjects("resourceslices"); }

  void StartAndWaitForSlices(const std::vector<std::string>& extra = {}) {
    StartDra(extra);
    ASSERT_TRUE(kubelet_->WaitForPlugin(kDriver, kWait)) << Log();
    // The whole pool: as many slices as it says it has.
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          auto slices = Slices();
          return !slices.empty() &&
                 slices.size() == slices[0]["spec"]["pool"]["resourceSliceCount"].get<size_t>();
        },
        kWait))
        << Log();
  }

  Json Claim(const std::string& name, const std::string& memory, const std::string& cores,
             Json config = Json::array()) {
    Json claim = {
        {"metadata", {{"name", name}, {"namespace", "team"}}},
        {"spec",
         {{"devices",
           {{"requests",
             Json::array({{{"name", "gpu"},
                           {"exactly",
                            {{"deviceClassName", "gpu.tessera.io"},
                             {"capacity", {{"requests", {{"memory", memory}, {"cores", cores}}}}}}}}})},
            {"config", config}}}}}};
    auto created = api_.CreateObject("resourceclaims", claim);
    EXPECT_TRUE(created.ok());
    return created.ok() ? *created : Json();
  }

  // Allocates `name` for a pod on node-a, as kube-scheduler would.
  Json Schedule(const std::string& name) {
    DraSchedulerStandIn::Options options;
    options.api_url = api_.url();
    DraSchedulerStandIn scheduler(options);
    auto written = scheduler.ScheduleOnNode("team", {name}, "node-a", {"pod-" + name, "uid-pod-" + name});
    EXPECT_TRUE(written.ok()) << (written.ok() ? "" : written.error().message);
    return written.ok() ? written->at(0) : Json();
  }

  static testing::drav1::Claim Ref(const Json& claim) {
    return KubeletDraStandIn::MakeClaim("team", claim["metadata"]["name"], claim["metadata"]["uid"]);
  }

  std::vector<std::string> CdiSpecs() const {
    std::vector<std::string> out;
    if (!fs::exists(root_ + "/cdi")) return out;
    for (const auto& e : fs::directory_iterator(root_ + "/cdi")) out.push_back(e.path().filename());
    return out;
  }
  std::vector<std::string> Regions() const {
    std::vector<std::string> out;
    if (!fs::exists(root_ + "/regions")) return out;
    for (const auto& e : fs::directory_iterator(root_ + "/regions")) out.push_back(e.path().filename());
    return out;
  }

  // Runs vgpu_probe with `ops` as a container given the CDI device `cdi_id`
  // would run: the spec's environment, with the paths of its mounts resolved
  // to their host side (this test has no container runtime), and libvgpu
  // preloaded through the mounted /etc/ld.so.preload.
  testing::Outcome RunInContainer(const std::string& cdi_id, const std::vector<std::string>& ops) {
    const std::string name = cdi_id.substr(cdi_id.find('=') + 1);
    Json spec;
    for (const auto& file : CdiSpecs()) {
      Json s = Json::parse(testing::ReadFileOrEmpty(root_ + "/cdi/" + file));
      for (const auto& d : s["devices"]) {
        if (d["name"] == name) spec = s;
      }
    }
    EXPECT_FALSE(spec.is_null()) << "no CDI spec has device " << cdi_id;
    EXPECT_EQ(spec["kind"], "tessera.io/gpu");
    std::vector<std::pair<std::string, std::string>> mounts;  // container path -> host path
    for (const auto& m : spec["containerEdits"]["mounts"])
      mounts.emplace_back(m["containerPath"], m["hostPath"]);
    std::sort(mounts.begin(), mounts.end(), [](auto& a, auto& b) { return a.first.size() > b.first.size(); });
    auto resolve = [&](const std::string& path) {
      for (const auto& [container, host] : mounts) {
        if (path == container) return host;
        if (path.rfind(container + "/", 0) == 0) return host + path.substr(container.size());
      }
      return path;
    };
    std::string preload;
    std::map<std::string, std::string> env;
    for (const auto& e : spec["containerEdits"]["env"]) {
      const std::string entry = e;
      const size_t eq = entry.find('=');
      env[entry.substr(0, eq)] = resolve(entry.substr(eq + 1));
    }
    for (const auto& [container, host] : mounts) {
      if (container == "/etc/ld.so.preload") {
        std::string line = testing::ReadFileOrEmpty(host);
        line.erase(line.find_last_not_of("\n") + 1);
        preload = resolve(line);
      }
    }
    // A MIG claim's spec has no libvgpu (nor preload file): the GPU isolates it.
    std::vector<std::string> argv = {TESSERA_VGPU_PROBE};
    argv.insert(argv.end(), ops.begin(), ops.end());
    testing::Command c = testing::ContainerCommand(sim_, argv, env[contract_region_env_], preload);
    for (const auto& [k, v] : env) c.env[k] = v;
    return testing::RunToEnd(c, root_);
  }

  // A process in the "container" of the claim prepared as `uid`: a mount
  // namespace of its own with the claim's region directory bind-mounted at
  // view/ (where the CDI spec mounts it, /tmp/tessera in a cluster), running
  // vgpu_probe `ops` without libvgpu (it bypasses it), its output in `out`.
  // Returns its pid (-1 when it could not start); hold it in a Reaper.
  pid_t StartBypassInClaim(const std::string& uid, const std::string& ops, const std::string& out,
                           testing::Env env = {}) {
    tmp_.MakeDir("view");
    const std::string script = "mount --bind " + testing::ShellQuote(root_ + "/regions/" + uid) + " " +
                               testing::ShellQuote(root_ + "/view") + " && exec " +
                               testing::ShellQuote(TESSERA_VGPU_PROBE) + " " + ops + " > " +
                               testing::ShellQuote(out) + " 2>&1";
    return testing::SpawnOnSimGpu(
        sim_, {.argv = {"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script},
               .env = std::move(env)});
  }
  // tessera-node's command in deploy/dra/enforcer.yaml, the binary built here
  // in place of /usr/bin/tessera-node and `overrides` ("--flag" -> value)
  // replacing the manifest's value of a flag or added: the test's paths and
  // stand-ins in place of the node's.
  static std::vector<std::string> EnforcerArgs(std::map<std::string, std::string> overrides) {
    std::vector<std::string> args = {TESSERA_NODE_BINARY};
    for (const auto& doc :
         YAML::LoadAllFromFile(std::string(TESSERA_SOURCE_DIR) + "/deploy/dra/enforcer.yaml")) {
      if (!doc["kind"] || doc["kind"].as<std::string>() != "DaemonSet") continue;
      for (const auto& container : doc["spec"]["template"]["spec"]["containers"]) {
        if (container["name"].as<std::string>() != "tessera-node") continue;
        const auto command = container["command"];
        EXPECT_EQ(command[0].as<std::string>(), "/usr/bin/tessera-node");
        for (size_t i = 1; i < command.size(); ++i) {
          const std::string arg = command[i].as<std::string>();
          const size_t eq = arg.find('=');
          EXPECT_TRUE(arg.starts_with("--") && eq != std::string::npos) << "not --flag=value: " << arg;
          auto replaced = overrides.find(arg.substr(0, eq));
          if (replaced == overrides.end()) {
            args.push_back(arg);
          } else {
            args.push_back(replaced->first + "=" + replaced->second);
            overrides.erase(replaced);
          }
        }
      }
    }
    EXPECT_GT(args.size(), 1u) << "deploy/dra/enforcer.yaml has no tessera-node container with a command";
    for (const auto& [flag, value] : overrides) args.push_back(flag + "=" + value);
    return args;
  }

  // The value of the unlabelled series `name` on tessera-node's /metrics; -1
  // when it is absent or nothing answers.
  static double MetricValue(int port, const std::string& name) {
    httplib::Client http("127.0.0.1", port);
    http.set_connection_timeout(2);
    auto res = http.Get("/metrics");
    if (!res || res->status != 200) return -1;
    for (const auto& line : Lines(res->body)) {
      if (line.starts_with(name + " ")) return std::stod(line.substr(name.size() + 1));
    }
    return -1;
  }

  // The Events on pod `name` of namespace team.
  std::vector<Json> PodEvents(const std::string& name) const {
    std::vector<Json> events;
    for (auto& event : api_.ListObjects("events")) {
      if (event["involvedObject"].value("name", "") == name &&
          event["metadata"].value("namespace", "") == "team")
        events.push_back(std::move(event));
    }
    return events;
  }

  static bool MountNamespacesWork() {
    return testing::RunShell("unshare --mount --propagation private true").exit_code == 0;
  }

  testing::TempDir tmp_{"tdra"};  // short: unix socket paths are limited
  const std::string root_ = tmp_.path();
  const std::string log_ = root_ + "/dra.log";
  const std::string contract_region_env_ = "CUDA_DEVICE_MEMORY_SHARED_CACHE";
  testing::SimGpu sim_{.gpus = "2xA100-80GB", .state_dir = root_ + "/sim", .lib_dir = TESSERA_SIM_LIB_DIR};
  mutable testing::FakeApiServer api_;
  std::unique_ptr<KubeletDraStandIn> kubelet_;
  pid_t dra_ = -1;
};

TEST_F(DraIntegrationTest, RegistersAfterServingAndPublishesTheGpus) {
  StartAndWaitForSlices();
  auto attempts = kubelet_->attempts();
  ASSERT_FALSE(attempts.empty());
  EXPECT_TRUE(attempts[0].accepted) << attempts[0].rejection;
  EXPECT_EQ(attempts[0].info.name(), kDriver);
  EXPECT_EQ(attempts[0].chosen_service, KubeletDraStandIn::kServiceV1);
  EXPECT_EQ(attempts[0].info.supported_versions(1), KubeletDraStandIn::kServiceV1beta1);
  EXPECT_TRUE(attempts[0].dra_endpoint_was_serving) << "the DRA socket must serve before registration";
  EXPECT_EQ(attempts[0].socket_path, root_ + "/reg/gpu.tessera.io-reg.sock");

  auto slices = Slices();
  ASSERT_EQ(slices.size(), 1u);
  const Json& spec = slices[0]["spec"];
  EXPECT_EQ(spec["driver"], kDriver);
  EXPECT_EQ(spec["nodeName"], "node-a");
  EXPECT_EQ(spec["pool"]["name"], "node-a");
  EXPECT_EQ(spec["pool"]["resourceSliceCount"], 1);
  EXPECT_EQ(slices[0]["metadata"]["ownerReferences"][0]["kind"], "Node");
  ASSERT_EQ(spec["devices"].size(), 2u);
  const Json& gpu = spec["devices"][0];
  EXPECT_EQ(gpu["name"], "gpu-0");
  EXPECT_EQ(gpu["allowMultipleAllocations"], true);
  EXPECT_EQ(gpu["attributes"]["type"]["string"], "gpu");
  EXPECT_EQ(gpu["attributes"]["architecture"]["string"], "Ampere");
  EXPECT_EQ(gpu["attributes"]["index"]["int"], 0);
  EXPECT_EQ(gpu["attributes"]["cudaComputeCapability"]["version"], "8.0.0");
  EXPECT_TRUE(gpu["attributes"]["uuid"]["string"].get<std::string>().starts_with("GPU-"));
  EXPECT_TRUE(gpu["attributes"].contains("driverVersion"));
  EXPECT_TRUE(gpu["attributes"].contains("resource.kubernetes.io/pciBusID"));
  EXPECT_EQ(gpu["capacity"]["memory"]["value"], "80Gi");
  EXPECT_EQ(gpu["capacity"]["memory"]["requestPolicy"]["validRange"]["step"], "1Mi");
  EXPECT_EQ(gpu["capacity"]["cores"]["requestPolicy"]["validRange"]["max"], "100");

  // Configured removal on SIGTERM.
  EXPECT_EQ(StopDra(SIGTERM), 0) << Log();
  EXPECT_TRUE(Slices().empty());
  EXPECT_TRUE(kubelet_->WaitForNoPlugin(kDriver, kWait));
}

TEST_F(DraIntegrationTest, TwoClaimsShareAGpuEachHeldToItsShare) {
  StartAndWaitForSlices();
  const Json a = Claim("a", "10Gi", "30");
  const Json b = Claim("b", "20Gi", "20");
  const Json allocated_a = Schedule("a");
  const Json allocated_b = Schedule("b");
  const Json& result_a = allocated_a["status"]["allocation"]["devices"]["results"][0];
  const Json& result_b = allocated_b["status"]["allocation"]["devices"]["results"][0];
  ASSERT_EQ(result_a["device"], result_b["device"]) << "both shares fit one GPU";

  auto prepared = kubelet_->NodePrepareResources(kDriver, {Ref(a), Ref(b)});
  ASSERT_TRUE(prepared.status.ok()) << prepared.status.error_message();
  ASSERT_EQ(prepared.kubelet_error, "") << Log();
  const auto& devices_a = prepared.response.claims().at(a["metadata"]["uid"]).devices();
  ASSERT_EQ(devices_a.size(), 1);
  EXPECT_EQ(devices_a[0].pool_name(), "node-a");
  EXPECT_EQ(devices_a[0].share_id(), result_a["shareID"]);
  EXPECT_EQ(devices_a[0].request_names(0), "gpu");
  const std::string id_a = devices_a[0].cdi_device_ids(0);
  const std::string id_b = prepared.response.claims().at(b["metadata"]["uid"]).devices(0).cdi_device_ids(0);
  EXPECT_TRUE(id_a.starts_with("tessera.io/gpu=")) << id_a;

  // 10 GiB: the context (300 MiB) and 9000 MiB fit, 2000 MiB more do not.
  auto run_a = RunInContainer(id_a, {"init", "ctx:0", "meminfo", "alloc:9000", "alloc:2000", "alloc:500"});
  ASSERT_EQ(run_a.exit_code, 0) << run_a.out << run_a.err;
  EXPECT_EQ(ProbeLine(run_a.out, "meminfo").at(3), std::to_string(10240ull << 20)) << run_a.out;
  EXPECT_EQ(ProbeLine(run_a.out, "alloc", 0).at(1), "0") << run_a.out;
  EXPECT_NE(ProbeLine(run_a.out, "alloc", 1).at(1), "0") << "beyond 10 GiB is refused\n" << run_a.out;
  EXPECT_EQ(ProbeLine(run_a.out, "alloc", 2).at(1), "0") << run_a.out;

  auto run_b = RunInContainer(id_b, {"init", "ctx:0", "meminfo", "alloc:19000", "alloc:2000"});
  ASSERT_EQ(run_b.exit_code, 0) << run_b.out << run_b.err;
  EXPECT_EQ(ProbeLine(run_b.out, "meminfo").at(3), std::to_string(20480ull << 20)) << run_b.out;
  EXPECT_EQ(ProbeLine(run_b.out, "alloc", 0).at(1), "0") << run_b.out;
  EXPECT_NE(ProbeLine(run_b.out, "alloc", 1).at(1), "0") << run_b.out;

  // The claims' limits are files the container sees read-only.
  EXPECT_EQ(CdiSpecs().size(), 2u);
  auto unprepared = kubelet_->NodeUnprepareResources(kDriver, {Ref(a), Ref(b)});
  ASSERT_TRUE(unprepared.status.ok());
  EXPECT_EQ(unprepared.kubelet_error, "");
  EXPECT_TRUE(CdiSpecs().empty());
  EXPECT_TRUE(Regions().empty());
}

TEST_F(DraIntegrationTest, RestartedPluginAnswersTheSame) {
  StartAndWaitForSlices();
  const Json a = Claim("a", "10Gi", "30");
  Schedule("a");
  auto first = kubelet_->NodePrepareResources(kDriver, {Ref(a)});
  ASSERT_EQ(first.kubelet_error, "") << Log();
  const std::string id = first.response.claims().at(a["metadata"]["uid"]).devices(0).cdi_device_ids(0);

  StopDra(SIGKILL);
  const size_t attempts = kubelet_->attempts().size();
  StartDra();
  ASSERT_TRUE(kubelet_->WaitForAttempts(attempts + 1, kWait)) << Log();
  ASSERT_TRUE(kubelet_->WaitForPlugin(kDriver, kWait));
  auto again = kubelet_->NodePrepareResources(kDriver, {Ref(a)});
  ASSERT_EQ(again.kubelet_error, "") << Log();
  EXPECT_EQ(again.response.claims().at(a["metadata"]["uid"]).devices(0).cdi_device_ids(0), id);
  auto run = RunInContainer(id, {"init", "ctx:0", "meminfo"});
  EXPECT_EQ(ProbeLine(run.out, "meminfo").at(3), std::to_string(10240ull << 20)) << run.out << run.err;
  ASSERT_EQ(kubelet_->NodeUnprepareResources(kDriver, {Ref(a)}).kubelet_error, "");
  EXPECT_TRUE(CdiSpecs().empty());
  EXPECT_TRUE(Regions().empty());
}

TEST_F(DraIntegrationTest, LeftoversOfAnInterruptedPrepareAreRemovedAtStart) {
  // What a plugin killed between writing a claim's files and its checkpoint leaves.
  const std::string uid = "0badc0de-0000-4000-8000-000000000000";
  tmp_.MakeDir("cdi");
  tmp_.MakeDir("regions/" + uid);
  tmp_.MakeDir("regions/" + uid + ".limits");
  tmp_.Write("cdi/tessera.io-gpu_" + uid + ".json", "{}");
  tmp_.Write("cdi/other-vendor_x.json", "{}");
  StartAndWaitForSlices();
  EXPECT_EQ(CdiSpecs(), std::vector<std::string>{"other-vendor_x.json"}) << "other vendors' specs stay";
  EXPECT_TRUE(Regions().empty());
}

TEST_F(DraIntegrationTest, BadClaimsGetClearErrorsAndLeaveNothing) {
  StartAndWaitForSlices();
  // Malformed opaque configuration: the error reaches the kubelet's answer.
  const Json bad_config = Claim(
      "bad-config", "1Gi", "10",
      Json::array({{{"opaque",
                     {{"driver", kDriver},
                      {"parameters",
                       {{"apiVersion", "tessera.io/v1alpha1"}, {"kind", "GpuConfig"}, {"mode", "x"}}}}}}}));
  Schedule("bad-config");
  auto r = kubelet_->NodePrepareResources(kDriver, {Ref(bad_config)});
  EXPECT_NE(r.kubelet_error.find("unknown field 'mode'"), std::string::npos) << r.kubelet_error;

  // Allocations kube-scheduler would not write, written by hand: a device
  // this node does not have, and more memory than the GPU has.
  auto hand_allocated = [&](const std::string& name, const std::string& device, const std::string& memory) {
    Json claim = Claim(name, "1Gi", "10");
    claim["status"] = {
        {"allocation",
         {{"devices",
           {{"results", Json::array({{{"request", "gpu"},
                                      {"driver", kDriver},
                                      {"pool", "node-a"},
                                      {"device", device},
                                      {"shareID", "5e5e5e5e-0000-4000-8000-000000000000"},
                                      {"consumedCapacity", {{"memory", memory}, {"cores", "10"}}}}})}}}}}};
    httplib::Client http(api_.url());
    auto put = http.Put("/apis/resource.k8s.io/v1/namespaces/team/resourceclaims/" + name + "/status",
                        claim.dump(), "application/json");
    EXPECT_TRUE(put && put->status == 200) << (put ? put->body : "no answer");
    return claim;
  };
  const Json foreign = hand_allocated("foreign", "gpu-9", "1Gi");
  r = kubelet_->NodePrepareResources(kDriver, {Ref(foreign)});
  EXPECT_NE(r.kubelet_error.find("device 'gpu-9' of pool 'node-a' is not on this node (it has gpu-0, gpu-1)"),
            std::string::npos)
      << r.kubelet_error;
  const Json too_big = hand_allocated("too-big", "gpu-0", "100Gi");
  r = kubelet_->NodePrepareResources(kDriver, {Ref(too_big)});
  EXPECT_NE(r.kubelet_error.find("more than the GPU's 81920 MiB"), std::string::npos) << r.kubelet_error;

  // Deleted after allocation, before the kubelet prepares it.
  const Json gone = Claim("gone", "1Gi", "10");
  Schedule("gone");
  ASSERT_TRUE(api_.DeleteObject("resourceclaims", "team", "gone").ok());
  r = kubelet_->NodePrepareResources(kDriver, {Ref(gone)});
  EXPECT_NE(r.kubelet_error.find("does not exist"), std::string::npos) << r.kubelet_error;

  EXPECT_TRUE(CdiSpecs().empty());
  EXPECT_TRUE(Regions().empty());
}

// A pod of namespace team on node-a whose spec.resourceClaims name the claims
// directly; `containers` maps each container to the claims it references.
Json PodUsing(const std::string& name,
              const std::vector<std::pair<std::string, std::vector<std::string>>>& containers) {
  Json pod = dra::testing::PodUsingClaims("team", name, containers);
  pod["spec"]["nodeName"] = "node-a";
  return pod;
}

TEST_F(DraIntegrationTest, TwoClaimsForOneContainerAreRefusedInTwoContainersPrepared) {
  StartAndWaitForSlices();
  DraSchedulerStandIn::Options options;
  options.api_url = api_.url();
  DraSchedulerStandIn scheduler(options);
  // The kubelet prepares every claim of a pod in one call.
  auto prepare_pod = [&](const Json& pod) {
    std::vector<testing::drav1::Claim> refs;
    for (const auto& name : DraSchedulerStandIn::ClaimNamesOf(pod)) {
      refs.push_back(Ref(*api_.GetObject("resourceclaims", "team", name)));
    }
    return kubelet_->NodePrepareResources(kDriver, refs);
  };

  const Json a = Claim("a", "10Gi", "30");
  const Json b = Claim("b", "10Gi", "30");
  auto bad = api_.CreateObject("pods", PodUsing("both-in-one", {{"main", {"a", "b"}}}));
  ASSERT_TRUE(bad.ok());
  auto scheduled = scheduler.SchedulePod(*bad, "node-a");
  ASSERT_TRUE(scheduled.ok()) << scheduled.error().Describe();
  auto refused = prepare_pod(*bad);
  ASSERT_TRUE(refused.status.ok()) << refused.status.error_message();
  const std::string why =
      "pod team/both-in-one: container 'main' would get 2 claims of gpu.tessera.io (team/a, team/b), but a "
      "container may hold one";
  for (const Json& claim : {a, b}) {
    EXPECT_NE(refused.response.claims().at(claim["metadata"]["uid"]).error().find(why), std::string::npos)
        << refused.response.claims().at(claim["metadata"]["uid"]).error();
  }
  // What the kubelet puts in the pod's events.
  EXPECT_NE(refused.kubelet_error.find(why), std::string::npos) << refused.kubelet_error;
  EXPECT_TRUE(CdiSpecs().empty());
  EXPECT_TRUE(Regions().empty());
  EXPECT_TRUE(fs::is_empty(root_ + "/plugins/gpu.tessera.io/claims")) << "no checkpoint";

  // The pod goes; the same claims for a pod with a container each.
  ASSERT_TRUE(api_.DeleteObject("pods", "team", "both-in-one").ok());
  auto good = api_.CreateObject("pods", PodUsing("one-each", {{"first", {"a"}}, {"second", {"b"}}}));
  ASSERT_TRUE(good.ok());
  ASSERT_TRUE(scheduler.SchedulePod(*good, "node-a").ok());
  auto prepared = prepare_pod(*good);
  ASSERT_EQ(prepared.kubelet_error, "") << Log();
  EXPECT_EQ(CdiSpecs().size(), 2u);
  const std::string id_a = prepared.response.claims().at(a["metadata"]["uid"]).devices(0).cdi_device_ids(0);
  auto run = RunInContainer(id_a, {"init", "ctx:0", "meminfo"});
  EXPECT_EQ(ProbeLine(run.out, "meminfo").at(3), std::to_string(10240ull << 20)) << run.out << run.err;
  ASSERT_EQ(kubelet_->NodeUnprepareResources(kDriver, {Ref(a), Ref(b)}).kubelet_error, "");
  EXPECT_TRUE(CdiSpecs().empty());
  EXPECT_TRUE(Regions().empty());
}

TEST_F(DraIntegrationTest, MigPartitionIsMadeAtPrepareAndFreedAtUnprepare) {
  // GPU 0 with MIG mode on (an A100 turns it on only at a reset).
  sim_.config = "gpus:\n  - model: A100-80GB\n    mig: true\n  - model: A100-80GB\n";
  StartAndWaitForSlices({"--mig-gpus=0"});
  ASSERT_TRUE(api_.CreateObject("deviceclasses", GpuClass("mig.tessera.io")).ok());
  std::map<std::string, Json> devices;
  int counter_slices = 0;
  for (const auto& slice : Slices()) {
    if (slice["spec"].contains("sharedCounters")) ++counter_slices;
    for (const auto& d : slice["spec"].value("devices", Json::array())) devices[d["name"]] = d;
  }
  EXPECT_EQ(counter_slices, 1) << Log();
  EXPECT_EQ(devices.count("gpu-1"), 1u) << "the GPU without MIG stays whole";
  EXPECT_EQ(devices.count("gpu-0"), 0u);
  ASSERT_EQ(devices.count("gpu-0-mig-7g80gb-0-0"), 1u);

  auto claim = [&](const std::string& name, const std::string& profile) {
    Json c = {
        {"metadata", {{"name", name}, {"namespace", "team"}}},
        {"spec",
         {{"devices",
           {{"requests",
             Json::array(
                 {{{"name", "mig"},
                   {"exactly",
                    {{"deviceClassName", "mig.tessera.io"},
                     {"selectors",
                      Json::array({{{"cel",
                                     {{"expression", "device.attributes['gpu.tessera.io'].profile == '" +
                                                         profile + "'"}}}}})}}}}})}}}}}};
    auto created = api_.CreateObject("resourceclaims", c);
    EXPECT_TRUE(created.ok());
    return created.ok() ? *created : Json();
  };
  DraSchedulerStandIn::Options options;
  options.api_url = api_.url();
  DraSchedulerStandIn scheduler(options);
  const Json small = claim("small", "1g.10gb");
  const Json big = claim("big", "7g.80gb");
  auto allocated = scheduler.ScheduleOnNode("team", {"small"}, "node-a", {"p1", "u1"});
  ASSERT_TRUE(allocated.ok()) << allocated.error().message;
  const std::string device = allocated->at(0)["status"]["allocation"]["devices"]["results"][0]["device"];
  EXPECT_FALSE(scheduler.ScheduleOnNode("team", {"big"}, "node-a", {"p2", "u2"}).ok())
      << "the whole GPU's partition overlaps the 1g one: the counters refuse it";

  auto prepared = kubelet_->NodePrepareResources(kDriver, {Ref(small)});
  ASSERT_EQ(prepared.kubelet_error, "") << Log();
  const std::string id = prepared.response.claims().at(small["metadata"]["uid"]).devices(0).cdi_device_ids(0);
  auto run = RunInContainer(id, {"init", "ctx:0", "meminfo", "count"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;

  const std::string memory = devices.at(device)["capacity"]["memory"]["value"];  // "<n>Mi"
  const uint64_t mib = std::stoull(memory.substr(0, memory.size() - 2));
  EXPECT_EQ(ProbeLine(run.out, "meminfo").at(3), std::to_string(mib << 20)) << "the MIG instance's memory\n"
                                                                            << run.out;
  EXPECT_EQ(ProbeLine(run.out, "count").at(2), "1") << "only the instance is visible\n" << run.out;

  // Unprepared and released: the instance is gone, the whole GPU's partition fits.
  ASSERT_EQ(kubelet_->NodeUnprepareResources(kDriver, {Ref(small)}).kubelet_error, "");
  ASSERT_TRUE(api_.DeleteObject("resourceclaims", "team", "small").ok());
  auto whole = scheduler.ScheduleOnNode("team", {"big"}, "node-a", {"p2", "u2"});
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  auto prepared_big = kubelet_->NodePrepareResources(kDriver, {Ref(big)});
  ASSERT_EQ(prepared_big.kubelet_error, "") << "the 1g instance was destroyed\n" << Log();
  ASSERT_EQ(kubelet_->NodeUnprepareResources(kDriver, {Ref(big)}).kubelet_error, "");
  EXPECT_TRUE(CdiSpecs().empty());
  EXPECT_TRUE(Regions().empty());
}

TEST_F(DraIntegrationTest, AGpuWithACriticalXidLeavesTheSlice) {
  StartAndWaitForSlices();
  ASSERT_EQ(Slices()[0]["spec"]["devices"].size(), 2u);
  const int64_t generation = Slices()[0]["spec"]["pool"]["generation"];
  auto injected = testing::RunShell("TESSERA_SIM_STATE=" + root_ + "/sim " + TESSERA_CLI_BINARY +
                                    " sim inject-xid --gpu 1 --xid 79");
  ASSERT_EQ(injected.exit_code, 0) << injected.output;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        auto slices = Slices();
        return slices.size() == 1 && slices[0]["spec"]["devices"].size() == 1u;
      },
      kWait))
      << Log();
  const Json slice = Slices()[0];
  EXPECT_EQ(slice["spec"]["devices"][0]["name"], "gpu-0");
  EXPECT_GT(slice["spec"]["pool"]["generation"].get<int64_t>(), generation);
}

// Issue 16 item 4: tessera-node's enforcement of last resort knows DRA
// containers. A claim of 2 GiB is prepared by tessera-dra; in its "container"
// (a mount namespace with the claim's region directory mounted, as the CDI
// spec mounts it) a CUDA process that bypasses libvgpu takes 3000 MiB.
// tessera-node's monitor, in process with the simulated NVML, the real
// /proc inspector and --dra-region-dir on tessera-dra's root, ties it to the
// claim through the kubelet's PodResources CDI device, takes the limit from
// the claim's limits.json, kills it and records the Event on the pod.
TEST_F(DraIntegrationTest, TesseraNodeKillsAProcessBypassingLibvgpuInAClaimsContainer) {
  if (!MountNamespacesWork()) GTEST_SKIP() << "mount namespaces are not available here";
  StartAndWaitForSlices();
  const Json a = Claim("a", "2Gi", "30");
  Schedule("a");
  auto prepared = kubelet_->NodePrepareResources(kDriver, {Ref(a)});
  ASSERT_TRUE(prepared.status.ok()) << prepared.status.error_message();
  ASSERT_EQ(prepared.kubelet_error, "") << Log();
  const std::string uid = a["metadata"]["uid"];
  const std::string cdi_id = prepared.response.claims().at(uid).devices(0).cdi_device_ids(0);

  // The container: the claim's region at view/, a process without libvgpu.
  const std::string out = root_ + "/bypass.out";
  pid_t pid = StartBypassInClaim(uid, "init ctx:0 alloc:3000 hold", out);
  ASSERT_GT(pid, 0);
  Reaper reaper{pid};
  ASSERT_TRUE(testing::WaitFor(
      [&] { return testing::ReadFileOrEmpty(out).find("alloc 0") != std::string::npos; }, kWait))
      << testing::ReadFileOrEmpty(out);

  // tessera-node's monitor in its enforcement-only role beside tessera-dra.
  sim_.Export();
  auto library = host::NvmlLibrary::Load(TESSERA_SIM_NVML);
  ASSERT_TRUE(library.ok()) << library.error().message;
  const host::NvmlApi& api = (*library)->api();
  host::NvmlInventory inventory(api, std::move(library).value());
  auto gpus = inventory.Discover();
  ASSERT_TRUE(gpus.ok()) << gpus.error().message;
  node::DeviceState devices;
  devices.SetGpus(*gpus);
  node::RegionCatalog catalog(root_ + "/node-regions", "vgpu.region");
  class ClaimPodResources final : public node::PodResourcesSource {
   public:
    explicit ClaimPodResources(std::string cdi) : cdi_(std::move(cdi)) {}
    Result<std::vector<node::ContainerDevices>> List() override {
      return std::vector<node::ContainerDevices>{{"team", "pod-a", "main", "", {}, {cdi_}}};
    }

   private:
    const std::string cdi_;
  } pod_resources(cdi_id);
  node::ProcFsInspector inspector(root_ + "/view");
  node::EnforcementPolicy policy;
  policy.kill_by_default = true;
  node::Enforcer enforcer(policy, &inspector, nullptr);
  std::vector<std::string> events;
  node::MonitorOptions options;
  options.dra_region_dir = root_ + "/regions";
  node::NodeMonitor monitor(
      options, &inventory, &devices, &catalog, &pod_resources, nullptr, &inspector, &enforcer,
      [&](const node::ContainerRef& owner, const std::string& reason, const std::string& message) {
        events.push_back(owner.pod_namespace + "/" + owner.pod_name + "/" + owner.container_name + " " +
                         reason + ": " + message);
      });
  int status = 0;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        monitor.PassOnce();
        return Reaped(pid, status);
      },
      kWait))
      << testing::ReadFileOrEmpty(out);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_EQ(monitor.counters().kills, 1u);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].starts_with("team/pod-a/main GPUMemoryLimitKill: ")) << events[0];
  EXPECT_NE(events[0].find("over its limit of 2048 MiB (from its claim)"), std::string::npos) << events[0];
  // tessera-dra's directories are left to tessera-dra: unprepare removes them.
  EXPECT_TRUE(fs::exists(root_ + "/regions/" + uid));
  auto unprepared = kubelet_->NodeUnprepareResources(kDriver, {Ref(a)});
  ASSERT_TRUE(unprepared.status.ok());
  EXPECT_TRUE(Regions().empty());
}

// deploy/dra's tessera-dra-enforcer as a binary: tessera-node started with the
// command of deploy/dra/enforcer.yaml (--device-plugin=false, kills fixed on,
// ...), the host's paths and the stand-ins in place of a node's, beside the
// real tessera-dra. Two claims of 2 GiB on one GPU are prepared by tessera-dra
// through the kubelet DRA stand-in; the kubelet stand-in's PodResources lists
// pod-a's and pod-b's containers with their claims' CDI devices
// (dynamic_resources). In pod-a's container a process that bypasses libvgpu
// takes 3000 MiB, and says ACTIVE_OOM_KILLER=false: tessera-node kills it and
// records the Event on pod-a, the limit's source being the claim. In pod-b's
// a process takes 1000 MiB and is left alone for monitor passes after that
// kill; once it takes 2000 MiB more it is killed too, so it was seen and held
// to its claim all along, not missed.
TEST_F(DraIntegrationTest, DeployDrasEnforcerBinaryKillsOnlyTheProcessOverItsClaim) {
  if (!MountNamespacesWork()) GTEST_SKIP() << "mount namespaces are not available here";
  StartAndWaitForSlices();
  for (const char* name : {"a", "b"}) {
    Claim(name, "2Gi", "30");
    Schedule(name);
  }
  std::map<std::string, std::string> uid;     // claim -> UID
  std::map<std::string, std::string> cdi_id;  // claim -> its CDI device
  std::set<std::string> devices;              // the GPUs they got
  testing::KubeletStandIn pod_kubelet(root_ + "/dp", root_ + "/podres/kubelet.sock");
  tmp_.MakeDir("dp");
  ASSERT_TRUE(pod_kubelet.Start());
  for (const std::string name : {"a", "b"}) {
    const auto claim = api_.GetObject("resourceclaims", "team", name);
    ASSERT_TRUE(claim.has_value());
    uid[name] = (*claim)["metadata"]["uid"];
    auto prepared = kubelet_->NodePrepareResources(kDriver, {Ref(*claim)});
    ASSERT_TRUE(prepared.status.ok()) << prepared.status.error_message();
    ASSERT_EQ(prepared.kubelet_error, "") << Log();
    const auto& device = prepared.response.claims().at(uid[name]).devices(0);
    cdi_id[name] = device.cdi_device_ids(0);
    devices.insert(device.device_name());
    // The pod as the API holds it, and its container as the kubelet started it.
    Json pod = {
        {"metadata", {{"name", "pod-" + name}, {"namespace", "team"}}},
        {"spec",
         {{"nodeName", "node-a"},
          {"resourceClaims", {{{"name", "gpu"}, {"resourceClaimName", name}}}},
          {"containers",
           {{{"name", "main"}, {"image", "cuda"}, {"resources", {{"claims", {{{"name", "gpu"}}}}}}}}}}},
        {"status", {{"phase", "Running"}}}};
    ASSERT_TRUE(api_.CreateObject("pods", pod).ok());
    pod_kubelet.AdmitClaimContainer(
        "team", "pod-" + name, "main",
        {{"team", name, kDriver, device.pool_name(), device.device_name(), {cdi_id[name]}}});
  }
  EXPECT_EQ(devices.size(), 1u) << "both shares on one GPU: the enforcer tells them apart by claim";

  // The containers' processes, without libvgpu, before tessera-node starts.
  const std::string out_a = root_ + "/a.out", out_b = root_ + "/b.out", go_b = root_ + "/b.go";
  pid_t over =
      StartBypassInClaim(uid["a"], "init ctx:0 alloc:3000 hold", out_a, {{"ACTIVE_OOM_KILLER", "false"}});
  Reaper reap_over{over};
  pid_t within =
      StartBypassInClaim(uid["b"], "init ctx:0 alloc:1000 waitfile:" + go_b + " alloc:2000 hold", out_b);
  Reaper reap_within{within};
  ASSERT_GT(over, 0);
  ASSERT_GT(within, 0);
  for (const auto& out : {out_a, out_b}) {
    ASSERT_TRUE(testing::WaitFor(
        [&] { return testing::ReadFileOrEmpty(out).find("alloc 0") != std::string::npos; }, kWait))
        << testing::ReadFileOrEmpty(out);
  }

  // tessera-node as deploy/dra runs it.
  const int metrics_port = testing::FreePort();
  ASSERT_GT(metrics_port, 0);
  const std::string node_log = root_ + "/node.log";
  pid_t node = testing::SpawnOnSimGpu(
      sim_, {.argv = EnforcerArgs({{"--node-name", "node-a"},
                                   {"--api-server", api_.url()},
                                   {"--nvml-library", TESSERA_SIM_NVML},
                                   {"--pod-resources-socket", pod_kubelet.pod_resources_socket_path()},
                                   {"--dra-region-dir", root_ + "/regions"},
                                   {"--region-host-dir", root_ + "/node-regions"},
                                   {"--region-container-dir", root_ + "/view"},
                                   {"--plugin-dir", root_ + "/dp"},
                                   {"--metrics-address", "127.0.0.1"},
                                   {"--metrics-port", std::to_string(metrics_port)}}),
             .stdout_path = node_log,
             .stderr_path = node_log});
  ASSERT_GT(node, 0);
  Reaper reap_node{node};
  auto node_output = [&] { return testing::ReadFileOrEmpty(node_log); };

  // The process over its claim is killed, whatever its ACTIVE_OOM_KILLER says.
  int status = 0;
  ASSERT_TRUE(testing::WaitFor([&] { return Reaped(over, status); }, kWait)) << node_output();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  std::vector<Json> events_a;
  ASSERT_TRUE(testing::WaitFor([&] { return !(events_a = PodEvents("pod-a")).empty(); }, kWait))
      << node_output();
  ASSERT_EQ(events_a.size(), 1u) << Json(events_a).dump();
  EXPECT_EQ(events_a[0]["reason"], "GPUMemoryLimitKill");
  EXPECT_EQ(events_a[0]["involvedObject"]["kind"], "Pod");
  EXPECT_EQ(events_a[0]["involvedObject"]["fieldPath"], "spec.containers{main}");
  EXPECT_EQ(events_a[0]["source"]["component"], "tessera-node");
  EXPECT_NE(events_a[0]["message"].get<std::string>().find("over its limit of 2048 MiB (from its claim)"),
            std::string::npos)
      << events_a[0]["message"];

  // The one within its claim is left alone: two more full passes, still there.
  const double passes = MetricValue(metrics_port, "tessera_node_monitor_passes_total");
  ASSERT_GE(passes, 0) << node_output();
  ASSERT_TRUE(testing::WaitFor(
      [&] { return MetricValue(metrics_port, "tessera_node_monitor_passes_total") >= passes + 2; }, kWait))
      << node_output();
  EXPECT_FALSE(Reaped(within, status)) << testing::ReadFileOrEmpty(out_b);
  EXPECT_TRUE(PodEvents("pod-b").empty()) << Json(PodEvents("pod-b")).dump();
  EXPECT_EQ(MetricValue(metrics_port, "tessera_node_enforcement_kills_total"), 1) << node_output();

  // It was watched all along: past its claim's 2 GiB it goes the same way.
  tmp_.Write("b.go", "");
  ASSERT_TRUE(testing::WaitFor([&] { return Reaped(within, status); }, kWait)) << node_output();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_NE(testing::ReadFileOrEmpty(out_b).find("alloc 0"), std::string::npos);
  std::vector<Json> events_b;
  ASSERT_TRUE(testing::WaitFor([&] { return !(events_b = PodEvents("pod-b")).empty(); }, kWait))
      << node_output();
  EXPECT_NE(events_b[0]["message"].get<std::string>().find("over its limit of 2048 MiB (from its claim)"),
            std::string::npos)
      << events_b[0]["message"];

  // It advertised nothing, and tessera-dra's directories are left to tessera-dra.
  for (const auto& entry : fs::directory_iterator(root_ + "/dp")) {
    EXPECT_EQ(entry.path().filename(), "kubelet.sock") << "no device plugin socket";
  }
  EXPECT_TRUE(pod_kubelet.registrations().empty());
  const Json node_object = *api_.GetObject("nodes", "", "node-a");
  EXPECT_FALSE(node_object.value("/metadata/annotations"_json_pointer, Json::object())
                   .contains(std::string(core::kInventoryAnnotation)))
      << node_object.dump();
  EXPECT_TRUE(fs::exists(root_ + "/regions/" + uid["a"]) && fs::exists(root_ + "/regions/" + uid["b"]));
  ::kill(node, SIGTERM);
  EXPECT_EQ(testing::ExitCode(testing::WaitStatus(node)), 0) << node_output();
  node = -1;
  for (const std::string name : {"a", "b"}) {
    auto claim = api_.GetObject("resourceclaims", "team", name);
    ASSERT_TRUE(kubelet_->NodeUnprepareResources(kDriver, {Ref(*claim)}).status.ok());
  }
  EXPECT_TRUE(Regions().empty());
  pod_kubelet.Stop();
}

}  // namespace
}  // namespace tessera
