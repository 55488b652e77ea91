// `tessera simulate`: replays the Alibaba GPU-sharing trace benchmark
// (src/trace) with one scheduling policy over several seeds.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "trace/baselines.h"
#include "trace/replay.h"
#include "trace/run_options.h"
#include "trace/trace.h"

namespace tessera::cli {
namespace {

struct Options {
  std::string nodes;
  std::string pods;
  std::string policy = "tessera";
  std::string seeds = "42-51";
  double tune = 1.3;
  bool json = false;
};

int Run(const Options& o) {
  auto fail = [](const std::string& message) {
    std::cerr << "tessera simulate: " << message << "\n";
    return 2;
  };
  auto seeds = trace::ParseSeeds(o.seeds);
  if (!seeds) return fail(seeds.error().message);
  if (Status tune = trace::CheckTune(o.tune); !tune) return fail(tune.error().message);
  // The policy's name and options are checked before the (large) files are read.
  if (auto policy = trace::MakeTracePolicy(o.policy, {}); !policy) return fail(policy.error().message);
  trace::Cluster cluster;
  auto nodes = trace::LoadNodes(o.nodes);
  if (!nodes) return fail(nodes.error().message);
  auto tasks = trace::LoadTasks(o.pods);
  if (!tasks) return fail(tasks.error().message);
  cluster.nodes = std::move(*nodes);
  cluster.tasks = std::move(*tasks);
  if (cluster.capacity_milli() == 0) return fail(o.nodes + ": the nodes have no GPUs");

  auto started = std::chrono::steady_clock::now();
  auto results = trace::Simulate(cluster, o.policy, *seeds, o.tune);
  if (!results) return fail(results.error().message);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  std::vector<double> at100;
  std::vector<double> at_end;
  std::vector<double> failed;
  for (const auto& r : *results) {
    at100.push_back(r.result.unallocated_at_100);
    at_end.push_back(r.result.unallocated_at_end);
    failed.push_back(r.result.failed);
  }
  auto s100 = trace::Summarise(at100);
  auto s_end = trace::Summarise(at_end);
  auto s_failed = trace::Summarise(failed);
  const std::string end_key = trace::EndPointKey(o.tune);
  // Only a tiny trace can end (or be trimmed) below 100 % of capacity.
  if (!std::isfinite(s100.mean)) {
    std::cerr
        << "tessera simulate: warning: the arrived demand never reached 100 % of capacity in some seed; "
           "the 100 % figure is null (n/a)\n";
  }

  if (o.json) {
    auto finite_or_null = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
    nlohmann::json per100 = nlohmann::json::array();
    nlohmann::json per_end = nlohmann::json::array();
    for (double v : at100) per100.push_back(finite_or_null(v));
    for (double v : at_end) per_end.push_back(finite_or_null(v));
    nlohmann::json j;
    j["policy"] = o.policy;
    j["pods"] = cluster.tasks.size();  // tasks in the trace file (before inflation to --tune)
    j["pods_file"] = o.pods;
    j["nodes_file"] = o.nodes;
    j["seeds"] = *seeds;
    j["tune"] = o.tune;
    j["unallocated_pct"]["100"] = {
        {"mean", finite_or_null(s100.mean)}, {"sd", finite_or_null(s100.sd)}, {"per_seed", per100}};
    j["unallocated_pct"][end_key] = {
        {"mean", finite_or_null(s_end.mean)}, {"sd", finite_or_null(s_end.sd)}, {"per_seed", per_end}};
    j["failed_tasks"] = {{"mean", s_failed.mean}};
    j["seconds"] = seconds;
    std::cout << j.dump() << "\n";
    return 0;
  }

  // NaN (the arrived demand never reached 100 %) prints as n/a.
  auto pct = [](double v) {
    char buf[32];
    if (std::isfinite(v)) {
      std::snprintf(buf, sizeof(buf), "%.2f%%", v);
    } else {
      std::snprintf(buf, sizeof(buf), "n/a");
    }
    return std::string(buf);
  };
  auto mean_sd = [](const trace::Summary& s) {
    char buf[48];
    if (std::isfinite(s.mean)) {
      std::snprintf(buf, sizeof(buf), "%.2f ± %.2f", s.mean, s.sd);
    } else {
      std::snprintf(buf, sizeof(buf), "n/a");
    }
    return std::string(buf);
  };
  std::printf("policy %s  pods %s  (%zu tasks, %zu nodes, %lld GPUs)\n", o.policy.c_str(), o.pods.c_str(),
              cluster.tasks.size(), cluster.nodes.size(),
              static_cast<long long>(cluster.capacity_milli() / 1000));
  std::printf("%8s %16s %16s %10s %8s\n", "seed", "unalloc@100%", ("unalloc@" + end_key + "%").c_str(),
              "arrivals", "failed");
  for (const auto& r : *results) {
    std::printf("%8llu %16s %16s %10d %8d\n", static_cast<unsigned long long>(r.seed),
                pct(r.result.unallocated_at_100).c_str(), pct(r.result.unallocated_at_end).c_str(),
                r.result.arrivals, r.result.failed);
  }
  std::printf("%8s %16s %16s %10s %8.1f\n", "mean", mean_sd(s100).c_str(), mean_sd(s_end).c_str(), "",
              s_failed.mean);
  std::printf("(%.1f s)\n", seconds);
  return 0;
}

const CommandRegistration kSimulate{
    {"simulate", 50, [](CLI::App& root) {
       auto options = std::make_shared<Options>();
       auto* cmd = root.add_subcommand(
           "simulate", "Replay the Alibaba GPU-sharing trace benchmark with a scheduling policy");
       cmd->footer(
           "\nTasks arrive one by one on an empty cluster and are placed at once or fail for good. The\n"
           "metric is the unallocated GPU %: the share of the cluster's GPU capacity left unallocated\n"
           "once the arrived demand reaches 100 % of capacity, and again at the end (--tune x capacity).\n"
           "Lower is better: it is GPU lost to fragmentation. Each seed shuffles the tasks and the node\n"
           "tie-break ranks; results are the mean +- sd over the seeds. Exit code 2 on a usage error.\n"
           "\n"
           "Experiment variants of the default policy (docs/placement.md): --policy 'tessera:KEY=VALUE,...'\n"
           "  sig=N      sigma scale of FGD's bands (default 1000; 0 = no sigmoid bands)\n"
           "  tol=N      with sig=0: linear bands of this width (0 = exact growth)\n"
           "  pack=W     add W x node utilisation after placement (default 0)\n"
           "  dw=0|1     weight shapes by their GPU demand\n"
           "  slots=0|1  a shape's fragment: the free share repeated tasks of it could not use\n"
           "  cov=F      the typical shapes cover this share of pods, 0 < F <= 1 (default 0.95)\n"
           "  relearn=N  recompute the mix every N arrivals (default 512)\n"
           "  prior=0|1  start the mix from the trace's task counts (as --policy tessera does; without\n"
           "             prior=1 or fixed=1 a variant learns from arrivals only, as tessera-online)\n"
           "  fixed=0|1  use the trace's typical tasks only, learn nothing (not with prior=1)\n"
           "  inner=0|1  inside a node, break band ties by exact growth (default 1)\n"
           "  away=N     CPU-only pods keep away from free GPU, weight N (default 1; 0 = off)\n"
           "  order=K    break ties by a node property, K in -4..4 (0 = off)\n"
           "  mem=0|1    count host memory when checking whether a shape fits\n"
           "  hole=0..2  band ties: a share pod leaving a hole no shape fits loses (2: a full GPU gains)\n"
           "  whole=0..7 band ties: a GPU pod breaking an entirely idle node loses (variants: docs)\n"
           "  wholew=W   the bias whole= subtracts (default 0.3; 1 or more moves the node down bands)\n"
           "  strand=0..3 a pod leaving the node's usable free GPU shorter of the CPU the mix needs for\n"
           "             it loses strandw (default 1; 0 = off, the policy before; 2, 3: variants, docs)\n"
           "  strandw=W  the bias strand= subtracts (default 100: behind every other node; < 1: ties)\n"
           "  strandr=F  factor on the CPU per milli-GPU strand= reserves (default 1)\n"
           "Every option is checked; an unknown key or a bad value is an error naming it.\n"
           "\n"
           "JSON (--json): {\"policy\", \"pods\" (tasks in the file), \"pods_file\", \"nodes_file\",\n"
           "\"seeds\": [...], \"tune\", \"unallocated_pct\": {\"100\": {\"mean\", \"sd\", \"per_seed\": "
           "[...]},\n"
           "\"130\": {...}}, \"failed_tasks\": {\"mean\"}, \"seconds\"}; the second key is --tune in "
           "percent.\n"
           "\n"
           "Example (data: ../shared/data/alibaba-gpu-2023 beside the repository):\n"
           "  tessera simulate --nodes openb_node_list_gpu_node.csv \\\n"
           "                   --pods openb_pod_list_default.csv --policy fgd --seeds 42-51\n");
       cmd->add_option("--nodes", options->nodes, "Node CSV (sn,cpu_milli,memory_mib,gpu,model)")->required();
       cmd->add_option("--pods", options->pods,
                       "Task CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...])")
           ->required();
       cmd->add_option(
              "--policy", options->policy,
              "random, dotprod, clustering, packing, bestfit, fgd (the paper's baselines), tessera (the "
              "default: its mix starts from the trace's task counts, as FGD's does) or tessera-online "
              "(learns the mix from arrivals only); node-binpack, node-spread, gpu-binpack, gpu-spread (the "
              "scheduler's and tessera run's policies, docs/placement.md); 'tessera:KEY=VALUE,...' for "
              "experiment variants (below)")
           ->capture_default_str();
       cmd->add_option("--seeds", options->seeds, "Seeds: 42-51, 42,43, 42 or a mix (40-42,50)")
           ->capture_default_str();
       cmd->add_option(
              "--tune", options->tune,
              "Inflate (or trim) the arrived GPU demand to this factor of capacity, 1.01 to 100 (the "
              "headline figure is read at 100 %, so it must go past 1)")
           ->capture_default_str();
       cmd->add_flag("--json", options->json, "Print one JSON object instead of a table");
       cmd->callback([options] { SetExitCode(Run(*options)); });
     }}};

}  // namespace
}  // namespace tessera::cli
