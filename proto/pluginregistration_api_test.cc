// Pins the wire contract of the kubelet's plugin registration API: a real
// kubelet registers a tessera DRA plugin only if package, service, methods and
// every field number and type match the published API. A change here is a
// compatibility break.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "pluginregistration/v1/api.grpc.pb.h"

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;

// Reached through a generated class so the linker keeps the generated code.
const FileDescriptor* Api() {
  const FileDescriptor* file = pluginregistration::PluginInfo::descriptor()->file();
  // "pluginregistration", not "v1": the published file's package, which every
  // method path carries.
  EXPECT_EQ(file->package(), "pluginregistration");
  return file;
}

TEST(PluginRegistrationApiTest, MethodPathsAreTheKubeletOnes) {
  ASSERT_EQ(Api()->service_count(), 1);
  auto* registration = Api()->FindServiceByName("Registration");
  ASSERT_NE(registration, nullptr);
  EXPECT_EQ(registration->full_name(), "pluginregistration.Registration");
  const std::vector<std::tuple<std::string, std::string, std::string>> expected = {
      {"GetInfo", "pluginregistration.InfoRequest", "pluginregistration.PluginInfo"},
      {"NotifyRegistrationStatus", "pluginregistration.RegistrationStatus",
       "pluginregistration.RegistrationStatusResponse"},
  };
  ASSERT_EQ(registration->method_count(), static_cast<int>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    auto* method = registration->method(static_cast<int>(i));
    EXPECT_EQ(method->name(), std::get<0>(expected[i]));
    EXPECT_EQ(method->input_type()->full_name(), std::get<1>(expected[i]));
    EXPECT_EQ(method->output_type()->full_name(), std::get<2>(expected[i]));
    EXPECT_FALSE(method->server_streaming()) << method->name();
    EXPECT_FALSE(method->client_streaming()) << method->name();
  }
  EXPECT_STREQ(pluginregistration::Registration::service_full_name(), "pluginregistration.Registration");
}

struct Field {
  const char* message;
  const char* name;
  int number;
  FieldDescriptor::Type type;
  bool repeated;
};

TEST(PluginRegistrationApiTest, FieldNumbersAndTypesMatchThePublishedApi) {
  using T = FieldDescriptor;
  const std::vector<Field> fields = {
      {"PluginInfo", "type", 1, T::TYPE_STRING, false},
      {"PluginInfo", "name", 2, T::TYPE_STRING, false},
      {"PluginInfo", "endpoint", 3, T::TYPE_STRING, false},
      {"PluginInfo", "supported_versions", 4, T::TYPE_STRING, true},
      {"RegistrationStatus", "plugin_registered", 1, T::TYPE_BOOL, false},
      {"RegistrationStatus", "error", 2, T::TYPE_STRING, false},
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
  }
  for (const auto& [message, count] : fields_per_message) {
    EXPECT_EQ(Api()->FindMessageTypeByName(message)->field_count(), count) << message;
  }
  for (const char* empty : {"InfoRequest", "RegistrationStatusResponse"}) {
    ASSERT_NE(Api()->FindMessageTypeByName(empty), nullptr) << empty;
    EXPECT_EQ(Api()->FindMessageTypeByName(empty)->field_count(), 0) << empty;
  }
}

// Protobuf wire encoding by hand, independent of the generated code it checks.
// Payloads here are < 128 bytes, so every length is one byte.
std::string LengthDelimited(int number, const std::string& payload) {
  return std::string(1, static_cast<char>(number << 3 | 2)) + static_cast<char>(payload.size()) + payload;
}
std::string Varint(int number, unsigned char value) {
  return std::string(1, static_cast<char>(number << 3 | 0)) + static_cast<char>(value);
}

// What a DRA plugin answers to GetInfo, byte for byte as a kubelet reads it.
TEST(PluginRegistrationApiTest, PluginInfoEncodesWithThePublishedNumbers) {
  pluginregistration::PluginInfo info;
  info.set_type("DRAPlugin");
  info.set_name("gpu.tessera.io");
  info.set_endpoint("/p/dra.sock");
  info.add_supported_versions("v1.DRAPlugin");
  info.add_supported_versions("v1beta1.DRAPlugin");
  const std::string expected = LengthDelimited(1, "DRAPlugin") + LengthDelimited(2, "gpu.tessera.io") +
                               LengthDelimited(3, "/p/dra.sock") + LengthDelimited(4, "v1.DRAPlugin") +
                               LengthDelimited(4, "v1beta1.DRAPlugin");
  EXPECT_EQ(info.SerializeAsString(), expected);
}

// The kubelet's verdict, as its bytes arrive at the plugin.
TEST(PluginRegistrationApiTest, DecodesHandEncodedRegistrationStatus) {
  pluginregistration::RegistrationStatus status;
  ASSERT_TRUE(status.ParseFromString(Varint(1, 1) + LengthDelimited(2, "no")));
  EXPECT_TRUE(status.plugin_registered());
  EXPECT_EQ(status.error(), "no");
}

}  // namespace
