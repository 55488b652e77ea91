// The `tessera` command as a user meets it: the built binary, run with
// arguments, its exit code, stdout and stderr. Covers the root help and
// version, and `tessera simulate` (usage errors exit 2 naming what is wrong;
// the --json schema; the metric on a trace small enough to work out by hand).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/testing.h"
#include "testing/process.h"

namespace {

using nlohmann::json;

using tessera::testing::Outcome;

class CliTest : public ::testing::Test {
 protected:
  // Runs the binary with `args` (no shell), stdout and stderr captured apart.
  Outcome Tessera(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {TESSERA_EXE};
    argv.insert(argv.end(), args.begin(), args.end());
    return tessera::testing::RunToEnd({.argv = argv}, dir_);
  }

  std::string Write(const std::string& name, const std::string& text) { return tmp_.Write(name, text); }

  // One node with two GPUs; two identical tasks of 0.6 GPU. Worked by hand:
  // capacity 2000 milli; the two tasks (1200) are inflated with copies of
  // 600 while the total stays ≤ 1.3 × 2000 = 2600: 1800, 2400 (3000 would pass).
  // Four arrivals; arrived demand reaches 100 % (2400 ≥ 2000) at the fourth.
  // Two 600s cannot share a 1000 GPU, so whatever the policy and seed, one
  // task per GPU is placed and the other two fail: allocated 1200 of 2000 →
  // unallocated 40 % at 100 % and at the end.
  void WriteTinyTrace() {
    nodes_ = Write("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nnode-a,64000,262144,2,T4\n");
    pods_ = Write("pods.csv",
                  "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                  "task-a,1000,1024,1,600,\n"
                  "task-b,1000,1024,1,600,\n");
  }
  std::vector<std::string> Simulate(std::vector<std::string> extra) {
    std::vector<std::string> args = {"simulate", "--nodes", nodes_, "--pods", pods_};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  tessera::testing::TempDir tmp_{"tessera-cli-test"};
  const std::string dir_ = tmp_.path();
  std::string nodes_;
  std::string pods_;
};

TEST_F(CliTest, VersionFlagAndCommandAgree) {
  Outcome command = Tessera({"version"});
  Outcome flag = Tessera({"--version"});
  EXPECT_EQ(command.exit_code, 0) << command.err;
  EXPECT_EQ(flag.exit_code, 0) << flag.err;
  EXPECT_EQ(command.out.rfind("tessera ", 0), 0u) << command.out;
  EXPECT_NE(command.out.find("revision"), std::string::npos) << command.out;
  EXPECT_EQ(flag.out, command.out);
}

// The subcommand names listed under "Subcommands:" in a help text, each
// checked to have a summary on the same line and nothing on following lines.
std::vector<std::string> ListedSubcommands(const std::string& help) {
  std::vector<std::string> names;
  std::istringstream in(help);
  std::string line;
  bool in_list = false;
  while (std::getline(in, line)) {
    if (line == "Subcommands:") {
      in_list = true;
      continue;
    }
    if (!in_list) continue;
    if (line.empty()) break;
    EXPECT_EQ(line.rfind("  ", 0), 0u) << "not a subcommand line: '" << line << "'";
    std::istringstream words(line);
    std::string name, summary_word;
    words >> name >> summary_word;
    EXPECT_FALSE(summary_word.empty()) << name << " has no summary";
    names.push_back(name);
  }
  return names;
}

TEST_F(CliTest, HelpTeachesAndListsEverySubcommandOnOneLine) {
  Outcome help = Tessera({"--help"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  const std::string& h = help.out;
  EXPECT_NE(h.find("tessera shares NVIDIA GPUs"), std::string::npos) << h;
  EXPECT_NE(h.find("tessera <command> --help"), std::string::npos) << h;
  EXPECT_NE(h.find("docs/"), std::string::npos) << h;
  EXPECT_NE(h.find("--version"), std::string::npos) << h;
  const std::vector<std::string> listed = ListedSubcommands(h);
  const std::set<std::string> expected = {"demo",     "run", "ps",      "smi",
                                          "simulate", "sim", "version", "webhook-certs"};
  EXPECT_EQ(std::set<std::string>(listed.begin(), listed.end()), expected) << h;
  EXPECT_EQ(listed.size(), expected.size()) << h;
  // simulate's long description is in its own help only.
  EXPECT_EQ(h.find("Tasks arrive one by one"), std::string::npos) << h;
  for (const std::string& name : listed) {
    Outcome sub = Tessera({name, "--help"});
    EXPECT_EQ(sub.exit_code, 0) << name << ": " << sub.err;
    EXPECT_NE(sub.out.find("Usage:"), std::string::npos) << name;
  }
  Outcome sim_help = Tessera({"sim", "--help"});
  std::vector<std::string> sim_listed = ListedSubcommands(sim_help.out);
  EXPECT_EQ(std::set<std::string>(sim_listed.begin(), sim_listed.end()),
            (std::set<std::string>{"status", "inject-xid", "reset", "mig", "mps"}));
}

TEST_F(CliTest, SimulateHelpExplainsTheMetricAndPolicyOptions) {
  Outcome help = Tessera({"simulate", "--help"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  for (const char* part :
       {"Tasks arrive one by one", "unallocated GPU %", "'tessera:KEY=VALUE,...'", "sig=N", "tol=N", "pack=W",
        "dw=0|1", "slots=0|1", "cov=F", "relearn=N", "prior=0|1", "fixed=0|1", "inner=0|1", "away=N",
        "order=K", "mem=0|1", "1.01 to 100", "pods_file"}) {
    EXPECT_NE(help.out.find(part), std::string::npos) << "simulate --help lacks '" << part << "'";
  }
  for (const char* part : {"strand=0..3", "strandw=W", "strandr=F"}) {
    EXPECT_NE(help.out.find(part), std::string::npos) << "simulate --help lacks '" << part << "'";
  }
}

TEST_F(CliTest, SimulateUsageErrorsExitTwoNamingTheProblem) {
  WriteTinyTrace();
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--policy", "tessera:sig=abc"}, "option sig: 'abc' is not a number"},
      {{"--policy", "tessera:prior=1,sig=abc"}, "option sig: 'abc' is not a number"},
      {{"--policy", "tessera:fixed=1,bogus=2"}, "unknown option 'bogus'"},
      {{"--policy", "tessera:cov=2"}, "option cov: '2' is out of range"},
      {{"--policy", "tessera:prior=1,fixed=1"}, "exclude each other"},
      {{"--policy", "fdg"}, "unknown policy 'fdg'"},
      {{"--seeds", "42-"}, "--seeds '42-': '42-' is not a range"},
      {{"--seeds", "a-b"}, "--seeds 'a-b': 'a-b' is not a range"},
      {{"--seeds", "51-42"}, "--seeds '51-42': range '51-42' ends before it starts"},
      {{"--seeds", ""}, "--seeds '': an empty seed"},
      {{"--tune", "0.9"}, "--tune 0.9: must be from 1.01 to 100"},
      {{"--tune", "1"}, "--tune 1: must be from 1.01 to 100"},
      {{"--tune", "abc"}, "--tune"},
  };
  for (const Case& c : cases) {
    Outcome r = Tessera(Simulate(c.args));
    std::string label = c.args[0] + " " + c.args[1];
    EXPECT_EQ(r.exit_code, 2) << label << "\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << label << ": stderr lacks '" << c.says << "':\n"
                                                     << r.err;
    EXPECT_TRUE(r.out.empty()) << label << ": " << r.out;
  }
  // The policy is checked before the trace files are read.
  Outcome early = Tessera({"simulate", "--nodes", "/nonexistent.csv", "--pods", "/nonexistent.csv",
                           "--policy", "tessera:sig=abc"});
  EXPECT_EQ(early.exit_code, 2);
  EXPECT_NE(early.err.find("option sig: 'abc' is not a number"), std::string::npos) << early.err;
  Outcome missing = Tessera({"simulate", "--nodes", nodes_, "--pods", dir_ + "/none.csv"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("none.csv: cannot open"), std::string::npos) << missing.err;
}

TEST_F(CliTest, SimulateJsonSchemaAndTheHandWorkedMetric) {
  WriteTinyTrace();
  for (const char* policy :
       {"random", "dotprod", "clustering", "packing", "bestfit", "fgd", "tessera", "tessera-online"}) {
    Outcome r = Tessera(Simulate({"--policy", policy, "--seeds", "42-44,50", "--json"}));
    ASSERT_EQ(r.exit_code, 0) << policy << ": " << r.err;
    json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << policy << ": not one JSON object: " << r.out;
    std::set<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
    EXPECT_EQ(keys, (std::set<std::string>{"policy", "pods", "pods_file", "nodes_file", "seeds", "tune",
                                           "unallocated_pct", "failed_tasks", "seconds"}))
        << r.out;
    EXPECT_EQ(j["policy"], policy);
    ASSERT_TRUE(j["pods"].is_number_integer()) << r.out;
    EXPECT_EQ(j["pods"].get<int>(), 2);  // tasks in the file
    EXPECT_EQ(j["pods_file"], pods_);
    EXPECT_EQ(j["nodes_file"], nodes_);
    EXPECT_EQ(j["seeds"], json({42, 43, 44, 50}));
    EXPECT_TRUE(j["tune"].is_number());
    EXPECT_DOUBLE_EQ(j["tune"].get<double>(), 1.3);
    ASSERT_TRUE(j["unallocated_pct"].is_object());
    EXPECT_EQ(j["unallocated_pct"].size(), 2u) << r.out;
    for (const char* point : {"100", "130"}) {
      const json& u = j["unallocated_pct"][point];
      ASSERT_TRUE(u.is_object()) << point << ": " << r.out;
      EXPECT_EQ(u.size(), 3u) << point;
      ASSERT_TRUE(u["mean"].is_number()) << point;
      ASSERT_TRUE(u["sd"].is_number()) << point;
      ASSERT_TRUE(u["per_seed"].is_array()) << point;
      ASSERT_EQ(u["per_seed"].size(), 4u) << point;
      // The hand-worked value (WriteTinyTrace): 40 % unallocated, every seed.
      EXPECT_DOUBLE_EQ(u["mean"].get<double>(), 40.0) << policy << " @" << point;
      EXPECT_DOUBLE_EQ(u["sd"].get<double>(), 0.0) << policy << " @" << point;
      for (const json& v : u["per_seed"]) EXPECT_DOUBLE_EQ(v.get<double>(), 40.0) << policy;
    }
    ASSERT_TRUE(j["failed_tasks"].is_object());
    EXPECT_EQ(j["failed_tasks"].size(), 1u);
    EXPECT_DOUBLE_EQ(j["failed_tasks"]["mean"].get<double>(), 2.0) << policy;
    EXPECT_TRUE(j["seconds"].is_number());
    EXPECT_GE(j["seconds"].get<double>(), 0.0);
  }
  // --tune names the second point.
  Outcome r = Tessera(Simulate({"--seeds", "42", "--tune", "1.5", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_TRUE(j["unallocated_pct"].contains("100"));
  EXPECT_TRUE(j["unallocated_pct"].contains("150"));
}

TEST_F(CliTest, SimulateTableIsReadable) {
  WriteTinyTrace();
  Outcome r = Tessera(Simulate({"--policy", "bestfit", "--seeds", "42,43"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("unalloc@100%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("unalloc@130%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("40.00%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("40.00 ± 0.00"), std::string::npos) << r.out;
}

}  // namespace
