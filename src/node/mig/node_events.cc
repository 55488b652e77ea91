#include "node/mig/node_events.h"

#include "base/log.h"

namespace tessera::node::mig {

void RecordNodeEvent(kube::Client* client, const std::string& node_name,
                     const std::optional<kube::Json>& node, const std::string& type,
                     const std::string& reason, const std::string& message) {
  if (client == nullptr) return;
  kube::EventSpec spec;
  spec.involved_object = node ? kube::MakeObjectReference(*node) : kube::Json{{"name", node_name}};
  spec.involved_object["kind"] = "Node";
  spec.involved_object["apiVersion"] = "v1";
  spec.reason = reason;
  spec.message = message;
  spec.type = type;
  spec.component = "tessera-node";
  spec.instance = node_name;
  kube::EventsApi events(client);
  if (auto created = events.Create("default", spec); !created.ok()) {
    log::Warn("cannot record an event on the node", {{"reason", reason}, {"error", created.error().message}});
  }
}

}  // namespace tessera::node::mig
