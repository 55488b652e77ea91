// `tessera simulate`: replays the Alibaba GPU-sharing trace benchmark
// (bench/trace) with one scheduling policy over several seeds.
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
#include "trace/trace.h"

namespace tessera::cli {
namespace {

// "42-51", "42,43", "42", or a mix ("40-42,50").
Result<std::vector<uint64_t>> ParseSeeds(const std::string& text) {
  std::vector<uint64_t> seeds;
  auto bad = [&](const std::string& why) {
    return Error{"--seeds '" + text + "': " + why + " (examples: 42-51, 42,43, 42)"};
  };
  auto number = [](const std::string& s, uint64_t& out) {
    if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return false;
    out = std::stoull(s);
    return true;
  };
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t dash = part.find('-');
    uint64_t lo = 0;
    uint64_t hi = 0;
    if (dash == std::string::npos) {
      if (!number(part, lo)) return bad("'" + part + "' is not a seed");
      hi = lo;
    } else {
      if (!number(part.substr(0, dash), lo) || !number(part.substr(dash + 1), hi)) {
        return bad("'" + part + "' is not a range");
      }
      if (hi < lo) return bad("range '" + part + "' ends before it starts");
      if (hi - lo >= 10000) return bad("range '" + part + "' is too long");
    }
    for (uint64_t s = lo; s <= hi; ++s) seeds.push_back(s);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (seeds.empty()) return bad("no seeds");
  return seeds;
}

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
  auto seeds = ParseSeeds(o.seeds);
  if (!seeds) return fail(seeds.error().message);
  if (!(o.tune > 0 && o.tune <= 100)) return fail("--tune must be a positive factor, e.g. 1.3");
  trace::Cluster cluster;
  auto nodes = trace::LoadNodes(o.nodes);
  if (!nodes) return fail(nodes.error().message);
  auto tasks = trace::LoadTasks(o.pods);
  if (!tasks) return fail(tasks.error().message);
  cluster.nodes = std::move(*nodes);
  cluster.tasks = std::move(*tasks);
  if (cluster.capacity_milli() == 0) return fail(o.nodes + ": the nodes have no GPUs");
  if (!trace::MakeTracePolicy(o.policy, cluster.tasks)) {
    return fail(trace::MakeTracePolicy(o.policy, cluster.tasks).error().message);
  }

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
  const std::string end_key = std::to_string(static_cast<int>(std::lround(o.tune * 100)));

  if (o.json) {
    auto finite_or_null = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
    nlohmann::json per100 = nlohmann::json::array();
    nlohmann::json per_end = nlohmann::json::array();
    for (double v : at100) per100.push_back(finite_or_null(v));
    for (double v : at_end) per_end.push_back(finite_or_null(v));
    nlohmann::json j;
    j["policy"] = o.policy;
    j["pods"] = o.pods;
    j["seeds"] = *seeds;
    j["unallocated_pct"]["100"] = {
        {"mean", finite_or_null(s100.mean)}, {"sd", finite_or_null(s100.sd)}, {"per_seed", per100}};
    j["unallocated_pct"][end_key] = {
        {"mean", finite_or_null(s_end.mean)}, {"sd", finite_or_null(s_end.sd)}, {"per_seed", per_end}};
    j["failed_tasks"] = {{"mean", s_failed.mean}};
    j["seconds"] = seconds;
    std::cout << j.dump() << "\n";
    return 0;
  }

  std::printf("policy %s  pods %s  (%zu tasks, %zu nodes, %lld GPUs)\n", o.policy.c_str(), o.pods.c_str(),
              cluster.tasks.size(), cluster.nodes.size(),
              static_cast<long long>(cluster.capacity_milli() / 1000));
  std::printf("%8s %16s %16s %10s %8s\n", "seed", "unalloc@100%", ("unalloc@" + end_key + "%").c_str(),
              "arrivals", "failed");
  for (const auto& r : *results) {
    std::printf("%8llu %15.2f%% %15.2f%% %10d %8d\n", static_cast<unsigned long long>(r.seed),
                r.result.unallocated_at_100, r.result.unallocated_at_end, r.result.arrivals, r.result.failed);
  }
  std::printf("%8s %9.2f ± %4.2f %9.2f ± %4.2f %10s %8.1f\n", "mean", s100.mean, s100.sd, s_end.mean,
              s_end.sd, "", s_failed.mean);
  std::printf("(%.1f s)\n", seconds);
  return 0;
}

const CommandRegistration kSimulate{
    {"simulate", 50, [](CLI::App& root) {
       auto options = std::make_shared<Options>();
       auto* cmd = root.add_subcommand(
           "simulate",
           "Replay the Alibaba GPU-sharing trace benchmark with a scheduling policy.\n"
           "\n"
           "Tasks arrive one by one on an empty cluster and are placed at once or fail\n"
           "for good. The metric is the unallocated GPU %: the share of the cluster's\n"
           "GPU capacity left unallocated once the arrived demand reaches 100 % of\n"
           "capacity (and again at the end, --tune × capacity). Lower is better: it is\n"
           "GPU lost to fragmentation. Each seed shuffles the tasks and the node\n"
           "tie-break ranks; results are the mean ± sd over the seeds.\n"
           "\n"
           "Example:\n"
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
              "(learns the mix from arrivals only)")
           ->capture_default_str();
       cmd->add_option("--seeds", options->seeds, "Seeds: 42-51, 42,43 or 42")->capture_default_str();
       cmd->add_option("--tune", options->tune, "Inflate (or trim) the GPU demand to this factor of capacity")
           ->capture_default_str();
       cmd->add_flag("--json", options->json, "Print one JSON object instead of a table");
       cmd->callback([options] { SetExitCode(Run(*options)); });
     }}};

}  // namespace
}  // namespace tessera::cli
