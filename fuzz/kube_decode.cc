// Fuzz target: the Kubernetes client's decoding of what the API server
// answers (kube::Client over the Transport seam). Every tessera binary reads
// list and watch answers through it; a proxy, a compromised server or a
// truncated connection can put anything there.
//
// Input: one status byte, then the body. Status byte even: 200; odd: one of
// the error statuses the client tells apart (400, 401, 403, 404, 409, 410,
// 422, 429, 500, 503, 504). The body answers a GET, a LIST, and, split into
// lines as the transport splits a stream, a WATCH.
//
// Properties: a list answer that is accepted has only objects, each with kind
// and apiVersion; every watch event has a name unless it is a bookmark; every
// error has a message; a 410 becomes IsGone(); a 2xx answer to a get or list
// never becomes an error that claims another status.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/log.h"
#include "fuzz_support.h"
#include "kube/client.h"

using namespace tessera;

namespace {

// Answers every request with the input.
class InputTransport : public kube::Transport {
 public:
  int status = 200;
  std::string body;

  kube::ApiResult<kube::HttpResponse> Do(const kube::HttpRequest&) override {
    kube::HttpResponse response;
    response.status = status;
    response.body = body;
    return response;
  }

  kube::ApiResult<kube::HttpResponse> Stream(const kube::HttpRequest&,
                                             const std::function<bool(std::string_view)>& on_line) override {
    kube::HttpResponse response;
    response.status = status;
    if (status < 200 || status > 299) {
      response.body = body;
      return response;
    }
    std::string_view rest = body;
    while (!rest.empty()) {
      std::string_view line;
      fuzz::SplitOnce(rest, '\n', line, rest);
      if (!on_line(line)) break;
    }
    return response;
  }
};

// `stream`: a watch, whose 200 stream may carry an ERROR event with its own code.
void CheckError(const kube::ApiError& error, int status, bool stream = false) {
  FUZZ_CHECK(!error.message.empty(), "an error without a message");
  if (status == 410) FUZZ_CHECK(error.IsGone(), error.message);
  if (status >= 200 && status <= 299 && !stream)
    FUZZ_CHECK(error.http_status == 200 || error.http_status == status, error.message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = (log::SetLevel(log::Level::kError), true);  // a line per request drowns the run
  (void)quiet;
  if (size == 0) return 0;
  static const int kErrorStatuses[] = {400, 401, 403, 404, 409, 410, 422, 429, 500, 503, 504};
  auto transport = std::make_shared<InputTransport>();
  transport->status = (data[0] & 1) == 0 ? 200 : kErrorStatuses[(data[0] >> 1) % std::size(kErrorStatuses)];
  transport->body.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  const int status = transport->status;
  kube::ClientOptions options;
  options.qps = 0;  // no rate limiting: nothing is sent anywhere
  kube::Client client(transport, options);

  auto got = client.Get(kube::resources::kPods, "ml", "train");
  if (!got.ok()) CheckError(got.error(), status);

  auto list = client.List(kube::resources::kNodes, "");
  if (list.ok()) {
    FUZZ_CHECK(status == 200, "a list accepted from status " + std::to_string(status));
    for (const auto& item : list->items) {
      FUZZ_CHECK(item.is_object() && item.contains("kind") && item.contains("apiVersion"), item.dump());
      (void)kube::NameOf(item);
      (void)kube::KeyOf(item);
      (void)kube::IsPodTerminal(item);
    }
  } else {
    CheckError(list.error(), status);
  }

  int events = 0;
  auto watched =
      client.Watch(kube::resources::kPods, "", kube::WatchOptions{}, [&](kube::WatchEvent&& event) {
        ++events;
        if (event.type != kube::WatchEvent::Type::kBookmark) {
          FUZZ_CHECK(!kube::NameOf(event.object).empty(),
                     event.object.dump(-1, ' ', false, kube::Json::error_handler_t::replace));
        }
        (void)kube::ResourceVersionOf(event.object);
        (void)kube::AnnotationOf(event.object, "tessera.io/allocation");
        return true;
      });
  if (!watched.ok()) CheckError(watched.error(), status, /*stream=*/true);
  return 0;
}
