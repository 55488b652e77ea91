// File helpers every part needs: read a whole file, replace one atomically,
// join paths, make directories. Errors name the path and the reason
// (strerror), e.g. "cannot read '/etc/tessera/node.yaml': No such file or
// directory".
//
// Thread-safety: plain functions. Concurrent ReplaceAtomically of one path
// must be serialised by the caller (the temporary name is per process).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "base/result.h"

namespace tessera::files {

// The whole content of `path`, byte for byte.
Result<std::string> Read(const std::string& path);

// Replaces `path` with `content` (mode 0644) so that a reader sees the old
// content or the new, never a part: written to a temporary file beside it,
// flushed to disk, renamed over it. Used for what other processes read while
// tessera writes it (the preload file and region records mounted into or read
// about containers, the `tessera run` ledger). On failure nothing is left
// behind.
Status ReplaceAtomically(const std::string& path, std::string_view content);

// `dir` + "/" + `name`, without doubling a trailing slash of `dir`.
std::string Join(std::string_view dir, std::string_view name);

// Creates `path` and its missing parents with `mode` (like `mkdir -p`); an
// existing directory is fine.
Status MakeDirs(const std::string& path, mode_t mode = 0755);

}  // namespace tessera::files
