// FormatNumber: one spelling of a number for text a machine reads back
// (Prometheus samples, log fields, configuration defaults): an integer-valued
// double below 2^63 in magnitude as an exact integer (1048576, never
// 1.048576e+06), any other finite value in the shortest form that reads back
// to the same double, infinities and NaN as `+Inf`, `-Inf`, `NaN`. Never
// depends on the C locale (no printf, no iostream).
//
// Thread-safety: a pure function.
#pragma once

#include <string>

namespace tessera {

std::string FormatNumber(double value);

}  // namespace tessera
