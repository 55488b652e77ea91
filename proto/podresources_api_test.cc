// Pins the wire contract of the kubelet's PodResources API v1: tessera-node can
// read a real kubelet's answer only if package, service, methods and every
// field number and type match the published API. A change here is a
// compatibility break.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "podresources/v1/api.grpc.pb.h"

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;

// Reached through a generated class so the linker keeps the generated code.
const FileDescriptor* Api() {
  const FileDescriptor* file = v1::ListPodResourcesRequest::descriptor()->file();
  EXPECT_EQ(file->package(), "v1");
  return file;
}

TEST(PodResourcesApiTest, MethodPathsAreTheKubeletOnes) {
  ASSERT_EQ(Api()->service_count(), 1);
  auto* lister = Api()->FindServiceByName("PodResourcesLister");
  ASSERT_NE(lister, nullptr);
  EXPECT_EQ(lister->full_name(), "v1.PodResourcesLister");
  const std::vector<std::tuple<std::string, std::string, std::string>> expected = {
      {"List", "v1.ListPodResourcesRequest", "v1.ListPodResourcesResponse"},
      {"GetAllocatableResources", "v1.AllocatableResourcesRequest", "v1.AllocatableResourcesResponse"},
      {"Get", "v1.GetPodResourcesRequest", "v1.GetPodResourcesResponse"},
  };
  ASSERT_EQ(lister->method_count(), static_cast<int>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    auto* method = lister->method(static_cast<int>(i));
    EXPECT_EQ(method->name(), std::get<0>(expected[i]));
    EXPECT_EQ(method->input_type()->full_name(), std::get<1>(expected[i]));
    EXPECT_EQ(method->output_type()->full_name(), std::get<2>(expected[i]));
    EXPECT_FALSE(method->server_streaming()) << method->name();
    EXPECT_FALSE(method->client_streaming()) << method->name();
  }
  // The generated stub calls exactly these paths.
  EXPECT_STREQ(v1::PodResourcesLister::service_full_name(), "v1.PodResourcesLister");
}

struct Field {
  const char* message;
  const char* name;
  int number;
  FieldDescriptor::Type type;
  bool repeated;
  const char* message_type;  // full name for TYPE_MESSAGE fields, else nullptr
};

TEST(PodResourcesApiTest, FieldNumbersAndTypesMatchThePublishedApi) {
  using T = FieldDescriptor;
  const std::vector<Field> fields = {
      {"AllocatableResourcesResponse", "devices", 1, T::TYPE_MESSAGE, true, "v1.ContainerDevices"},
      {"AllocatableResourcesResponse", "cpu_ids", 2, T::TYPE_INT64, true, nullptr},
      {"AllocatableResourcesResponse", "memory", 3, T::TYPE_MESSAGE, true, "v1.ContainerMemory"},
      {"ListPodResourcesResponse", "pod_resources", 1, T::TYPE_MESSAGE, true, "v1.PodResources"},
      {"PodResources", "name", 1, T::TYPE_STRING, false, nullptr},
      {"PodResources", "namespace", 2, T::TYPE_STRING, false, nullptr},
      {"PodResources", "containers", 3, T::TYPE_MESSAGE, true, "v1.ContainerResources"},
      {"ContainerResources", "name", 1, T::TYPE_STRING, false, nullptr},
      {"ContainerResources", "devices", 2, T::TYPE_MESSAGE, true, "v1.ContainerDevices"},
      {"ContainerResources", "cpu_ids", 3, T::TYPE_INT64, true, nullptr},
      {"ContainerResources", "memory", 4, T::TYPE_MESSAGE, true, "v1.ContainerMemory"},
      {"ContainerResources", "dynamic_resources", 5, T::TYPE_MESSAGE, true, "v1.DynamicResource"},
      {"ContainerMemory", "memory_type", 1, T::TYPE_STRING, false, nullptr},
      {"ContainerMemory", "size", 2, T::TYPE_UINT64, false, nullptr},
      {"ContainerMemory", "topology", 3, T::TYPE_MESSAGE, false, "v1.TopologyInfo"},
      {"ContainerDevices", "resource_name", 1, T::TYPE_STRING, false, nullptr},
      {"ContainerDevices", "device_ids", 2, T::TYPE_STRING, true, nullptr},
      {"ContainerDevices", "topology", 3, T::TYPE_MESSAGE, false, "v1.TopologyInfo"},
      {"TopologyInfo", "nodes", 1, T::TYPE_MESSAGE, true, "v1.NUMANode"},
      {"NUMANode", "ID", 1, T::TYPE_INT64, false, nullptr},
      {"DynamicResource", "claim_name", 2, T::TYPE_STRING, false, nullptr},
      {"DynamicResource", "claim_namespace", 3, T::TYPE_STRING, false, nullptr},
      {"DynamicResource", "claim_resources", 4, T::TYPE_MESSAGE, true, "v1.ClaimResource"},
      {"ClaimResource", "cdi_devices", 1, T::TYPE_MESSAGE, true, "v1.CDIDevice"},
      {"ClaimResource", "driver_name", 2, T::TYPE_STRING, false, nullptr},
      {"ClaimResource", "pool_name", 3, T::TYPE_STRING, false, nullptr},
      {"ClaimResource", "device_name", 4, T::TYPE_STRING, false, nullptr},
      {"CDIDevice", "name", 1, T::TYPE_STRING, false, nullptr},
      {"GetPodResourcesRequest", "pod_name", 1, T::TYPE_STRING, false, nullptr},
      {"GetPodResourcesRequest", "pod_namespace", 2, T::TYPE_STRING, false, nullptr},
      {"GetPodResourcesResponse", "pod_resources", 1, T::TYPE_MESSAGE, false, "v1.PodResources"},
  };
  std::map<std::string, int> fields_per_message;
  for (const auto& f : fields) {
    ++fields_per_message[f.message];
    const Descriptor* message = Api()->FindMessageTypeByName(f.message);
    ASSERT_NE(message, nullptr) << f.message;
    const FieldDescriptor* field = message->FindFieldByName(f.name);
    ASSERT_NE(field, nullptr) << f.message << "." << f.name;
    EXPECT_EQ(field->number(), f.number) << f.message << "." << f.name;
    EXPECT_EQ(field->type(), f.type) << f.message << "." << f.name;
    EXPECT_EQ(field->is_repeated(), f.repeated) << f.message << "." << f.name;
    if (f.message_type != nullptr) {
      EXPECT_EQ(field->message_type()->full_name(), f.message_type) << f.message << "." << f.name;
    }
  }
  // No field beyond the published ones.
  for (const auto& [message, count] : fields_per_message) {
    EXPECT_EQ(Api()->FindMessageTypeByName(message)->field_count(), count) << message;
  }
  for (const char* empty : {"ListPodResourcesRequest", "AllocatableResourcesRequest"}) {
    ASSERT_NE(Api()->FindMessageTypeByName(empty), nullptr) << empty;
    EXPECT_EQ(Api()->FindMessageTypeByName(empty)->field_count(), 0) << empty;
  }
}

// DynamicResource's field 1 (class_name) was removed upstream in Kubernetes
// 1.31; the number stays reserved so it is never given another meaning.
TEST(PodResourcesApiTest, RemovedDynamicResourceClassNameStaysReserved) {
  const Descriptor* dynamic = Api()->FindMessageTypeByName("DynamicResource");
  ASSERT_NE(dynamic, nullptr);
  EXPECT_EQ(dynamic->FindFieldByNumber(1), nullptr);
  EXPECT_TRUE(dynamic->IsReservedNumber(1));
  EXPECT_TRUE(dynamic->IsReservedName("class_name"));
}

// Protobuf wire encoding of a length-delimited field (wire type 2), by hand:
// independent of the generated code it checks. Payloads here are < 128 bytes.
std::string LengthDelimited(int number, const std::string& payload) {
  return std::string(1, static_cast<char>(number << 3 | 2)) + static_cast<char>(payload.size()) + payload;
}

// A real kubelet's bytes parse: a message encoded by hand with the published
// numbers decodes into the expected fields.
TEST(PodResourcesApiTest, DecodesHandEncodedKubeletBytes) {
  // ListPodResourcesResponse{pod_resources: [{name: "p", namespace: "n",
  //   containers: [{name: "c", devices: [{resource_name: "r", device_ids: ["d"]}]}]}]}
  const std::string device = LengthDelimited(1, "r") + LengthDelimited(2, "d");
  const std::string container = LengthDelimited(1, "c") + LengthDelimited(2, device);
  const std::string pod = LengthDelimited(1, "p") + LengthDelimited(2, "n") + LengthDelimited(3, container);
  const std::string bytes = LengthDelimited(1, pod);
  v1::ListPodResourcesResponse response;
  ASSERT_TRUE(response.ParseFromString(bytes));
  ASSERT_EQ(response.pod_resources_size(), 1);
  EXPECT_EQ(response.pod_resources(0).name(), "p");
  EXPECT_EQ(response.pod_resources(0).namespace_(), "n");
  ASSERT_EQ(response.pod_resources(0).containers_size(), 1);
  EXPECT_EQ(response.pod_resources(0).containers(0).name(), "c");
  ASSERT_EQ(response.pod_resources(0).containers(0).devices_size(), 1);
  EXPECT_EQ(response.pod_resources(0).containers(0).devices(0).resource_name(), "r");
  ASSERT_EQ(response.pod_resources(0).containers(0).devices(0).device_ids_size(), 1);
  EXPECT_EQ(response.pod_resources(0).containers(0).devices(0).device_ids(0), "d");
}

}  // namespace
