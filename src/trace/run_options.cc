#include "trace/run_options.h"

#include <charconv>
#include <cmath>
#include <sstream>

namespace tessera::trace {

Result<std::vector<uint64_t>> ParseSeeds(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Error{"--seeds '" + text + "': " + why + " (examples: 42-51, 42,43, 42)"};
  };
  // A seed is 1 to 18 decimal digits (no sign, no spaces).
  auto number = [](const std::string& s, uint64_t& out) {
    if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return false;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && ptr == s.data() + s.size();
  };
  constexpr uint64_t kMaxSeeds = 10000;
  std::vector<uint64_t> seeds;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string part =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t dash = part.find('-');
    uint64_t lo = 0;
    uint64_t hi = 0;
    if (dash == std::string::npos) {
      if (!number(part, lo)) return bad(part.empty() ? "an empty seed" : "'" + part + "' is not a seed");
      hi = lo;
    } else {
      if (!number(part.substr(0, dash), lo) || !number(part.substr(dash + 1), hi)) {
        return bad("'" + part + "' is not a range FIRST-LAST of seeds");
      }
      if (hi < lo) return bad("range '" + part + "' ends before it starts");
    }
    if (hi - lo >= kMaxSeeds || seeds.size() + (hi - lo + 1) > kMaxSeeds) {
      return bad("more than " + std::to_string(kMaxSeeds) + " seeds");
    }
    for (uint64_t s = lo; s <= hi; ++s) seeds.push_back(s);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return seeds;
}

Status CheckTune(double tune) {
  if (std::isfinite(tune) && tune >= kMinTune && tune <= kMaxTune) return Status::Ok();
  std::ostringstream out;
  out << "--tune " << tune << ": must be from " << kMinTune << " to " << kMaxTune
      << " (the arrived GPU demand as a factor of capacity; the paper uses 1.3). The headline figure is read "
         "when the arrived demand reaches 100 % of capacity, so the task stream has to go past it.";
  return Error{out.str()};
}

std::string EndPointKey(double tune) {
  return std::to_string(std::lround(tune * 100));
}

}  // namespace tessera::trace
