// dra_bench: tessera-dra's costs on one node with 8 GPUs (docs/benchmarks.md,
// "DRA").
//
//  - prepare / unprepare latency per claim: the kubelet DRA stand-in calls the
//    plugin over its real unix socket (gRPC), the plugin reads the claim from
//    the API-server stand-in over HTTP (twice: before writing and before
//    committing) and writes region, limits file, CDI spec and checkpoint
//    (each fsync'ed and renamed) on the local disk; one claim per call, as a
//    kubelet does for a pod with one claim;
//  - the same with 8 claims in one call;
//  - ResourceSlice publication for 8 GPUs: building the devices and the first
//    Sync (create), a resync with nothing changed (list only), and a change
//    (a GPU gone: update with the generation bumped); then the same 8 GPUs
//    published as MIG partitions (mig_partitions.h).
//
//   dra_bench [claims=200] [rounds=50]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "apiserver/fake_apiserver.h"
#include "base/log.h"
#include "base/testing.h"
#include "bench/latency_summary.h"
#include "dra/dra_plugin.h"
#include "dra/resource_slices.h"
#include "kube/config.h"
#include "kubelet_dra_standin.h"

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using tessera::testing::KubeletDraStandIn;
namespace dra = tessera::dra;

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

std::vector<tessera::core::Gpu> EightGpus() {
  std::vector<tessera::core::Gpu> gpus;
  for (int i = 0; i < 8; ++i) {
    tessera::core::Gpu g;
    g.index = i;
    char uuid[64];
    std::snprintf(uuid, sizeof(uuid), "GPU-%08d-0000-4000-8000-000000000000", i);
    g.uuid = uuid;
    g.model = "NVIDIA A100-SXM4-80GB";
    g.memory_mib = 81920;
    gpus.push_back(g);
  }
  return gpus;
}

std::string Uid(int i) {
  char uid[64];
  std::snprintf(uid, sizeof(uid), "%08d-0000-4000-8000-000000000000", i);
  return uid;
}

}  // namespace

int main(int argc, char** argv) {
  const int claims = argc > 1 ? std::atoi(argv[1]) : 200;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 50;
  tessera::log::SetLevel(tessera::log::Level::kError);
  tessera::testing::TempDir tmp("tdrab");
  tessera::testing::FakeApiServer api;
  if (!api.Start().ok()) return 1;
  (void)api.CreateObject("nodes", {{"metadata", {{"name", "node-a"}}}});
  tessera::kube::ClientConfig client_config;
  client_config.server = api.url();
  tessera::kube::ClientOptions client_options;
  client_options.qps = 0;  // no client-side rate limit: measure the path, not the limiter
  std::shared_ptr<tessera::kube::Client> client = tessera::kube::MakeClient(client_config, client_options);

  // Claims allocated as kube-scheduler writes them: 1Gi and 1 core each,
  // spread over the 8 GPUs.
  const auto gpus = EightGpus();
  for (int i = 0; i < claims; ++i) {
    Json claim = {{"metadata", {{"namespace", "team"}, {"name", "claim-" + std::to_string(i)}}},
                  {"spec", {{"devices", {{"requests", Json::array()}}}}}};
    auto created = client->Create(dra::resources::kResourceClaims, "team", claim);
    if (!created.ok()) return 1;
    Json allocated = *created;
    allocated["status"]["allocation"]["devices"]["results"] =
        Json::array({{{"request", "gpu"},
                      {"driver", "gpu.tessera.io"},
                      {"pool", "node-a"},
                      {"device", "gpu-" + std::to_string(i % 8)},
                      {"shareID", Uid(1000000 + i)},
                      {"consumedCapacity", {{"memory", "1Gi"}, {"cores", "1"}}}}});
    if (!client->UpdateStatus(dra::resources::kResourceClaims, "team", allocated).ok()) return 1;
  }

  dra::DraConfig config;
  config.node_name = "node-a";
  config.registry_dir = tmp.MakeDir("reg");
  config.plugins_dir = tmp.MakeDir("plugins");
  config.cdi_dir = tmp.Path("cdi");
  config.region_host_dir = tmp.Path("regions");
  config.device_nodes = false;
  dra::PreparerDeps deps;
  deps.read_claim = [client](const std::string& ns,
                             const std::string& name) -> tessera::Result<std::optional<Json>> {
    auto claim = client->Get(dra::resources::kResourceClaims, ns, name);
    if (claim.ok()) return std::optional<Json>(std::move(*claim));
    if (claim.error().IsNotFound()) return std::optional<Json>();
    return tessera::Error{claim.error().message};
  };
  deps.gpus = [gpus] { return gpus; };
  dra::ClaimPreparer preparer(config, deps);
  if (!preparer.Recover().ok()) return 1;
  dra::DraPlugin plugin(config, preparer);
  if (!plugin.Start().ok()) return 1;
  tessera::testing::KubeletDraOptions kubelet_options;
  kubelet_options.registry_dir = config.registry_dir;
  KubeletDraStandIn kubelet(kubelet_options);
  kubelet.Start();
  if (!kubelet.WaitForPlugin("gpu.tessera.io", std::chrono::seconds(30))) return 1;

  auto ref = [&](int i) {
    std::string uid;
    auto got = client->Get(dra::resources::kResourceClaims, "team", "claim-" + std::to_string(i));
    if (got.ok()) uid = tessera::kube::UidOf(*got);
    return KubeletDraStandIn::MakeClaim("team", "claim-" + std::to_string(i), uid);
  };
  std::vector<tessera::testing::drav1::Claim> refs;
  for (int i = 0; i < claims; ++i) refs.push_back(ref(i));

  std::vector<double> prepare, unprepare, batch_prepare, batch_unprepare;
  for (int i = 0; i < claims; ++i) {
    auto start = Clock::now();
    auto r = kubelet.NodePrepareResources("gpu.tessera.io", {refs[i]});
    prepare.push_back(Ms(start));
    if (!r.kubelet_error.empty()) {
      std::fprintf(stderr, "prepare failed: %s\n", r.kubelet_error.c_str());
      return 1;
    }
  }
  for (int i = 0; i < claims; ++i) {
    auto start = Clock::now();
    auto r = kubelet.NodeUnprepareResources("gpu.tessera.io", {refs[i]});
    unprepare.push_back(Ms(start));
    if (!r.kubelet_error.empty()) return 1;
  }
  for (int i = 0; i + 8 <= claims; i += 8) {
    std::vector<tessera::testing::drav1::Claim> eight(refs.begin() + i, refs.begin() + i + 8);
    auto start = Clock::now();
    auto r = kubelet.NodePrepareResources("gpu.tessera.io", eight);
    batch_prepare.push_back(Ms(start));
    if (!r.kubelet_error.empty()) return 1;
    start = Clock::now();
    kubelet.NodeUnprepareResources("gpu.tessera.io", eight);
    batch_unprepare.push_back(Ms(start));
  }
  std::printf("prepare, 1 claim per call (%d claims): %s\n", claims,
              tessera::bench::LatencySummary(prepare).c_str());
  std::printf("unprepare, 1 claim per call: %s\n", tessera::bench::LatencySummary(unprepare).c_str());
  std::printf("prepare, 8 claims per call (%zu calls): %s\n", batch_prepare.size(),
              tessera::bench::LatencySummary(batch_prepare).c_str());
  std::printf("unprepare, 8 claims per call: %s\n", tessera::bench::LatencySummary(batch_unprepare).c_str());

  // ResourceSlice publication for the 8 GPUs.
  dra::SystemDetails details;
  details.driver_version = "550.54.15";
  details.cuda_driver_version = "12.4";
  std::vector<double> build, first, resync, change;
  dra::SlicePublisher publisher(config, client);
  for (int round = 0; round < rounds; ++round) {
    auto start = Clock::now();
    auto devices = dra::BuildDevices(config, gpus, details);
    build.push_back(Ms(start));
    if (!devices.ok()) return 1;
    start = Clock::now();
    if (!publisher.Sync(*devices).ok()) return 1;
    first.push_back(Ms(start));
    start = Clock::now();
    auto none = publisher.Sync(*devices);
    resync.push_back(Ms(start));
    if (!none.ok() || *none != 0) return 1;
    auto fewer = *devices;
    fewer.pop_back();
    start = Clock::now();
    if (!publisher.Sync(fewer).ok()) return 1;
    change.push_back(Ms(start));
    if (!publisher.RemoveAll().ok()) return 1;
  }
  std::printf("slices, 8 GPUs: build devices: %s\n", tessera::bench::LatencySummary(build).c_str());
  std::printf("slices, 8 GPUs: first publication (create): %s\n",
              tessera::bench::LatencySummary(first).c_str());
  std::printf("slices, 8 GPUs: resync, unchanged (list only): %s\n",
              tessera::bench::LatencySummary(resync).c_str());
  std::printf("slices, 8 GPUs: a GPU gone (update): %s\n", tessera::bench::LatencySummary(change).c_str());

  // The same 8 GPUs as MIG partitions (every A100-80GB profile at every
  // placement, with one counter set per GPU).
  std::vector<dra::MigGpu> mig;
  for (const auto& g : gpus) mig.push_back({g.index, g.uuid, tessera::core::mig::FindModel("A100-80GB")});
  std::vector<double> mig_build, mig_first, mig_resync, mig_change;
  size_t mig_devices = 0, mig_slices = 0;
  for (int round = 0; round < rounds; ++round) {
    auto start = Clock::now();
    auto pool = dra::BuildPool(config, gpus, details, mig);
    mig_build.push_back(Ms(start));
    if (!pool.ok()) return 1;
    mig_devices = pool->devices.size();
    mig_slices = dra::BuildResourceSlices(config, *pool, 1).size();
    start = Clock::now();
    if (!publisher.Sync(*pool).ok()) return 1;
    mig_first.push_back(Ms(start));
    start = Clock::now();
    auto none = publisher.Sync(*pool);
    mig_resync.push_back(Ms(start));
    if (!none.ok() || *none != 0) return 1;
    auto unhealthy = gpus;
    unhealthy[7].healthy = false;  // its partitions leave the pool
    auto fewer = dra::BuildPool(config, unhealthy, details, mig);
    start = Clock::now();
    if (!publisher.Sync(*fewer).ok()) return 1;
    mig_change.push_back(Ms(start));
    if (!publisher.RemoveAll().ok()) return 1;
  }
  std::printf("slices, 8 MIG GPUs (%zu devices, %zu slices): build pool: %s\n", mig_devices, mig_slices,
              tessera::bench::LatencySummary(mig_build).c_str());
  std::printf("slices, 8 MIG GPUs: first publication (create): %s\n",
              tessera::bench::LatencySummary(mig_first).c_str());
  std::printf("slices, 8 MIG GPUs: resync, unchanged (list only): %s\n",
              tessera::bench::LatencySummary(mig_resync).c_str());
  std::printf("slices, 8 MIG GPUs: a GPU gone (updates, a slice fewer or rewritten): %s\n",
              tessera::bench::LatencySummary(mig_change).c_str());
  kubelet.Stop();
  plugin.Stop();
  api.Stop();
  return 0;
}
