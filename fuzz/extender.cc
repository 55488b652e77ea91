// Fuzz target: the scheduler extender's request reading — the bodies
// kube-scheduler POSTs to /filter, /prioritize and /bind (or anyone who can
// reach the port). Each input goes through all three, as the HTTP handlers
// pass it: FilterBody and PrioritizeBody take the raw body; /bind parses it
// (nlohmann, no exceptions) and calls Bind, whose answer is dumped as the
// server dumps it.
//
// The cluster is two nodes with valid inventories; the pod any bind asks
// about is a one-vGPU pod; binding always succeeds.
//
// Properties: when the fast reader (wire::ScanExtenderArgs) takes a body whose
// Pod text is JSON, nlohmann accepts the body too and reads the same node
// names and Pod (its header promises both); every answer is JSON; statuses
// are 200 or 400.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "fuzz_support.h"
#include "scheduler/extender.h"
#include "scheduler/extender_wire.h"
#include "scheduler/testing.h"

using namespace tessera;
using nlohmann::json;

namespace {

void CheckFastReader(std::string_view body) {
  scheduler::wire::ScannedArgs scanned;
  if (!scheduler::wire::ScanExtenderArgs(body, scanned)) return;
  // The Pod text is the caller's to parse; when it is not JSON the caller
  // parses the whole body instead (extender_wire.h), so only the other case
  // is the fast reader's verdict.
  json pod_tree;
  if (!scanned.pod.empty()) {
    pod_tree = json::parse(scanned.pod.begin(), scanned.pod.end(), nullptr, /*allow_exceptions=*/false);
    if (pod_tree.is_discarded()) return;
  }
  const json tree = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!tree.is_discarded(), "the fast reader accepts a body nlohmann refuses");
  FUZZ_CHECK(tree.is_object(), "the fast reader accepts a body that is not an object");
  auto names = tree.find("NodeNames");
  FUZZ_CHECK(names != tree.end() && names->is_array() && names->size() == scanned.node_names.size(),
             "NodeNames read differently");
  for (size_t i = 0; i < scanned.node_names.size(); ++i) {
    FUZZ_CHECK((*names)[i].is_string() && (*names)[i].get_ref<const std::string&>() == scanned.node_names[i],
               std::string(scanned.node_names[i]));
  }
  auto pod = tree.find("Pod");
  if (scanned.pod.empty()) {
    FUZZ_CHECK(pod == tree.end(), "Pod member missed");
  } else {
    FUZZ_CHECK(pod != tree.end() && pod_tree == *pod, std::string(scanned.pod));
  }
}

void CheckAnswer(int status, const std::string& body, const char* verb) {
  FUZZ_CHECK(status == 200 || status == 400, std::string(verb) + " answered " + std::to_string(status));
  FUZZ_CHECK(json::accept(body), std::string(verb) + " answered something not JSON: " + body);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = (log::SetLevel(log::Level::kError), true);  // a line per request drowns the run
  (void)quiet;
  const std::string_view body = fuzz::AsText(data, size);
  CheckFastReader(body);

  static const json node_a = scheduler::testing::NodeWithGpus("node-a", 1, 2, 81920);
  static const json node_b =
      scheduler::testing::NodeWithGpus("node-b", 2, 1, 40960, 4, "NVIDIA A100-PCIE-40GB");
  static const json pod = scheduler::testing::GpuPod("ml", "train", 1, 3000, 30);
  scheduler::ClusterState state(scheduler::ClusterStateOptions{nullptr, std::chrono::milliseconds(0)});
  state.UpsertNode(node_a);
  state.UpsertNode(node_b);
  scheduler::ExtenderDeps deps;
  deps.state = &state;
  deps.get_pod = [](const std::string&, const std::string&) -> Result<json> { return pod; };
  deps.bind = [](const std::string&, const std::string&, const std::string&,
                 const std::map<std::string, std::string>&) -> kube::ApiStatus {
    return kube::ApiStatus::Ok();
  };
  scheduler::Extender extender(std::move(deps));

  auto [filter_status, filter_body] = extender.FilterBody(body);
  CheckAnswer(filter_status, filter_body, "filter");
  auto [prioritize_status, prioritize_body] = extender.PrioritizeBody(body);
  CheckAnswer(prioritize_status, prioritize_body, "prioritize");

  const json args = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (args.is_discarded()) return 0;
  auto [bind_status, bind_answer] = extender.Bind(args);
  CheckAnswer(bind_status, bind_answer.dump(), "bind");  // the server's Reply: dump() with its defaults
  return 0;
}
