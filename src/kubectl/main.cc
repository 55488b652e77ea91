// kubectl-tessera: the kubectl plugin. kubectl runs it for `kubectl tessera
// ...` with the arguments after "tessera" and its own environment (so
// KUBECONFIG reaches it); the flags kubectl users know (--kubeconfig,
// --context, -n, -A, --server, --request-timeout) are parsed here, as every
// plugin must. Exit codes: 0 shown, 1 the API server could not be read or the
// pod does not exist, 2 bad usage.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "base/command_line.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kubectl/cluster_view.h"
#include "kubectl/render.h"

namespace {

using tessera::kubectl::Json;

constexpr const char* kDescription =
    "kubectl tessera: what tessera has placed where, read from the API server (the Nodes' GPU inventory\n"
    "annotations and the Pods' allocation annotations, tessera's or HAMi's), the objects tessera-scheduler\n"
    "reads. Numbers are allocations against what each GPU offers; live use is in tessera-node's metrics.";

constexpr const char* kExamples =
    "Examples:\n"
    "  kubectl tessera top nodes                 GPUs, memory, cores and vGPUs allocated per node\n"
    "  kubectl tessera top gpus --node gpu-1     each GPU of gpu-1, how full it is, its MIG instances\n"
    "  kubectl tessera top pods -A               GPU pods of every namespace, their slices and status\n"
    "  kubectl tessera describe pod train -n ml  its slices (GPU, memory, cores, node) and why it is there\n"
    "                                            or, if pending, why no node fits it\n"
    "  kubectl tessera --context prod top nodes  another kubeconfig context\n"
    "\n"
    "INVENTORY (top nodes): ok; stale (the node agent's heartbeat is older than --stale-seconds, so\n"
    "tessera-scheduler places nothing there); none (no tessera-node publishes there); corrupt: why the\n"
    "annotation cannot be read. STATUS (top pods): placed; pending; unplaced (bound by another scheduler\n"
    "without a tessera allocation); corrupt: the allocation annotation cannot be read; mismatch: it names\n"
    "GPUs the node does not have.\n"
    "\n"
    "Exit status: 0 shown; 1 the API server could not be read, or no such pod; 2 bad usage.";

struct Flags {
  std::string kubeconfig;
  std::string context;
  std::string server;
  std::string ns;
  bool all_namespaces = false;
  int request_timeout_seconds = 10;
  int stale_seconds = 120;
  std::string scheduler_name = "tessera-scheduler";
};

int Fail(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return 1;
}

// kubectl's order: --kubeconfig, then $KUBECONFIG, then ~/.kube/config; the
// in-cluster service account only when none of them exists.
tessera::Result<tessera::kube::ClientConfig> Resolve(const Flags& flags) {
  tessera::kube::ResolveOptions options;
  options.kubeconfig = flags.kubeconfig;
  options.context = flags.context;
  options.api_server = flags.server;
  const char* env = std::getenv("KUBECONFIG");
  const char* home = std::getenv("HOME");
  if (options.kubeconfig.empty() && (env == nullptr || *env == '\0') && home != nullptr) {
    const std::string path = std::string(home) + "/.kube/config";
    if (std::filesystem::exists(path)) options.kubeconfig = path;
  }
  return tessera::kube::ResolveConfig(options);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{kDescription, "kubectl tessera"};
  app.footer(kExamples);
  app.require_subcommand(1);
  Flags flags;
  app.add_option("--kubeconfig", flags.kubeconfig,
                 "kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)");
  app.add_option("--context", flags.context, "kubeconfig context (default: its current-context)");
  app.add_option("-s,--server", flags.server, "API server URL, overriding the kubeconfig's");
  app.add_option("-n,--namespace", flags.ns, "namespace (default: the context's)");
  app.add_flag("-A,--all-namespaces", flags.all_namespaces, "top pods: every namespace");
  app.add_option("--request-timeout", flags.request_timeout_seconds, "seconds per API request")
      ->default_val(10)
      ->check(CLI::Range(1, 3600));
  app.add_option(
         "--stale-seconds", flags.stale_seconds,
         "a GPU inventory heartbeat older than this is stale (tessera-scheduler's inventoryStaleSeconds; "
         "0 = never)")
      ->default_val(120)
      ->check(CLI::Range(0, 86400 * 365));
  app.add_option("--scheduler-name", flags.scheduler_name, "the schedulerName tessera's webhook sets")
      ->default_val("tessera-scheduler");

  CLI::App* top = app.add_subcommand("top", "allocation per node, GPU or pod");
  top->require_subcommand(1);
  top->fallthrough();
  CLI::App* top_nodes = top->add_subcommand("nodes", "one line per node")->alias("node")->alias("no");
  CLI::App* top_gpus = top->add_subcommand("gpus", "one line per GPU")->alias("gpu");
  std::string gpu_node;
  top_gpus->add_option("--node", gpu_node, "only this node's GPUs");
  CLI::App* top_pods = top->add_subcommand("pods", "one line per GPU pod")->alias("pod")->alias("po");
  CLI::App* describe = app.add_subcommand("describe", "one object in detail");
  describe->require_subcommand(1);
  describe->fallthrough();
  CLI::App* describe_pod =
      describe
          ->add_subcommand("pod",
                           "a pod's slices (GPU, memory, cores, node), and why it is placed there or "
                           "pending")
          ->alias("pods")
          ->alias("po");
  std::string pod_name;
  describe_pod->add_option("NAME", pod_name, "the pod")->required();
  for (CLI::App* leaf : {top_nodes, top_gpus, top_pods, describe_pod}) leaf->fallthrough();

  if (const auto exit_code = tessera::ParseCommandLine(app, argc, argv)) return *exit_code;

  auto config = Resolve(flags);
  if (!config.ok()) return Fail("no API server to talk to: " + config.error().message);
  tessera::kube::ClientOptions client_options;
  client_options.timeout = std::chrono::seconds(flags.request_timeout_seconds);
  client_options.qps = 0;
  auto client = tessera::kube::MakeClient(*config, client_options);
  const std::string ns =
      flags.ns.empty() ? (config->namespace_.empty() ? "default" : config->namespace_) : flags.ns;
  const std::string where = config->server + " (" + config->source + ")";

  auto nodes = client->List(tessera::kube::resources::kNodes, "");
  if (!nodes.ok()) return Fail("cannot list nodes from " + where + ": " + nodes.error().message);
  auto pods = client->List(tessera::kube::resources::kPods, "");
  if (!pods.ok()) return Fail("cannot list pods from " + where + ": " + pods.error().message);

  tessera::kubectl::ViewOptions view_options;
  view_options.stale_after = std::chrono::seconds(flags.stale_seconds);
  const tessera::kubectl::ClusterView view =
      tessera::kubectl::BuildClusterView(std::move(nodes->items), std::move(pods->items), view_options);

  if (*top_nodes) {
    std::cout << tessera::kubectl::TopNodes(view);
  } else if (*top_gpus) {
    std::cout << tessera::kubectl::TopGpus(view, gpu_node);
  } else if (*top_pods) {
    std::cout << tessera::kubectl::TopPods(view, flags.all_namespaces ? "" : ns);
  } else if (*describe_pod) {
    const tessera::kubectl::PodView* pod = view.FindPod(ns, pod_name);
    if (pod == nullptr) return Fail("pods \"" + pod_name + "\" not found in namespace " + ns);
    tessera::kubectl::DescribeOptions options;
    options.scheduler_name = flags.scheduler_name;
    tessera::kube::ListOptions selector;
    selector.field_selector = "involvedObject.kind=Pod,involvedObject.name=" + pod_name;
    auto events = client->List(tessera::kube::resources::kEvents, ns, selector);
    if (events.ok()) {
      options.events = std::move(events->items);
    } else {
      options.events_error = events.error().message;
    }
    std::cout << tessera::kubectl::DescribePod(view, *pod, options);
  }
  return 0;
}
