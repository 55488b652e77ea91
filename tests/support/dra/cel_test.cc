#include "dra/cel.h"

#include <gtest/gtest.h>

namespace tessera::testing::dra {
namespace {

using Json = nlohmann::json;

// A GPU as tessera would publish it: unqualified names belong to the driver.
CelDevice Gpu() {
  CelDevice d;
  d.driver = "gpu.tessera.io";
  d.attributes = Json::parse(R"({
    "type": {"string": "vgpu"},
    "productName": {"string": "NVIDIA A100-SXM4-80GB"},
    "index": {"int": 0},
    "mig": {"bool": false},
    "driverVersion": {"version": "550.54.15"},
    "cudaDriverVersion": {"version": "12.4.0"},
    "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"}
  })");
  d.capacity = Json::parse(R"({"memory": {"value": "80Gi"}, "cores": {"value": "100"}})");
  d.allow_multiple_allocations = true;
  return d;
}

// Compiles and evaluates, failing the test on an error.
bool Eval(const std::string& expression, const CelDevice& device = Gpu()) {
  auto selector = CelSelector::Compile(expression);
  EXPECT_TRUE(selector.ok()) << expression << ": " << (selector.ok() ? "" : selector.error().message);
  if (!selector.ok()) return false;
  auto result = selector->Matches(device);
  EXPECT_TRUE(result.ok()) << expression << ": " << (result.ok() ? "" : result.error().message);
  return result.ok() && *result;
}

std::string CompileError(const std::string& expression) {
  auto selector = CelSelector::Compile(expression);
  return selector.ok() ? "" : selector.error().message;
}

std::string RuntimeError(const std::string& expression, const CelDevice& device = Gpu()) {
  auto selector = CelSelector::Compile(expression);
  if (!selector.ok()) return "compile: " + selector.error().message;
  auto result = selector->Matches(device);
  return result.ok() ? "" : result.error().message;
}

TEST(CelTest, DeviceClassSelectors) {
  EXPECT_TRUE(Eval("device.driver == 'gpu.tessera.io'"));
  EXPECT_TRUE(
      Eval("device.driver == \"gpu.tessera.io\" && device.attributes[\"gpu.tessera.io\"].type == \"vgpu\""));
  EXPECT_FALSE(Eval("device.driver == 'gpu.nvidia.com'"));
  EXPECT_FALSE(Eval("device.attributes['gpu.tessera.io'].type == 'mig'"));
  EXPECT_TRUE(Eval("device.allowMultipleAllocations == true"));
  EXPECT_TRUE(Eval("device.allowMultipleAllocations"));
}

TEST(CelTest, AttributesByDomain) {
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].index == 0"));
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].mig == false"));
  EXPECT_TRUE(Eval("device.attributes['resource.kubernetes.io'].pciBusID == '0000:3b:00.0'"));
  // A qualified name lives only in its own domain.
  EXPECT_FALSE(Eval("has(device.attributes['gpu.tessera.io'].pciBusID)"));
  // An unknown domain is an empty map; an unknown attribute an error.
  EXPECT_FALSE(Eval("has(device.attributes['other.example.com'].x)"));
  EXPECT_TRUE(Eval("size(device.attributes['other.example.com']) == 0"));
  EXPECT_NE(RuntimeError("device.attributes['gpu.tessera.io'].uuid == 'x'").find("no such key: uuid"),
            std::string::npos);
  EXPECT_NE(RuntimeError("device.nodeName == 'x'").find("no such key: nodeName"), std::string::npos);
  // An explicit driver-domain name wins over the unqualified one.
  CelDevice d = Gpu();
  d.attributes["gpu.tessera.io/index"] = {{"int", 7}};
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].index == 7", d));
}

TEST(CelTest, ComparisonsAndLogic) {
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].index < 1"));
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].index <= 0 && 1 > 0 && 2 >= 2"));
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].index != 3"));
  EXPECT_TRUE(Eval("!(1 == 2) || false"));
  EXPECT_TRUE(Eval("'a' < 'b' && 1 < 1.5 && 2.0 == 2"));
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].productName.startsWith('NVIDIA A100')"));
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].productName.contains('80GB')"));
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].productName.endsWith('80GB')"));
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].productName.matches('A100-.*-80GB$')"));
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].productName.lowerAscii().contains('a100')"));
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].type in ['vgpu', 'gpu']"));
  EXPECT_TRUE(Eval("'memory' in device.capacity['gpu.tessera.io']"));
  EXPECT_TRUE(Eval("1 + 2 * 3 == 7 && 7 / 2 == 3 && 7 % 2 == 1 && -(-1) == 1"));
  EXPECT_TRUE(Eval("'a' + 'b' == 'ab' && size([1] + [2]) == 2 && size('héllo') == 5"));
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].index == 0 ? true : false"));
  EXPECT_TRUE(Eval("{'a': 1}['a'] == 1 && [1, 2][1] == 2"));
  EXPECT_TRUE(Eval("int('12') == 12 && string(3) == '3' && double(1) == 1.0 && 0x10 == 16"));
}

// CEL's && and || absorb an error when the other side decides the result.
TEST(CelTest, ErrorsAreAbsorbedByADecidingOperand) {
  EXPECT_FALSE(Eval("device.driver == 'x' && device.attributes['gpu.tessera.io'].missing == 1"));
  EXPECT_FALSE(Eval("device.attributes['gpu.tessera.io'].missing == 1 && device.driver == 'x'"));
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].missing == 1 || true"));
  EXPECT_NE(RuntimeError("device.attributes['gpu.tessera.io'].missing == 1 && true").find("no such key"),
            std::string::npos);
}

TEST(CelTest, Quantities) {
  EXPECT_TRUE(Eval("device.capacity['gpu.tessera.io'].memory.compareTo(quantity('40Gi')) > 0"));
  EXPECT_TRUE(Eval("device.capacity['gpu.tessera.io'].memory.isGreaterThan(quantity('79Gi'))"));
  EXPECT_TRUE(Eval("device.capacity['gpu.tessera.io'].memory.isLessThan(quantity('81Gi'))"));
  EXPECT_TRUE(Eval("device.capacity['gpu.tessera.io'].memory == quantity('81920Mi')"));
  EXPECT_TRUE(Eval("device.capacity['gpu.tessera.io'].memory.compareTo(quantity('80Gi')) == 0"));
  EXPECT_TRUE(Eval("device.capacity['gpu.tessera.io'].cores.asInteger() == 100"));
  EXPECT_TRUE(Eval("device.capacity['gpu.tessera.io'].cores.isInteger() && quantity('1').sign() == 1"));
  EXPECT_TRUE(Eval(
      "quantity('1Gi').add(quantity('1Gi')) == quantity('2Gi') && quantity('3').sub(1) == quantity('2')"));
  EXPECT_TRUE(Eval("quantity('500m').asApproximateFloat() == 0.5"));
  EXPECT_TRUE(Eval("isQuantity('10Gi') && !isQuantity('ten')"));
  // Ordering operators are not defined on quantities, as in Kubernetes' library.
  EXPECT_NE(RuntimeError("device.capacity['gpu.tessera.io'].memory > quantity('1Gi')")
                .find("no matching overload for '>' applied to (kubernetes.Quantity, kubernetes.Quantity)"),
            std::string::npos);
  EXPECT_NE(RuntimeError("quantity('ten').sign() == 1").find("quantity \"ten\""), std::string::npos);
}

TEST(CelTest, VersionAttributesAreSemanticVersions) {
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].driverVersion.isGreaterThan(semver('535.0.0'))"));
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].cudaDriverVersion.compareTo(semver('12.4.0')) == 0"));
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].cudaDriverVersion == semver('12.4.0')"));
  EXPECT_TRUE(Eval("device.attributes['gpu.tessera.io'].cudaDriverVersion.major() == 12"));
  EXPECT_TRUE(Eval("semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))"));
  EXPECT_TRUE(Eval("semver('1.0.0-alpha').isLessThan(semver('1.0.0-alpha.1'))"));
  EXPECT_TRUE(Eval("semver('1.0.0-2').isLessThan(semver('1.0.0-10'))"));
  EXPECT_TRUE(Eval("isSemver('1.2.3') && !isSemver('1.2') && !isSemver('01.2.3')"));
  EXPECT_NE(RuntimeError("device.attributes['gpu.tessera.io'].driverVersion < semver('1.0.0')")
                .find("no matching overload"),
            std::string::npos);
}

TEST(CelTest, CelBind) {
  EXPECT_TRUE(Eval("cel.bind(t, device.attributes['gpu.tessera.io'], t.type == 'vgpu' && t.index == 0)"));
  EXPECT_FALSE(CompileError("cel.bind(t, 1, t + 1 == 2)").size());
  EXPECT_NE(CompileError("cel.bind(t, 1, u == 2)").find("undeclared reference to 'u'"), std::string::npos);
}

TEST(CelTest, TheResultMustBeABool) {
  EXPECT_NE(RuntimeError("device.driver").find("must evaluate to a bool, got string"), std::string::npos);
  EXPECT_NE(RuntimeError("1 + 'a' == 2").find("no matching overload for '+' applied to (int, string)"),
            std::string::npos);
  EXPECT_NE(RuntimeError("9223372036854775807 + 1 == 0").find("int overflow"), std::string::npos);
  EXPECT_NE(RuntimeError("1 / 0 == 0").find("division by zero"), std::string::npos);
}

TEST(CelTest, RefusesWhatIsOutsideTheSubset) {
  EXPECT_NE(CompileError("device.attributes.exists(d, d == 'x')").find("macro 'exists'"), std::string::npos);
  EXPECT_NE(CompileError("[1].all(x, x > 0)").find("macro 'all'"), std::string::npos);
  EXPECT_NE(CompileError("device.?driver == 'x'").find("optional field selection"), std::string::npos);
  EXPECT_NE(CompileError("1u == 1u").find("unsigned integer literals"), std::string::npos);
  EXPECT_NE(CompileError("b'x' == b'x'").find("bytes literals"), std::string::npos);
  EXPECT_NE(CompileError("'''x''' == 'x'").find("triple-quoted"), std::string::npos);
  EXPECT_NE(CompileError("timestamp('2024-01-01T00:00:00Z') != null")
                .find("undeclared reference to function 'timestamp'"),
            std::string::npos);
  EXPECT_NE(CompileError("pod.name == 'x'").find("undeclared reference to 'pod'"), std::string::npos);
  EXPECT_NE(CompileError("device.driver ==").find("Syntax error"), std::string::npos);
  EXPECT_NE(CompileError("device.driver == 'x").find("unterminated string"), std::string::npos);
  EXPECT_NE(CompileError("(device.driver == 'x'").find("expected ')'"), std::string::npos);
  EXPECT_NE(CompileError("has(device)").find("has() takes one field selection"), std::string::npos);
  EXPECT_NE(CompileError("device.driver == 'x' # comment").find("unexpected character '#'"),
            std::string::npos);
}

TEST(CelTest, DeepNestingIsRefusedNotACrash) {
  EXPECT_NE(CompileError(std::string(5000, '(') + "true" + std::string(5000, ')')).find("nests too deeply"),
            std::string::npos);
  EXPECT_NE(CompileError(std::string(5000, '!') + "true").find("nests too deeply"), std::string::npos);
  std::string sum = "1";
  for (int i = 0; i < 2000; ++i) sum += " + 1";
  EXPECT_NE(CompileError(sum + " == 2001").find("nests too deeply"), std::string::npos);
  EXPECT_TRUE(Eval(std::string(100, '(') + "true" + std::string(100, ')')));
}

TEST(CelTest, StringLiteralsAndEscapes) {
  EXPECT_TRUE(Eval(R"('a\'b' == "a'b" && "\x41\u00e9" == 'Aé' && r'\n' == '\\n' && '\t' != 't')"));
}

TEST(CelTest, BadAttributeValuesAreReported) {
  CelDevice d = Gpu();
  d.attributes["driverVersion"] = {{"version", "not-a-version"}};
  EXPECT_NE(RuntimeError("device.driver == 'gpu.tessera.io'", d).find("attribute driverVersion"),
            std::string::npos);
  d = Gpu();
  d.capacity["memory"] = {{"value", "lots"}};
  EXPECT_NE(RuntimeError("device.driver == 'gpu.tessera.io'", d).find("capacity memory"), std::string::npos);
}

}  // namespace
}  // namespace tessera::testing::dra
