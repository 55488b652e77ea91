// Pins the wire contract of the device-plugin API: a real kubelet talks to
// tessera only if package, services, methods and every field number and type
// match the published v1beta1 API. A change here is a compatibility break.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "deviceplugin/v1beta1/api.grpc.pb.h"

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;

// Reached through a generated class so the linker keeps the generated code.
const FileDescriptor* Api() {
  const FileDescriptor* file = v1beta1::Empty::descriptor()->file();
  EXPECT_EQ(file->package(), "v1beta1");
  return file;
}

TEST(DevicePluginApiTest, MethodPathsAreTheKubeletOnes) {
  auto* registration = Api()->FindServiceByName("Registration");
  ASSERT_NE(registration, nullptr);
  ASSERT_EQ(registration->method_count(), 1);
  EXPECT_EQ(registration->method(0)->name(), "Register");
  EXPECT_EQ(registration->method(0)->input_type()->full_name(), "v1beta1.RegisterRequest");
  EXPECT_EQ(registration->method(0)->output_type()->full_name(), "v1beta1.Empty");

  auto* plugin = Api()->FindServiceByName("DevicePlugin");
  ASSERT_NE(plugin, nullptr);
  std::vector<std::tuple<std::string, std::string, std::string, bool>> expected = {
      {"GetDevicePluginOptions", "v1beta1.Empty", "v1beta1.DevicePluginOptions", false},
      {"ListAndWatch", "v1beta1.Empty", "v1beta1.ListAndWatchResponse", true},
      {"GetPreferredAllocation", "v1beta1.PreferredAllocationRequest", "v1beta1.PreferredAllocationResponse",
       false},
      {"Allocate", "v1beta1.AllocateRequest", "v1beta1.AllocateResponse", false},
      {"PreStartContainer", "v1beta1.PreStartContainerRequest", "v1beta1.PreStartContainerResponse", false},
  };
  ASSERT_EQ(plugin->method_count(), static_cast<int>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    auto* method = plugin->method(static_cast<int>(i));
    EXPECT_EQ(method->name(), std::get<0>(expected[i]));
    EXPECT_EQ(method->input_type()->full_name(), std::get<1>(expected[i]));
    EXPECT_EQ(method->output_type()->full_name(), std::get<2>(expected[i]));
    EXPECT_EQ(method->server_streaming(), std::get<3>(expected[i])) << method->name();
    EXPECT_FALSE(method->client_streaming());
  }
}

struct Field {
  const char* message;
  const char* name;
  int number;
  FieldDescriptor::Type type;
  bool repeated;
};

TEST(DevicePluginApiTest, FieldNumbersAndTypesMatchThePublishedApi) {
  using T = FieldDescriptor;
  const std::vector<Field> fields = {
      {"DevicePluginOptions", "pre_start_required", 1, T::TYPE_BOOL, false},
      {"DevicePluginOptions", "get_preferred_allocation_available", 2, T::TYPE_BOOL, false},
      {"RegisterRequest", "version", 1, T::TYPE_STRING, false},
      {"RegisterRequest", "endpoint", 2, T::TYPE_STRING, false},
      {"RegisterRequest", "resource_name", 3, T::TYPE_STRING, false},
      {"RegisterRequest", "options", 4, T::TYPE_MESSAGE, false},
      {"ListAndWatchResponse", "devices", 1, T::TYPE_MESSAGE, true},
      {"TopologyInfo", "nodes", 1, T::TYPE_MESSAGE, true},
      {"NUMANode", "ID", 1, T::TYPE_INT64, false},
      {"Device", "ID", 1, T::TYPE_STRING, false},
      {"Device", "health", 2, T::TYPE_STRING, false},
      {"Device", "topology", 3, T::TYPE_MESSAGE, false},
      {"PreStartContainerRequest", "devices_ids", 1, T::TYPE_STRING, true},
      {"PreferredAllocationRequest", "container_requests", 1, T::TYPE_MESSAGE, true},
      {"ContainerPreferredAllocationRequest", "available_deviceIDs", 1, T::TYPE_STRING, true},
      {"ContainerPreferredAllocationRequest", "must_include_deviceIDs", 2, T::TYPE_STRING, true},
      {"ContainerPreferredAllocationRequest", "allocation_size", 3, T::TYPE_INT32, false},
      {"PreferredAllocationResponse", "container_responses", 1, T::TYPE_MESSAGE, true},
      {"ContainerPreferredAllocationResponse", "deviceIDs", 1, T::TYPE_STRING, true},
      {"AllocateRequest", "container_requests", 1, T::TYPE_MESSAGE, true},
      {"ContainerAllocateRequest", "devices_ids", 1, T::TYPE_STRING, true},
      {"CDIDevice", "name", 1, T::TYPE_STRING, false},
      {"AllocateResponse", "container_responses", 1, T::TYPE_MESSAGE, true},
      {"ContainerAllocateResponse", "envs", 1, T::TYPE_MESSAGE, true},  // map<string, string>
      {"ContainerAllocateResponse", "mounts", 2, T::TYPE_MESSAGE, true},
      {"ContainerAllocateResponse", "devices", 3, T::TYPE_MESSAGE, true},
      {"ContainerAllocateResponse", "annotations", 4, T::TYPE_MESSAGE, true},  // map<string, string>
      {"ContainerAllocateResponse", "cdi_devices", 5, T::TYPE_MESSAGE, true},
      {"Mount", "container_path", 1, T::TYPE_STRING, false},
      {"Mount", "host_path", 2, T::TYPE_STRING, false},
      {"Mount", "read_only", 3, T::TYPE_BOOL, false},
      {"DeviceSpec", "container_path", 1, T::TYPE_STRING, false},
      {"DeviceSpec", "host_path", 2, T::TYPE_STRING, false},
      {"DeviceSpec", "permissions", 3, T::TYPE_STRING, false},
  };
  for (const auto& f : fields) {
    const Descriptor* message = Api()->FindMessageTypeByName(f.message);
    ASSERT_NE(message, nullptr) << f.message;
    const FieldDescriptor* field = message->FindFieldByName(f.name);
    ASSERT_NE(field, nullptr) << f.message << "." << f.name;
    EXPECT_EQ(field->number(), f.number) << f.message << "." << f.name;
    EXPECT_EQ(field->type(), f.type) << f.message << "." << f.name;
    EXPECT_EQ(field->is_repeated(), f.repeated) << f.message << "." << f.name;
  }
  EXPECT_TRUE(Api()->FindMessageTypeByName("ContainerAllocateResponse")->FindFieldByName("envs")->is_map());
  EXPECT_EQ(Api()->FindMessageTypeByName("Empty")->field_count(), 0);
}

}  // namespace
