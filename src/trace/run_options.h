// The parameters of a trace replay as a user writes them on the command line
// (`tessera simulate --seeds ... --tune ...`), parsed and checked here so the
// rules are tested once and the CLI stays thin.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace tessera::trace {

// "42-51", "42,43", "42", or a mix ("40-42,50"), in the order written
// (repeats kept). Errors quote the text and give examples.
Result<std::vector<uint64_t>> ParseSeeds(const std::string& text);

// The smallest and largest accepted --tune. The headline figure is read when
// the arrived demand first reaches 100 % of capacity, so the stream must go
// past 100 %; the second figure is read at the end and keyed by the whole
// percent (1.3 → "130"), which must differ from "100".
inline constexpr double kMinTune = 1.01;
inline constexpr double kMaxTune = 100;
Status CheckTune(double tune);

// The key of the end-of-stream figure: the tune factor in whole percent.
std::string EndPointKey(double tune);

}  // namespace tessera::trace
