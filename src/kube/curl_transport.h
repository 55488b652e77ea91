// CurlTransport: HTTP(S) to one API server with libcurl.
//
// TLS: server CA from a file or PEM data, client certificate/key from files or
// PEM data, or insecure-skip-tls-verify. Authentication by bearer token, taken
// from a TokenSource on every request (so a rotating service-account token is
// picked up), or by client certificate.
//
// Connections are kept alive: finished easy handles go back to a small pool
// and are reused, so their connections are too.
//
// Thread-safety: Do() and Stream() may be called concurrently.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kube/transport.h"

namespace tessera::kube {

struct TlsConfig {
  std::string ca_file;
  std::string ca_data;  // PEM
  std::string cert_file;
  std::string cert_data;  // PEM
  std::string key_file;
  std::string key_data;  // PEM
  bool insecure_skip_verify = false;
};

// Returns the bearer token to send, or "" for none. Called per request.
using TokenSource = std::function<std::string()>;

struct CurlTransportOptions {
  std::string server;  // "https://10.0.0.1:443" (no trailing slash needed)
  TlsConfig tls;
  TokenSource token;
  std::string user_agent = "tessera";
  std::chrono::milliseconds connect_timeout{5000};
};

class CurlTransport : public Transport {
 public:
  explicit CurlTransport(CurlTransportOptions options);
  ~CurlTransport() override;
  CurlTransport(const CurlTransport&) = delete;
  CurlTransport& operator=(const CurlTransport&) = delete;

  ApiResult<HttpResponse> Do(const HttpRequest& request) override;
  ApiResult<HttpResponse> Stream(const HttpRequest& request,
                                 const std::function<bool(std::string_view line)>& on_line) override;

 private:
  struct Call;
  ApiResult<HttpResponse> Perform(const HttpRequest& request,
                                  const std::function<bool(std::string_view)>* on_line);
  void* AcquireHandle();
  void ReleaseHandle(void* handle);

  CurlTransportOptions options_;
  std::mutex mu_;
  std::vector<void*> idle_handles_;  // guarded by mu_; CURL* kept for connection reuse
};

}  // namespace tessera::kube
