#include "kube/curl_transport.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <mutex>

namespace tessera::kube {
namespace {

constexpr size_t kMaxIdleHandles = 16;

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

// Points curl at PEM material: `data` given inline (through `blob`, which
// must outlive the transfer: curl reads the data in place), else the file
// `file`. False when neither is given (nothing set).
bool SetPemSource(CURL* curl, const std::string& data, const std::string& file, CURLoption blob_option,
                  CURLoption file_option, curl_blob* blob) {
  if (!data.empty()) {
    *blob = curl_blob{const_cast<char*>(data.data()), data.size(), CURL_BLOB_NOCOPY};
    curl_easy_setopt(curl, blob_option, blob);
    return true;
  }
  if (!file.empty()) {
    curl_easy_setopt(curl, file_option, file.c_str());
    return true;
  }
  return false;
}

}  // namespace

// State shared with libcurl's callbacks for one request.
struct CurlTransport::Call {
  CURL* curl = nullptr;
  const HttpRequest* request = nullptr;
  const std::function<bool(std::string_view)>* on_line = nullptr;
  HttpResponse response;
  std::string pending;  // partial line of a stream
  bool stopped_by_callback = false;
  bool line_too_long = false;  // a stream line grew past kMaxStreamLineBytes
  bool cancelled = false;

  bool Streaming() {
    if (on_line == nullptr) return false;
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    return code >= 200 && code < 300;
  }

  static size_t OnData(char* data, size_t size, size_t nmemb, void* user) {
    auto* call = static_cast<Call*>(user);
    const size_t n = size * nmemb;
    if (call->request->cancel != nullptr && call->request->cancel->load()) {
      call->cancelled = true;
      return 0;
    }
    if (!call->Streaming()) {
      call->response.body.append(data, n);
      return n;
    }
    call->pending.append(data, n);
    size_t start = 0;
    for (;;) {
      const size_t nl = call->pending.find('\n', start);
      if (nl == std::string::npos) break;
      std::string_view line(call->pending.data() + start, nl - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      start = nl + 1;
      if (!line.empty() && !(*call->on_line)(line)) {
        call->stopped_by_callback = true;
        return 0;
      }
    }
    call->pending.erase(0, start);
    if (call->pending.size() > kMaxStreamLineBytes) {
      call->line_too_long = true;
      return 0;
    }
    return n;
  }

  static size_t OnHeader(char* data, size_t size, size_t nmemb, void* user) {
    auto* call = static_cast<Call*>(user);
    const size_t n = size * nmemb;
    std::string_view line(data, n);
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos) {
      std::string name(line.substr(0, colon));
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      call->response.headers[name] = Trim(line.substr(colon + 1));
    }
    return n;
  }

  static int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    auto* call = static_cast<Call*>(user);
    if (call->request->cancel != nullptr && call->request->cancel->load()) {
      call->cancelled = true;
      return 1;
    }
    return 0;
  }
};

CurlTransport::CurlTransport(CurlTransportOptions options) : options_(std::move(options)) {
  GlobalInit();
  while (!options_.server.empty() && options_.server.back() == '/') {
    options_.server.pop_back();
  }
}

CurlTransport::~CurlTransport() {
  std::lock_guard<std::mutex> lock(mu_);
  for (void* h : idle_handles_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* CurlTransport::AcquireHandle() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_handles_.empty()) {
      void* h = idle_handles_.back();
      idle_handles_.pop_back();
      curl_easy_reset(static_cast<CURL*>(h));  // keeps live connections and caches
      return h;
    }
  }
  return curl_easy_init();
}

void CurlTransport::ReleaseHandle(void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_handles_.size() < kMaxIdleHandles) {
    idle_handles_.push_back(handle);
  } else {
    curl_easy_cleanup(static_cast<CURL*>(handle));
  }
}

ApiResult<HttpResponse> CurlTransport::Do(const HttpRequest& request) {
  return Perform(request, nullptr);
}

ApiResult<HttpResponse> CurlTransport::Stream(const HttpRequest& request,
                                              const std::function<bool(std::string_view)>& on_line) {
  return Perform(request, &on_line);
}

ApiResult<HttpResponse> CurlTransport::Perform(const HttpRequest& request,
                                               const std::function<bool(std::string_view)>* on_line) {
  CURL* curl = static_cast<CURL*>(AcquireHandle());
  const std::string url = options_.server + request.path;
  const std::string what = request.method + " " + url;
  if (curl == nullptr) return ApiError{0, "InternalError", what + ": cannot create a libcurl handle"};

  Call call;
  call.curl = curl;
  call.request = &request;
  call.on_line = on_line;
  char errbuf[CURL_ERROR_SIZE];
  errbuf[0] = '\0';

  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, options_.user_agent.c_str());
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout.count()));
  if (request.timeout.count() > 0) {
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout.count()));
  }
  if (request.idle_timeout.count() > 0) {
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME,
                     std::max<long>(1, static_cast<long>(request.idle_timeout.count() / 1000)));
  }
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Call::OnData);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &call);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &Call::OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &call);
  if (request.cancel != nullptr) {
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &Call::OnProgress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &call);
  }

  // Method and body.
  if (request.method == "GET") {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    if (request.method != "DELETE" || !request.body.empty()) {
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.data());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
    }
  }

  // TLS.
  const TlsConfig& tls = options_.tls;
  if (tls.insecure_skip_verify) {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  curl_blob ca_blob{}, cert_blob{}, key_blob{};  // curl reads the PEM data in place during the transfer
  SetPemSource(curl, tls.ca_data, tls.ca_file, CURLOPT_CAINFO_BLOB, CURLOPT_CAINFO, &ca_blob);
  if (SetPemSource(curl, tls.cert_data, tls.cert_file, CURLOPT_SSLCERT_BLOB, CURLOPT_SSLCERT, &cert_blob))
    curl_easy_setopt(curl, CURLOPT_SSLCERTTYPE, "PEM");
  if (SetPemSource(curl, tls.key_data, tls.key_file, CURLOPT_SSLKEY_BLOB, CURLOPT_SSLKEY, &key_blob))
    curl_easy_setopt(curl, CURLOPT_SSLKEYTYPE, "PEM");

  // Headers.
  curl_slist* headers = nullptr;
  std::string auth;
  if (options_.token) {
    const std::string token = options_.token();
    if (!token.empty()) auth = "Authorization: Bearer " + token;
  }
  if (!auth.empty()) headers = curl_slist_append(headers, auth.c_str());
  const std::string accept = "Accept: " + request.accept;
  headers = curl_slist_append(headers, accept.c_str());
  std::string content_type;
  if (!request.content_type.empty()) {
    content_type = "Content-Type: " + request.content_type;
    headers = curl_slist_append(headers, content_type.c_str());
  }
  headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);

  const CURLcode rc = curl_easy_perform(curl);
  long code = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
  curl_slist_free_all(headers);
  // Unset blob pointers before the handle goes back to the pool.
  curl_easy_reset(curl);
  ReleaseHandle(curl);

  if (call.cancelled) return ApiError{0, "Cancelled", what + ": cancelled"};
  if (call.line_too_long) {
    return ApiError{static_cast<int>(code), "InvalidResponse",
                    what + ": a line of the stream is longer than " + std::to_string(kMaxStreamLineBytes) +
                        " bytes (no watch event is that large); the stream was dropped"};
  }
  if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && call.stopped_by_callback)) {
    std::string detail = errbuf[0] != '\0' ? std::string(errbuf) : std::string(curl_easy_strerror(rc));
    std::string reason = rc == CURLE_OPERATION_TIMEDOUT ? "Timeout" : "TransportError";
    // A stream that ends mid-way still had a status; report the failure anyway
    // so the caller reconnects.
    return ApiError{0, reason, what + ": " + detail};
  }
  call.response.status = static_cast<int>(code);
  return std::move(call.response);
}

}  // namespace tessera::kube
