// Pins the wire contract of the kubelet's DRA plugin API, versions v1 and
// v1beta1: a real kubelet prepares claims through a tessera DRA plugin only if
// package, service, methods and every field number and type match the
// published API. A change here is a compatibility break.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "dra/v1/api.grpc.pb.h"
#include "dra/v1beta1/api.grpc.pb.h"

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;

namespace drav1 = k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;

// Reached through generated classes so the linker keeps the generated code.
const FileDescriptor* V1() {
  return drav1::Claim::descriptor()->file();
}
const FileDescriptor* V1beta1() {
  return drav1beta1::Claim::descriptor()->file();
}

void ExpectDraPluginService(const FileDescriptor* file, const std::string& package) {
  EXPECT_EQ(file->package(), package);
  ASSERT_EQ(file->service_count(), 1);
  auto* service = file->FindServiceByName("DRAPlugin");
  ASSERT_NE(service, nullptr);
  // The kubelet calls "/<package>.DRAPlugin/<method>".
  EXPECT_EQ(service->full_name(), package + ".DRAPlugin");
  const std::vector<std::tuple<std::string, std::string, std::string>> expected = {
      {"NodePrepareResources", "NodePrepareResourcesRequest", "NodePrepareResourcesResponse"},
      {"NodeUnprepareResources", "NodeUnprepareResourcesRequest", "NodeUnprepareResourcesResponse"},
  };
  ASSERT_EQ(service->method_count(), static_cast<int>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    auto* method = service->method(static_cast<int>(i));
    EXPECT_EQ(method->name(), std::get<0>(expected[i]));
    EXPECT_EQ(method->input_type()->full_name(), package + "." + std::get<1>(expected[i]));
    EXPECT_EQ(method->output_type()->full_name(), package + "." + std::get<2>(expected[i]));
    EXPECT_FALSE(method->server_streaming()) << method->name();
    EXPECT_FALSE(method->client_streaming()) << method->name();
  }
}

struct Field {
  const char* message;
  const char* name;
  int number;
  FieldDescriptor::Type type;
  bool repeated;
  const char* message_type;  // short name for TYPE_MESSAGE fields (maps: the entry), else nullptr
};

// The fields both versions share; v1 adds Device.share_id.
std::vector<Field> CommonFields() {
  using T = FieldDescriptor;
  return {
      {"NodePrepareResourcesRequest", "claims", 1, T::TYPE_MESSAGE, true, "Claim"},
      {"NodePrepareResourcesResponse", "claims", 1, T::TYPE_MESSAGE, true,
       "NodePrepareResourcesResponse.ClaimsEntry"},
      {"NodePrepareResourceResponse", "devices", 1, T::TYPE_MESSAGE, true, "Device"},
      {"NodePrepareResourceResponse", "error", 2, T::TYPE_STRING, false, nullptr},
      {"Device", "request_names", 1, T::TYPE_STRING, true, nullptr},
      {"Device", "pool_name", 2, T::TYPE_STRING, false, nullptr},
      {"Device", "device_name", 3, T::TYPE_STRING, false, nullptr},
      {"Device", "cdi_device_ids", 4, T::TYPE_STRING, true, nullptr},
      {"NodeUnprepareResourcesRequest", "claims", 1, T::TYPE_MESSAGE, true, "Claim"},
      {"NodeUnprepareResourcesResponse", "claims", 1, T::TYPE_MESSAGE, true,
       "NodeUnprepareResourcesResponse.ClaimsEntry"},
      {"NodeUnprepareResourceResponse", "error", 1, T::TYPE_STRING, false, nullptr},
      {"Claim", "namespace", 1, T::TYPE_STRING, false, nullptr},
      {"Claim", "uid", 2, T::TYPE_STRING, false, nullptr},
      {"Claim", "name", 3, T::TYPE_STRING, false, nullptr},
  };
}

void ExpectFields(const FileDescriptor* file, const std::vector<Field>& fields) {
  std::map<std::string, int> fields_per_message;
  for (const auto& f : fields) {
    ++fields_per_message[f.message];
    const Descriptor* message = file->FindMessageTypeByName(f.message);
    ASSERT_NE(message, nullptr) << f.message;
    const FieldDescriptor* field = message->FindFieldByName(f.name);
    ASSERT_NE(field, nullptr) << f.message << "." << f.name;
    EXPECT_EQ(field->number(), f.number) << f.message << "." << f.name;
    EXPECT_EQ(field->type(), f.type) << f.message << "." << f.name;
    EXPECT_EQ(field->is_repeated(), f.repeated) << f.message << "." << f.name;
    if (f.message_type != nullptr) {
      EXPECT_EQ(field->message_type()->full_name(), file->package() + "." + f.message_type)
          << f.message << "." << f.name;
    }
  }
  // No field beyond the published ones.
  for (const auto& [message, count] : fields_per_message) {
    EXPECT_EQ(file->FindMessageTypeByName(message)->field_count(), count) << message;
  }
  // Both response maps are map<string, message> keyed by claim UID.
  for (const char* response : {"NodePrepareResourcesResponse", "NodeUnprepareResourcesResponse"}) {
    const FieldDescriptor* claims = file->FindMessageTypeByName(response)->FindFieldByName("claims");
    ASSERT_TRUE(claims->is_map()) << response;
    EXPECT_EQ(claims->message_type()->map_key()->type(), FieldDescriptor::TYPE_STRING) << response;
    EXPECT_EQ(claims->message_type()->map_value()->type(), FieldDescriptor::TYPE_MESSAGE) << response;
  }
}

TEST(DraV1ApiTest, MethodPathsAreTheKubeletOnes) {
  ExpectDraPluginService(V1(), "k8s.io.kubelet.pkg.apis.dra.v1");
  EXPECT_STREQ(drav1::DRAPlugin::service_full_name(), "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin");
}

TEST(DraV1ApiTest, FieldNumbersAndTypesMatchThePublishedApi) {
  std::vector<Field> fields = CommonFields();
  fields.push_back({"Device", "share_id", 5, FieldDescriptor::TYPE_STRING, false, nullptr});
  ExpectFields(V1(), fields);
  // share_id is proto3 `optional`: an empty share ID is distinguishable from none.
  const FieldDescriptor* share_id = V1()->FindMessageTypeByName("Device")->FindFieldByName("share_id");
  EXPECT_TRUE(share_id->has_optional_keyword());
  EXPECT_TRUE(share_id->has_presence());
}

TEST(DraV1beta1ApiTest, MethodPathsAreTheKubeletOnes) {
  ExpectDraPluginService(V1beta1(), "k8s.io.kubelet.pkg.apis.dra.v1beta1");
  EXPECT_STREQ(drav1beta1::DRAPlugin::service_full_name(), "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin");
}

TEST(DraV1beta1ApiTest, FieldNumbersAndTypesMatchThePublishedApi) {
  ExpectFields(V1beta1(), CommonFields());  // no share_id in v1beta1
  EXPECT_EQ(V1beta1()->FindMessageTypeByName("Device")->FindFieldByNumber(5), nullptr);
}

// Protobuf wire encoding by hand, independent of the generated code it checks.
// Payloads here are < 128 bytes, so every length is one byte.
std::string LengthDelimited(int number, const std::string& payload) {
  return std::string(1, static_cast<char>(number << 3 | 2)) + static_cast<char>(payload.size()) + payload;
}

// Device{request_names: ["gpu"], pool_name: "node-a", device_name: "gpu-0",
//        cdi_device_ids: ["tessera.io/gpu=c1-gpu-0"]}, then share_id when given.
std::string HandEncodedDevice(const std::string* share_id) {
  std::string device = LengthDelimited(1, "gpu") + LengthDelimited(2, "node-a") +
                       LengthDelimited(3, "gpu-0") + LengthDelimited(4, "tessera.io/gpu=c1-gpu-0");
  if (share_id != nullptr) device += LengthDelimited(5, *share_id);
  return device;
}

// NodePrepareResourcesResponse{claims: {"uid-1": {devices: [device]}}}: a map
// entry is a nested message with the key as field 1 and the value as field 2.
std::string HandEncodedPrepareResponse(const std::string& device) {
  const std::string value = LengthDelimited(1, device);
  const std::string entry = LengthDelimited(1, "uid-1") + LengthDelimited(2, value);
  return LengthDelimited(1, entry);
}

TEST(DraV1ApiTest, PrepareResponseMatchesHandEncodedBytes) {
  const std::string share = "s-1";
  const std::string bytes = HandEncodedPrepareResponse(HandEncodedDevice(&share));

  drav1::NodePrepareResourcesResponse built;
  drav1::Device* device = (*built.mutable_claims())["uid-1"].add_devices();
  device->add_request_names("gpu");
  device->set_pool_name("node-a");
  device->set_device_name("gpu-0");
  device->add_cdi_device_ids("tessera.io/gpu=c1-gpu-0");
  device->set_share_id("s-1");
  EXPECT_EQ(built.SerializeAsString(), bytes);

  drav1::NodePrepareResourcesResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  ASSERT_EQ(parsed.claims().count("uid-1"), 1u);
  const drav1::NodePrepareResourceResponse& claim = parsed.claims().at("uid-1");
  EXPECT_EQ(claim.error(), "");
  ASSERT_EQ(claim.devices_size(), 1);
  EXPECT_EQ(claim.devices(0).pool_name(), "node-a");
  EXPECT_EQ(claim.devices(0).device_name(), "gpu-0");
  ASSERT_EQ(claim.devices(0).request_names_size(), 1);
  EXPECT_EQ(claim.devices(0).request_names(0), "gpu");
  ASSERT_EQ(claim.devices(0).cdi_device_ids_size(), 1);
  EXPECT_EQ(claim.devices(0).cdi_device_ids(0), "tessera.io/gpu=c1-gpu-0");
  EXPECT_TRUE(claim.devices(0).has_share_id());
  EXPECT_EQ(claim.devices(0).share_id(), "s-1");
}

// A set-but-empty share ID goes on the wire (field 5, length 0); an unset one
// does not: the kubelet can tell a dedicated device from a share.
TEST(DraV1ApiTest, ShareIdPresenceIsOnTheWire) {
  drav1::Device dedicated;
  dedicated.set_device_name("gpu-0");
  EXPECT_EQ(dedicated.SerializeAsString(), LengthDelimited(3, "gpu-0"));
  drav1::Device empty_share = dedicated;
  empty_share.set_share_id("");
  EXPECT_EQ(empty_share.SerializeAsString(), LengthDelimited(3, "gpu-0") + LengthDelimited(5, ""));
}

TEST(DraV1beta1ApiTest, PrepareResponseMatchesHandEncodedBytes) {
  const std::string bytes = HandEncodedPrepareResponse(HandEncodedDevice(nullptr));
  drav1beta1::NodePrepareResourcesResponse built;
  drav1beta1::Device* device = (*built.mutable_claims())["uid-1"].add_devices();
  device->add_request_names("gpu");
  device->set_pool_name("node-a");
  device->set_device_name("gpu-0");
  device->add_cdi_device_ids("tessera.io/gpu=c1-gpu-0");
  EXPECT_EQ(built.SerializeAsString(), bytes);

  drav1beta1::NodePrepareResourcesResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  ASSERT_EQ(parsed.claims().count("uid-1"), 1u);
  ASSERT_EQ(parsed.claims().at("uid-1").devices_size(), 1);
  EXPECT_EQ(parsed.claims().at("uid-1").devices(0).device_name(), "gpu-0");
}

// The requests and the unprepare answer, decoded from the kubelet's bytes.
TEST(DraV1ApiTest, DecodesHandEncodedClaimsAndUnprepareResponse) {
  const std::string claim = LengthDelimited(1, "ns") + LengthDelimited(2, "uid-1") + LengthDelimited(3, "c1");
  drav1::NodeUnprepareResourcesRequest request;
  ASSERT_TRUE(request.ParseFromString(LengthDelimited(1, claim)));
  ASSERT_EQ(request.claims_size(), 1);
  EXPECT_EQ(request.claims(0).namespace_(), "ns");
  EXPECT_EQ(request.claims(0).uid(), "uid-1");
  EXPECT_EQ(request.claims(0).name(), "c1");

  const std::string entry = LengthDelimited(1, "uid-1") + LengthDelimited(2, LengthDelimited(1, "busy"));
  drav1::NodeUnprepareResourcesResponse response;
  ASSERT_TRUE(response.ParseFromString(LengthDelimited(1, entry)));
  ASSERT_EQ(response.claims().count("uid-1"), 1u);
  EXPECT_EQ(response.claims().at("uid-1").error(), "busy");
}

TEST(DraV1beta1ApiTest, DecodesHandEncodedClaims) {
  const std::string claim = LengthDelimited(1, "ns") + LengthDelimited(2, "uid-1") + LengthDelimited(3, "c1");
  drav1beta1::NodePrepareResourcesRequest request;
  ASSERT_TRUE(request.ParseFromString(LengthDelimited(1, claim)));
  ASSERT_EQ(request.claims_size(), 1);
  EXPECT_EQ(request.claims(0).name(), "c1");
}

}  // namespace
