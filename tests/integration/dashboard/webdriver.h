// A small W3C WebDriver client for the dashboard's browser tests: starts
// Debian's chromedriver on a free loopback port, opens one headless Chromium
// session, and speaks the protocol's HTTP/JSON (navigate, execute script,
// screenshot) plus chromedriver's browser-log extension (the console).
//
// Available() says whether chromium and chromedriver are installed; the tests
// skip with that message when they are not.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace tessera::testing {

class WebDriver {
 public:
  using Json = nlohmann::json;

  // Debian's paths; $TESSERA_CHROMIUM and $TESSERA_CHROMEDRIVER override them.
  static std::string Chromium() { return PathFrom("TESSERA_CHROMIUM", "/usr/bin/chromium"); }
  static std::string Chromedriver() { return PathFrom("TESSERA_CHROMEDRIVER", "/usr/bin/chromedriver"); }

  static bool Available() {
    return access(Chromium().c_str(), X_OK) == 0 && access(Chromedriver().c_str(), X_OK) == 0;
  }
  static std::string NotAvailableMessage() {
    return "headless Chromium tests need " + Chromium() + " and " + Chromedriver() +
           " (Debian packages chromium and chromium-driver; scripts/install-deps.sh installs them)";
  }

  ~WebDriver() { Quit(); }

  // Starts chromedriver on `port` and a headless session writing its
  // profile under `profile_dir`.
  Status Start(int port, const std::string& profile_dir, const std::string& log_path) {
    port_ = port;
    pid_ = fork();
    if (pid_ == 0) {
      const std::string port_arg = "--port=" + std::to_string(port);
      const std::string log_arg = "--log-path=" + log_path;
      const std::string driver = Chromedriver();
      execl(driver.c_str(), driver.c_str(), port_arg.c_str(), log_arg.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    if (pid_ < 0) return Error{"fork failed"};
    http_ = std::make_unique<httplib::Client>("127.0.0.1", port);
    http_->set_read_timeout(120);
    bool up = false;
    for (int i = 0; i < 300 && !up; ++i) {
      auto r = http_->Get("/status");
      up = r && r->status == 200;
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!up) return Error{"chromedriver did not answer on port " + std::to_string(port)};
    Json caps = {{"capabilities",
                  {{"alwaysMatch",
                    {{"browserName", "chrome"},
                     {"goog:chromeOptions",
                      {{"binary", Chromium()},
                       {"args",
                        {"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1360,1100", "--no-first-run", "--user-data-dir=" + profile_dir}}}},
                     {"goog:loggingPrefs", {{"browser", "ALL"}}}}}}}};
    auto r = Call("POST", "/session", caps);
    if (!r.ok()) return r.error();
    session_ = (*r).value("sessionId", "");
    if (session_.empty()) return Error{"no session id in " + r->dump()};
    return Status::Ok();
  }

  void Quit() {
    if (!session_.empty()) (void)Call("DELETE", "/session/" + session_, nullptr);
    session_.clear();
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  Status Navigate(const std::string& url) {
    auto r = Call("POST", Session("/url"), {{"url", url}});
    return r.ok() ? Status::Ok() : Status(r.error());
  }

  // Runs `script` (a function body) in the page; its return value.
  Result<Json> Execute(const std::string& script) {
    return Call("POST", Session("/execute/sync"), {{"script", script}, {"args", Json::array()}});
  }

  // The console entries since the last call: {level, message}.
  Result<Json> BrowserLog() { return Call("POST", Session("/se/log"), {{"type", "browser"}}); }

  // A PNG of the viewport, written to `path`.
  Status Screenshot(const std::string& path) {
    auto r = Call("GET", Session("/screenshot"), nullptr);
    if (!r.ok()) return r.error();
    std::string png = Base64Decode(r->get<std::string>());
    std::ofstream out(path, std::ios::binary);
    out.write(png.data(), static_cast<std::streamsize>(png.size()));
    return out ? Status::Ok() : Status(Error{"cannot write " + path});
  }

 private:
  static std::string PathFrom(const char* variable, const char* fallback) {
    const char* v = std::getenv(variable);
    return v && *v ? v : fallback;
  }

  std::string Session(const std::string& rest) const { return "/session/" + session_ + rest; }

  Result<Json> Call(const std::string& method, const std::string& path, const Json& body) {
    httplib::Result r = method == "GET"      ? http_->Get(path.c_str())
                        : method == "DELETE" ? http_->Delete(path.c_str())
                                             : http_->Post(path.c_str(), body.dump(), "application/json");
    if (!r) return Error{method + " " + path + ": " + httplib::to_string(r.error())};
    Json j = Json::parse(r->body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return Error{method + " " + path + ": " + r->body};
    if (r->status != 200)
      return Error{method + " " + path + ": HTTP " + std::to_string(r->status) + ": " + r->body};
    return j.contains("value") ? j["value"] : Json();
  }

  static std::string Base64Decode(const std::string& in) {
    auto value = [](char c) -> int {
      if (c >= 'A' && c <= 'Z') return c - 'A';
      if (c >= 'a' && c <= 'z') return c - 'a' + 26;
      if (c >= '0' && c <= '9') return c - '0' + 52;
      if (c == '+') return 62;
      if (c == '/') return 63;
      return -1;
    };
    std::string out;
    int bits = 0, acc = 0;
    for (char c : in) {
      int v = value(c);
      if (v < 0) continue;
      acc = (acc << 6) | v;
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        out.push_back(static_cast<char>((acc >> bits) & 0xff));
      }
    }
    return out;
  }

  int port_ = 0;
  pid_t pid_ = -1;
  std::unique_ptr<httplib::Client> http_;
  std::string session_;
};

}  // namespace tessera::testing
