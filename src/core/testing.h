// Builders and checks shared by core's unit tests (header-only, uses gtest;
// never part of tessera_core). The codec checks hold every JSON codec
// (allocation_codec.h, inventory_codec.h) to the same promises: a corrupt
// payload is refused with a message that names the payload and the problem,
// and no prefix or byte-flip of valid text throws or decodes to something
// invalid.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "core/device.h"
#include "core/request.h"

namespace tessera::core {

// A healthy GPU without links.
inline Gpu TestGpu(const std::string& uuid, const std::string& model, int64_t memory_mib, int slots,
                   int numa_node = -1) {
  Gpu g;
  g.uuid = uuid;
  g.model = model;
  g.memory_mib = memory_mib;
  g.numa_node = numa_node;
  g.slots = slots;
  return g;
}

// A pod with one container "app" asking for `gpus` vGPUs of `memory_mib` MiB
// and `cores` percent each.
inline PodRequest AppRequest(int64_t memory_mib, int cores, int gpus = 1) {
  PodRequest p;
  p.containers.push_back({"app", gpus, memory_mib, std::nullopt, cores, 0});
  return p;
}

// One payload a decoder must refuse, and a part of the message it must give.
struct CorruptCase {
  std::string label;
  std::string text;
  std::string message_part;
};

// The gtest name of a case: its label with every other character an underscore.
inline std::string CorruptCaseName(const ::testing::TestParamInfo<CorruptCase>& info) {
  std::string name;
  for (char ch : info.param.label) name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return name;
}

// `decode(c.text)` fails with a message that contains c.message_part and
// starts with the payload's name.
template <typename Decode>
void ExpectRefused(const CorruptCase& c, std::string_view payload, Decode decode) {
  auto decoded = decode(c.text);
  ASSERT_FALSE(decoded.ok()) << c.label << ": accepted";
  const std::string& message = decoded.error().message;
  EXPECT_NE(message.find(c.message_part), std::string::npos) << c.label << ": " << message;
  EXPECT_EQ(message.rfind(payload, 0), 0u) << "errors name the payload: " << message;
}

// `value` encoded to text and decoded again is `value`.
template <typename T, typename Encode, typename Decode>
void ExpectRoundTrip(const T& value, Encode encode, Decode decode) {
  auto text = encode(value);
  ASSERT_TRUE(text.ok()) << text.error().message;
  auto back = decode(*text);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, value);
}

// No proper prefix of valid `text` decodes.
template <typename Decode>
void ExpectEveryTruncationRefused(const std::string& text, Decode decode) {
  for (size_t n = 0; n < text.size(); ++n)
    EXPECT_FALSE(decode(std::string_view(text).substr(0, n)).ok()) << "prefix of " << n << " bytes accepted";
}

// Each byte of `text` replaced by each of `bytes` decodes to an error or to a
// value `validate` accepts; it never throws or crashes.
template <typename Decode, typename Validate>
void ExpectCorruptedBytesSafe(const std::string& text, std::initializer_list<char> bytes, Decode decode,
                              Validate validate) {
  for (size_t i = 0; i < text.size(); ++i) {
    for (char c : bytes) {
      std::string bad = text;
      bad[i] = c;
      auto decoded = decode(bad);
      if (decoded.ok()) {
        EXPECT_TRUE(validate(*decoded).ok()) << "byte " << i << " set to " << int{c};
      }
    }
  }
}

}  // namespace tessera::core
