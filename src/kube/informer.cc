#include "kube/informer.h"

#include "base/log.h"

#include <algorithm>

namespace tessera::kube {

Informer::Informer(Client* client, InformerOptions options) : client_(client), options_(std::move(options)) {}

Informer::~Informer() {
  Stop();
}

void Informer::AddHandler(ResourceEventHandler handler) {
  handlers_.push_back(std::move(handler));
}

void Informer::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Informer::WaitForSync(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return synced_.load() || stop_.load(); }) && synced_.load();
}

std::vector<Json> Informer::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Json> out;
  out.reserve(store_.size());
  for (const auto& [key, obj] : store_) out.push_back(obj);
  return out;
}

std::optional<Json> Informer::Get(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = store_.find(key);
  if (it == store_.end()) return std::nullopt;
  return it->second;
}

size_t Informer::Size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return store_.size();
}

std::string Informer::LastResourceVersion() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resource_version_;
}

InformerStats Informer::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string Informer::Described() const {
  std::string out = options_.type.plural;
  for (const std::string* selector : {&options_.label_selector, &options_.field_selector}) {
    if (!selector->empty()) out += (out.size() == options_.type.plural.size() ? " (" : ", ") + *selector;
  }
  return out.size() == options_.type.plural.size() ? out : out + ")";
}

void Informer::RecordFailure(const char* what, const ApiError& e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.failures;
    stats_.last_error = e.message;
  }
  const log::Fields fields = {
      {"resource", Described()}, {"error", e.message}, {"http_status", e.http_status}};
  if (e.IsGone()) {
    log::Debug(std::string(what) + ": resource version gone; relisting", fields);
    return;
  }
  if (outage_failures_++ == 0) {
    log::Warn(std::string(what) + " failed; retrying with backoff", fields);
  } else {
    log::Debug(std::string(what) + " failed again", fields);
  }
}

void Informer::RecordSuccess() {
  if (outage_failures_ == 0) return;
  log::Info("list and watch work again", {{"resource", Described()}, {"failures", outage_failures_}});
  outage_failures_ = 0;
}

void Informer::SleepBackoff() {
  backoff_ = backoff_.count() == 0 ? options_.initial_backoff : std::min(backoff_ * 2, options_.max_backoff);
  std::uniform_real_distribution<double> factor(1.0, 1.0 + std::max(0.0, options_.jitter));
  const auto wait = std::chrono::milliseconds(static_cast<int64_t>(backoff_.count() * factor(rng_)));
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, wait, [&] { return stop_.load(); });
}

void Informer::Run() {
  bool need_list = true;
  while (!stop_) {
    if (need_list) {
      if (!ListAndReplace()) {
        SleepBackoff();
        continue;
      }
      need_list = false;
      backoff_ = std::chrono::milliseconds(0);
    }
    const auto started = std::chrono::steady_clock::now();
    events_in_watch_ = 0;
    ApiStatus st = WatchOnce();
    if (stop_) break;
    if (st.ok()) {
      consecutive_gone_ = 0;
      // The server ended the watch (timeoutSeconds): resume from the last
      // version. A stream that closes at once with nothing in it is treated
      // like a failure so a misbehaving server is not hammered.
      if (events_in_watch_ == 0 && std::chrono::steady_clock::now() - started < std::chrono::seconds(1)) {
        SleepBackoff();
      } else {
        RecordSuccess();
        backoff_ = std::chrono::milliseconds(0);
      }
      continue;
    }
    RecordFailure("watch", st.error());
    if (st.error().IsGone()) {
      // Our version is compacted away: relist now. Only a server that keeps
      // answering 410 to a fresh list's version gets backed off.
      need_list = true;
      consecutive_gone_ = events_in_watch_ == 0 ? consecutive_gone_ + 1 : 1;
      if (consecutive_gone_ > 1) SleepBackoff();
      continue;
    }
    consecutive_gone_ = 0;
    SleepBackoff();
  }
}

bool Informer::ListAndReplace() {
  ListOptions lo;
  lo.label_selector = options_.label_selector;
  lo.field_selector = options_.field_selector;
  auto list = client_->List(options_.type, options_.ns, lo, &stop_);
  if (!list.ok()) {
    RecordFailure("list", list.error());
    return false;
  }
  std::map<std::string, Json> fresh;
  for (Json& item : list->items) {
    std::string key = KeyOf(item);
    if (NameOf(item).empty()) {
      RecordFailure(
          "list", ApiError{200, "InvalidResponse", "list " + options_.type.plural + ": an item has no name"});
      return false;
    }
    fresh.emplace(std::move(key), std::move(item));
  }
  std::vector<Json> added;
  std::vector<std::pair<Json, Json>> updated;
  std::vector<Json> deleted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, obj] : fresh) {
      auto it = store_.find(key);
      if (it == store_.end()) {
        added.push_back(obj);
      } else if (ResourceVersionOf(it->second) != ResourceVersionOf(obj)) {
        updated.emplace_back(it->second, obj);
      }
    }
    for (const auto& [key, obj] : store_) {
      if (!fresh.count(key)) deleted.push_back(obj);
    }
    store_ = std::move(fresh);
    resource_version_ = list->resource_version;
    if (stats_.lists > 0) ++stats_.relists;
    ++stats_.lists;
  }
  RecordSuccess();
  for (const auto& h : handlers_) {
    if (h.on_delete) {
      for (const Json& o : deleted) h.on_delete(o);
    }
    if (h.on_add) {
      for (const Json& o : added) h.on_add(o);
    }
    if (h.on_update) {
      for (const auto& [o, n] : updated) h.on_update(o, n);
    }
  }
  if (!synced_.exchange(true)) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  return true;
}

ApiStatus Informer::WatchOnce() {
  WatchOptions wo;
  wo.label_selector = options_.label_selector;
  wo.field_selector = options_.field_selector;
  wo.allow_bookmarks = true;
  wo.timeout_seconds = options_.watch_timeout_seconds;
  wo.resource_version = LastResourceVersion();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.watches;
  }
  return client_->Watch(
      options_.type, options_.ns, wo,
      [this](WatchEvent&& ev) {
        Apply(std::move(ev));
        ++events_in_watch_;
        backoff_ = std::chrono::milliseconds(0);  // the stream works
        RecordSuccess();
        return !stop_.load();
      },
      &stop_);
}

void Informer::Apply(WatchEvent&& event) {
  const std::string rv = ResourceVersionOf(event.object);
  if (event.type == WatchEvent::Type::kBookmark) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!rv.empty()) resource_version_ = rv;
    return;
  }
  const std::string key = KeyOf(event.object);
  std::optional<Json> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = store_.find(key);
    if (it != store_.end()) old = it->second;
    if (event.type == WatchEvent::Type::kDeleted) {
      if (it != store_.end()) store_.erase(it);
    } else {
      store_[key] = event.object;
    }
    if (!rv.empty()) resource_version_ = rv;
  }
  for (const auto& h : handlers_) {
    if (event.type == WatchEvent::Type::kDeleted) {
      if (h.on_delete) h.on_delete(event.object);
    } else if (old) {
      if (h.on_update) h.on_update(*old, event.object);
    } else if (h.on_add) {
      h.on_add(event.object);
    }
  }
}

}  // namespace tessera::kube
