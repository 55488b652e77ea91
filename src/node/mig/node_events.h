// Events about this Node (MIG layouts applied, pending, failed; mig-dynamic
// GPUs waiting for a reset), recorded in namespace `default`, where `kubectl
// describe node` finds Events of cluster-scoped objects.
#pragma once

#include <optional>
#include <string>

#include "kube/client.h"
#include "kube/typed_api.h"

namespace tessera::node::mig {

// Records one Event on the Node `node_name` (`node`: the object, for its uid,
// when known). A failure is logged, not returned: an Event is a report, and
// what it reports has happened either way. Does nothing without a client.
void RecordNodeEvent(kube::Client* client, const std::string& node_name,
                     const std::optional<kube::Json>& node, const std::string& type,
                     const std::string& reason, const std::string& message);

}  // namespace tessera::node::mig
