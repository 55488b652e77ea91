// Replacing a file so that a reader sees the old content or the new, never a
// part: written to a temporary file beside it, flushed to disk, renamed over
// it. Used for what other processes read while tessera writes it: the preload
// file and region records (mounted into or read about containers) and the
// `tessera run` ledger.
//
// Thread-safety: a plain function; concurrent writers of one path must be
// serialised by the caller (the temporary name is per process).
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"

namespace tessera::node {

// Replaces `path` with `content` (mode 0644). On failure nothing is left
// behind and the error names the file and the reason.
Status ReplaceFileAtomically(const std::string& path, std::string_view content);

}  // namespace tessera::node
