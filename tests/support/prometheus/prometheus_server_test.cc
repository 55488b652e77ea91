// The Prometheus fixture against a real Prometheus: it scrapes a document written by the
// PrometheusText (base/prometheus_text.h) from a small HTTP endpoint, and the series come back with
// exactly the labels and values that were written.
#include "prometheus/prometheus_server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <thread>

#include "base/prometheus_text.h"

namespace tessera::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr auto kWait = 60s;  // generous: CI machines have two cores and other work

// A /metrics endpoint on a free port of 127.0.0.1 serving whatever `render` returns.
class MetricsEndpoint {
 public:
  explicit MetricsEndpoint(std::function<std::string()> render) : render_(std::move(render)) {
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
      std::string body;
      {
        std::lock_guard<std::mutex> lock(mu_);
        body = render_();
      }
      response.set_content(body, std::string(PrometheusText::kContentType).c_str());
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the loop runs would be lost and the join would hang.
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (port_ > 0 && !server_.is_running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
  }
  ~MetricsEndpoint() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  std::mutex mu_;
  std::function<std::string()> render_;  // guarded by mu_
  httplib::Server server_;
  int port_ = -1;
  std::thread thread_;
};

// A PromQL string literal: double-quoted, with Go's escapes for '\', '"' and newline.
std::string PromQLString(const std::string& value) {
  std::string out = "\"";
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

// The value of the series of `result` whose label `name` is `value`, or "" if none.
std::string ValueWhere(const json& result, const std::string& name, const std::string& value) {
  for (const json& series : result) {
    if (series["metric"].value(name, "") == value) return series["value"][1].get<std::string>();
  }
  return "";
}

class PrometheusServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PrometheusServer::Available()) GTEST_SKIP() << PrometheusServer::NotAvailableMessage();
  }

  std::unique_ptr<PrometheusServer> StartPrometheus(std::vector<ScrapeTarget> targets) {
    PrometheusOptions options;
    options.targets = std::move(targets);
    auto started = PrometheusServer::Start(options);
    EXPECT_TRUE(started.ok()) << started.error().message;
    return started.ok() ? std::move(started).value() : nullptr;
  }
};

// A container name that needs every escape of the text format, and non-ASCII text.
const std::string kAwkwardContainer = "app \"main\" \\ C:\\tmp\nsecond line, caf\xc3\xa9 {x=1}";

std::string NodeAgentLikeDocument() {
  PrometheusText text;
  text.Describe("tessera_test_container_memory_used_bytes", MetricType::kGauge,
                "Device memory in use, in bytes.\nSecond line \\ of help.");
  text.Describe("tessera_test_container_oom_refusals_total", MetricType::kCounter, "Allocations refused.");
  text.Describe("tessera_test_container_gpu_utilization_ratio", MetricType::kGauge, "Share of GPU time.");
  const double used[] = {9007199254740992.0, 85899345920.0, 0};  // 2^53, 80 GiB, 0
  const double utilization[] = {0.1, std::numeric_limits<double>::quiet_NaN(),
                                std::numeric_limits<double>::infinity()};
  for (int i = 0; i < 3; ++i) {  // per container, all of its metrics: interleaved families
    const MetricLabels labels = {{"namespace", "ml"},
                                 {"pod", "train-" + std::to_string(i)},
                                 {"container", kAwkwardContainer},
                                 {"uuid", "GPU-" + std::to_string(i)}};
    text.Add("tessera_test_container_gpu_utilization_ratio", labels, utilization[i]);
    text.Add("tessera_test_container_memory_used_bytes", labels, used[i]);
    text.Add("tessera_test_container_oom_refusals_total", labels, 1e6 + i);
  }
  return text.Render();
}

TEST_F(PrometheusServerTest, ScrapesAPrometheusTextDocumentAndQueriesItBackExactly) {
  MetricsEndpoint endpoint(NodeAgentLikeDocument);
  auto prometheus = StartPrometheus({{.address = endpoint.address()}});
  ASSERT_NE(prometheus, nullptr);

  json result;
  ASSERT_TRUE(
      prometheus->WaitForSeries("tessera_test_container_memory_used_bytes{pod=\"train-0\",container=" +
                                    PromQLString(kAwkwardContainer) + "}",
                                kWait, &result))
      << prometheus->Diagnostics();
  ASSERT_EQ(result.size(), 1u) << result.dump(2);
  EXPECT_EQ(result[0]["metric"], json({{"__name__", "tessera_test_container_memory_used_bytes"},
                                       {"namespace", "ml"},
                                       {"pod", "train-0"},
                                       {"container", kAwkwardContainer},
                                       {"uuid", "GPU-0"},
                                       {"job", "tessera"},
                                       {"instance", endpoint.address()}}))
      << result.dump(2);
  EXPECT_EQ(result[0]["value"][1], "9007199254740992");

  // One scrape carries the whole document: every family, every container.
  auto memory = prometheus->Query("tessera_test_container_memory_used_bytes");
  ASSERT_TRUE(memory.ok()) << memory.error().message;
  ASSERT_EQ(memory->size(), 3u) << memory->dump(2);
  EXPECT_EQ(ValueWhere(*memory, "pod", "train-1"), "85899345920");
  EXPECT_EQ(ValueWhere(*memory, "pod", "train-2"), "0");

  auto utilization = prometheus->Query("tessera_test_container_gpu_utilization_ratio");
  ASSERT_TRUE(utilization.ok()) << utilization.error().message;
  ASSERT_EQ(utilization->size(), 3u) << utilization->dump(2);
  EXPECT_EQ(ValueWhere(*utilization, "pod", "train-0"), "0.1");
  EXPECT_EQ(ValueWhere(*utilization, "pod", "train-1"), "NaN");
  EXPECT_EQ(ValueWhere(*utilization, "pod", "train-2"), "+Inf");

  auto refusals = prometheus->Query("tessera_test_container_oom_refusals_total{uuid=\"GPU-2\"}");
  ASSERT_TRUE(refusals.ok()) << refusals.error().message;
  ASSERT_EQ(refusals->size(), 1u) << refusals->dump(2);
  EXPECT_EQ((*refusals)[0]["value"][1], "1000002");

  auto targets = prometheus->Targets();
  ASSERT_TRUE(targets.ok()) << targets.error().message;
  ASSERT_EQ(targets->size(), 1u) << targets->dump(2);
  EXPECT_EQ((*targets)[0]["health"], "up") << targets->dump(2);
  EXPECT_EQ((*targets)[0]["lastError"], "") << targets->dump(2);
  EXPECT_EQ((*targets)[0]["scrapeUrl"], "http://" + endpoint.address() + "/metrics");
}

TEST_F(PrometheusServerTest, TargetsExplainAScrapeThatFails) {
  // A port nobody listens on (the endpoint is gone before Prometheus starts).
  std::string dead_address;
  {
    MetricsEndpoint gone([] { return std::string(); });
    dead_address = gone.address();
  }
  auto prometheus = StartPrometheus({{.address = dead_address, .job = "dead"}});
  ASSERT_NE(prometheus, nullptr);

  json up;
  ASSERT_TRUE(prometheus->WaitForSeries("up{job=\"dead\"}", kWait, &up)) << prometheus->Diagnostics();
  EXPECT_EQ(up[0]["value"][1], "0");

  auto targets = prometheus->Targets();
  ASSERT_TRUE(targets.ok()) << targets.error().message;
  ASSERT_EQ(targets->size(), 1u) << targets->dump(2);
  EXPECT_EQ((*targets)[0]["health"], "down");
  EXPECT_NE((*targets)[0]["lastError"], "");
  const std::string diagnostics = prometheus->Diagnostics();
  EXPECT_NE(diagnostics.find("health down"), std::string::npos) << diagnostics;
  EXPECT_NE(diagnostics.find(dead_address), std::string::npos) << diagnostics;
}

TEST_F(PrometheusServerTest, QueryErrorsCarryPrometheusText) {
  auto prometheus = StartPrometheus({});
  ASSERT_NE(prometheus, nullptr);

  auto malformed = prometheus->Query("sum(");
  ASSERT_FALSE(malformed.ok());
  EXPECT_NE(malformed.error().message.find("bad_data"), std::string::npos) << malformed.error().message;
  EXPECT_NE(malformed.error().message.find("parse error"), std::string::npos) << malformed.error().message;

  // A malformed query ends the wait at once; a series that never comes ends it at the timeout.
  EXPECT_FALSE(prometheus->WaitForSeries("sum(", kWait, nullptr));
  EXPECT_NE(prometheus->Diagnostics().find("parse error"), std::string::npos) << prometheus->Diagnostics();
  EXPECT_FALSE(prometheus->WaitForSeries("tessera_test_never_exported", 1s, nullptr));
  EXPECT_NE(prometheus->Diagnostics().find("no series for tessera_test_never_exported"), std::string::npos)
      << prometheus->Diagnostics();

  auto empty = prometheus->Query("tessera_test_never_exported");
  ASSERT_TRUE(empty.ok()) << empty.error().message;
  EXPECT_EQ(*empty, json::array());
}

TEST_F(PrometheusServerTest, StopEndsTheProcessAndTheDestructorRemovesItsDirectory) {
  auto prometheus = StartPrometheus({});
  ASSERT_NE(prometheus, nullptr);
  const pid_t pid = prometheus->pid();
  const std::string dir = prometheus->dir();
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(prometheus->Running());
  EXPECT_TRUE(std::filesystem::exists(prometheus->stderr_path()));

  prometheus->Stop();
  EXPECT_FALSE(prometheus->Running());
  EXPECT_EQ(::kill(pid, 0), -1);  // reaped: not even a zombie is left
  EXPECT_EQ(errno, ESRCH);
  EXPECT_NE(prometheus->Diagnostics().find("exited with status 0"), std::string::npos)
      << prometheus->Diagnostics();
  prometheus->Stop();  // idempotent

  prometheus.reset();
  EXPECT_FALSE(std::filesystem::exists(dir));
}

// Waits for `pid`, an orphan that the kernel hands to this process (a child subreaper),
// to end, and reaps it so that no zombie is left behind. False if it is still alive at
// `deadline`.
bool ReapOrphan(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return true;
    // ECHILD: not handed over yet (its parent is still being torn down), or already gone.
    if (r < 0 && errno == ECHILD && ::kill(pid, 0) != 0 && errno == ESRCH) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
}

TEST_F(PrometheusServerTest, DiesWithTheProcessThatStartedIt) {
  // Orphans come to this process instead of PID 1, which in a container may never reap them.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  struct SubreaperOff {
    ~SubreaperOff() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
  } subreaper_off;
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  // The child starts Prometheus and is then killed the way a crashing test would be.
  // This test starts no thread of its own, so forking without exec is safe here.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(report[0]);
    PrometheusOptions options;
    auto started = PrometheusServer::Start(options);
    if (!started.ok()) ::_exit(1);
    const std::string message = std::to_string((*started)->pid()) + " " + (*started)->dir() + "\n";
    if (::write(report[1], message.data(), message.size()) != static_cast<ssize_t>(message.size()))
      ::_exit(1);
    while (true) ::pause();
  }
  ::close(report[1]);
  std::string message;
  char buf[512];
  ssize_t n;
  while ((n = ::read(report[0], buf, sizeof(buf))) > 0) {
    message.append(buf, static_cast<std::size_t>(n));
    if (message.find('\n') != std::string::npos) break;
  }
  ::close(report[0]);
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_NE(message.find(' '), std::string::npos) << "the child could not start prometheus";

  const pid_t prometheus_pid = std::stoi(message.substr(0, message.find(' ')));
  const std::string dir = message.substr(message.find(' ') + 1, message.find('\n') - message.find(' ') - 1);
  const bool dead = ReapOrphan(prometheus_pid, std::chrono::steady_clock::now() + kWait);
  if (!dead) {
    ::kill(prometheus_pid, SIGKILL);
    ReapOrphan(prometheus_pid, std::chrono::steady_clock::now() + kWait);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);  // the killed child could not clean up
  EXPECT_TRUE(dead) << "prometheus (pid " << prometheus_pid << ") outlived the process that started it";
}

TEST(PrometheusServerConfigTest, RefusesTargetsOfOneJobWithDifferentPaths) {
  PrometheusOptions options;
  options.targets = {{.address = "127.0.0.1:1", .metrics_path = "/metrics"},
                     {.address = "127.0.0.1:2", .metrics_path = "/other"}};
  if (!PrometheusServer::Available()) GTEST_SKIP() << PrometheusServer::NotAvailableMessage();
  auto started = PrometheusServer::Start(options);
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.error().message.find("different metrics paths"), std::string::npos)
      << started.error().message;
}

TEST(PrometheusServerConfigTest, NamesTheMissingBinary) {
  const char* saved = std::getenv("TESSERA_PROMETHEUS");
  const std::string saved_value = saved != nullptr ? saved : "";
  ::setenv("TESSERA_PROMETHEUS", "/nonexistent/prometheus", 1);
  EXPECT_FALSE(PrometheusServer::Available());
  auto started = PrometheusServer::Start(PrometheusOptions{});
  if (saved != nullptr) {
    ::setenv("TESSERA_PROMETHEUS", saved_value.c_str(), 1);
  } else {
    ::unsetenv("TESSERA_PROMETHEUS");
  }
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.error().message.find("/nonexistent/prometheus"), std::string::npos)
      << started.error().message;
}

}  // namespace
}  // namespace tessera::testing
