// PrometheusServer: a real Prometheus (Debian's `prometheus` package, installed by
// scripts/install-deps.sh) run by a test against the targets it names, and queried
// back over its HTTP API.
//
//   if (!PrometheusServer::Available()) GTEST_SKIP() << PrometheusServer::NotAvailableMessage();
//   auto prometheus = PrometheusServer::Start({.targets = {{.address = "127.0.0.1:9394"}}});
//   ASSERT_TRUE(prometheus.ok()) << prometheus.error().message;
//   nlohmann::json series;
//   ASSERT_TRUE((*prometheus)->WaitForSeries("up{job=\"tessera\"} == 1", 60s, &series))
//       << (*prometheus)->Diagnostics();
//
// Start() writes prometheus.yml into a fresh temporary directory (TMPDIR, else /tmp),
// starts the binary with its storage in that directory, listening on a free port of
// 127.0.0.1, and returns once /-/ready answers 200. The binary is /usr/bin/prometheus
// unless the environment variable TESSERA_PROMETHEUS names another.
//
// Lifetime: the process is bound to the thread that called Start() with
// PR_SET_PDEATHSIG(SIGKILL), so it dies with the test process even when the test
// crashes; call Start() from a thread that outlives the server (the test's own thread
// does). Stop() sends SIGTERM, then SIGKILL after a grace period; the destructor stops
// it and removes the directory.
//
// Its standard output and error go to stderr_path() (in the directory), for failure
// messages: StderrTail(), or Diagnostics(), which adds the targets' health, their last
// scrape error and the last failed query.
//
// Errors are values; no exception leaves this class.
// Thread-safety: none; use one instance from one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace tessera::testing {

struct ScrapeTarget {
  std::string address;  // host:port
  std::string metrics_path = "/metrics";
  std::string job = "tessera";  // the job label of every series scraped from it
};

struct PrometheusOptions {
  std::vector<ScrapeTarget> targets;                // targets of one job must share their metrics_path
  std::chrono::milliseconds scrape_interval{1000};  // also the scrape timeout
  std::chrono::milliseconds start_timeout{60000};   // until /-/ready
  std::chrono::milliseconds stop_grace{5000};       // SIGTERM to SIGKILL
};

class PrometheusServer {
 public:
  // The binary Start() runs: $TESSERA_PROMETHEUS, else /usr/bin/prometheus.
  static std::string BinaryPath();
  // Whether BinaryPath() is an executable file, so tests can skip without it.
  static bool Available();
  // Why a test skips: names the binary and how to get it.
  static std::string NotAvailableMessage();

  static Result<std::unique_ptr<PrometheusServer>> Start(const PrometheusOptions& options);

  ~PrometheusServer();
  PrometheusServer(const PrometheusServer&) = delete;
  PrometheusServer& operator=(const PrometheusServer&) = delete;

  // An instant query (GET /api/v1/query) evaluated now. Returns data.result: for a
  // vector, an array of {"metric": {labels}, "value": [time, "text of the value"]}.
  // A non-success answer is an Error carrying Prometheus' errorType and error text.
  Result<nlohmann::json> Query(const std::string& promql);

  // Polls Query(promql) until it returns at least one series (true, the result in
  // *out if out is not null) or `timeout` passes, the query is malformed or Prometheus
  // exits (false; Diagnostics() says why).
  bool WaitForSeries(const std::string& promql, std::chrono::milliseconds timeout, nlohmann::json* out);

  // The active targets (GET /api/v1/targets): each has scrapeUrl, health ("up",
  // "down", "unknown"), lastError and labels.
  Result<nlohmann::json> Targets();

  // SIGTERM, SIGKILL after options.stop_grace, reaped. Idempotent.
  void Stop();
  // Whether the process is still alive (reaps it when it has exited).
  bool Running();

  int port() const { return port_; }
  std::string base_url() const;  // http://127.0.0.1:<port>
  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  const std::string& stderr_path() const { return stderr_path_; }
  // The last `max_bytes` of its output.
  std::string StderrTail(std::size_t max_bytes = 4096) const;
  // For failure messages: address, process state, the last failed query, each
  // target's health and last scrape error, and the tail of its output.
  std::string Diagnostics();

 private:
  PrometheusServer() = default;
  Status Launch();
  Status WaitReady(std::chrono::milliseconds timeout);
  Result<nlohmann::json> GetApi(const std::string& path, const std::string& query_name,
                                const std::string& query_value);
  void Reap(int wait_flags);

  std::string dir_;
  std::string stderr_path_;
  std::chrono::milliseconds stop_grace_{5000};
  int port_ = 0;
  pid_t pid_ = -1;           // -1 once reaped
  std::string exit_status_;  // how it ended, once reaped
  std::string last_error_;   // of the last failed query or wait
};

}  // namespace tessera::testing
