// tessera-scheduler's own code run inside a test: the Scheduler class with its
// real HTTP listeners and libcurl client, against an API server (usually the
// stand-in, tests/support/apiserver). Header-only, so that tessera_testing
// links no scheduler: a test that includes this links tessera_scheduler.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "base/result.h"
#include "base/testing.h"
#include "kube/client.h"
#include "kube/curl_transport.h"
#include "scheduler/scheduler.h"

namespace tessera::testing {

// A scheduler a test talks to over loopback: its extender (and webhook) on an
// ephemeral port of 127.0.0.1, no leader election, `identity` in what it
// writes; no dashboard (by default it listens on the fixed port 8889 of every
// address, where tests running side by side would collide and fail to start;
// a test of the dashboard turns it on with port 0). Everything else is the
// scheduler's default; the caller adds more.
inline scheduler::SchedulerConfig LoopbackSchedulerConfig(const std::string& identity) {
  scheduler::SchedulerConfig config;
  config.port = 0;
  config.bind_address = "127.0.0.1";
  config.leader_elect = false;
  config.identity = identity;
  config.dashboard.enabled = false;
  return config;
}

// A kube client of the API server at `url`, over libcurl without TLS.
// `user_agent` is tessera's own by default; a test that runs the scheduler
// beside another tessera binary names it apart, so that the API calls
// recorded for that binary (tests/integration/security) are only its own.
inline std::shared_ptr<kube::Client> ClientOfApiServer(
    const std::string& url, kube::ClientOptions options = {},
    std::chrono::milliseconds connect_timeout = std::chrono::milliseconds(5000),
    const std::string& user_agent = "tessera") {
  kube::CurlTransportOptions transport;
  transport.server = url;
  transport.connect_timeout = connect_timeout;
  transport.user_agent = user_agent;
  return std::make_shared<kube::Client>(std::make_shared<kube::CurlTransport>(std::move(transport)), options);
}

// Starts a scheduler of `config` on `client` and waits (WaitFor's deadline)
// until it is ready; an error says which of the two failed.
inline Result<std::unique_ptr<scheduler::Scheduler>> StartReadyScheduler(
    const scheduler::SchedulerConfig& config, std::shared_ptr<kube::Client> client) {
  auto scheduler = std::make_unique<scheduler::Scheduler>(config, std::move(client));
  if (auto started = scheduler->Start(); !started.ok())
    return started.error().Wrap("the scheduler did not start");
  if (!WaitFor([&] { return scheduler->Ready(); })) {
    scheduler->Stop();
    return Error{"the scheduler did not become ready: " + scheduler->NotReadyReason()};
  }
  return scheduler;
}

}  // namespace tessera::testing
