// CEL's matches() over std::regex, on its own so that one warning can be
// silenced for it alone: GCC 12 reports -Wmaybe-uninitialized inside
// <regex>'s own std::function members when built with the sanitizers (GCC
// bug 105562, a false positive in library code).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <regex>
#include <string>

#include "base/result.h"

namespace tessera::testing::dra {

Result<bool> CelRegexSearch(const std::string& text, const std::string& pattern) {
  try {
    return std::regex_search(text, std::regex(pattern, std::regex::ECMAScript));
  } catch (const std::regex_error&) {
    return Error{"invalid regular expression \"" + pattern + "\""};
  }
}

}  // namespace tessera::testing::dra
