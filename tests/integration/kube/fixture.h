// Shared set-up for kube integration tests: a FakeApiServer on 127.0.0.1 and a
// Client talking to it through the real libcurl transport.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "apiserver/fake_apiserver.h"
#include "base/testing.h"
#include "kube/client.h"
#include "kube/curl_transport.h"
#include "kube/typed_api.h"

namespace tessera::kube::it {

using ::tessera::testing::WaitFor;

inline Json Pod(const std::string& ns, const std::string& name, const Json& labels = Json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"labels", labels}}},
          {"spec", {{"containers", {{{"name", "main"}, {"image", "busybox"}}}}}}};
}

inline Json Node(const std::string& name) {
  return {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}, {"spec", Json::object()}};
}

class KubeIntegrationTest : public ::testing::Test {
 protected:
  static testing::FakeApiServerOptions ServerOptions() {
    testing::FakeApiServerOptions o;
    o.bookmark_interval = std::chrono::milliseconds(200);
    o.keep_alive_seconds = 1;
    return o;
  }

  void SetUp() override {
    server_ = std::make_unique<testing::FakeApiServer>(ServerOptions());
    auto st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.error().message;
    client_ = MakeClient(std::chrono::milliseconds(10000));
  }

  void TearDown() override { server_->Stop(); }

  std::unique_ptr<Client> MakeClient(std::chrono::milliseconds timeout, const std::string& token = "") {
    CurlTransportOptions t;
    t.server = server_->url();
    t.connect_timeout = std::chrono::milliseconds(2000);
    if (!token.empty()) t.token = [token] { return token; };
    ClientOptions o;
    o.qps = 0;  // no client-side limiting in tests
    o.timeout = timeout;
    return std::make_unique<Client>(std::make_shared<CurlTransport>(t), o);
  }

  std::unique_ptr<testing::FakeApiServer> server_;
  std::unique_ptr<Client> client_;
};

}  // namespace tessera::kube::it
