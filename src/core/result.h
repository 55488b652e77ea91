// Moved to base/result.h. This forwarding header remains only for src/sim,
// whose owner switches its two includes over; nothing else may include it.
#pragma once

#include "base/result.h"
