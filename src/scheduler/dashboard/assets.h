// The dashboard's web assets (web/*: HTML, JavaScript, CSS), embedded into
// the binary at build time (embed_assets.cmake writes dashboard_assets.cc),
// so the dashboard fetches nothing from anywhere at run time.
//
// Thread-safety: constant data.
#pragma once

#include <span>
#include <string_view>

namespace tessera::scheduler::dashboard {

struct Asset {
  std::string_view path;  // "/index.html", "/app.js", ...
  std::string_view content_type;
  std::string_view body;
  std::string_view etag;  // a digest of the body, quoted
};

std::span<const Asset> Assets();
// The asset at `path`, or nullptr.
const Asset* FindAsset(std::string_view path);

}  // namespace tessera::scheduler::dashboard
