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
  for (const auto& [key, entry] : store_) out.push_back(Unpack(entry));
  return out;
}

void Informer::ForEach(const std::function<void(const Json& object)>& visit) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, entry] : store_) visit(Unpack(entry));
}

std::optional<Json> Informer::Get(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = store_.find(key);
  if (it == store_.end()) return std::nullopt;
  return Unpack(it->second);
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
    const auto started = std::chrono::steady_clock::now();
    events_in_watch_ = 0;
    std::optional<ApiStatus> watched;  // how the last watch ended, when one ran
    if (need_list && options_.streaming_list && !streaming_refused_) {
      bool listed = false;
      ApiStatus st = StreamingListAndWatch(&listed);
      if (stop_) break;
      if (listed) {
        need_list = false;
        backoff_ = std::chrono::milliseconds(0);
        watched = std::move(st);
      } else if (!st.ok() && st.error().http_status >= 400 && st.error().http_status < 500 &&
                 !st.error().IsGone() && st.error().http_status != 429) {
        // The server does not offer streaming lists (an older Kubernetes, or
        // the WatchList feature off): paginated lists from now on.
        streaming_refused_ = true;
        log::Info("the API server refuses streaming lists; reading paginated lists instead",
                  {{"resource", Described()}, {"error", st.error().message}});
      } else if (!st.ok()) {
        RecordFailure("streaming list", st.error());
      } else {
        streaming_refused_ = true;
        log::Info(
            "the API server ended a streaming list without its initial-events-end bookmark; reading "
            "paginated lists instead",
            {{"resource", Described()}});
      }
    }
    if (need_list) {
      if (!ListAndReplace()) {
        SleepBackoff();
        continue;
      }
      need_list = false;
      backoff_ = std::chrono::milliseconds(0);
    }
    if (!watched) {
      events_in_watch_ = 0;
      watched = WatchOnce();
    }
    if (stop_) break;
    const ApiStatus& st = *watched;
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
    // A stream that sent something unreadable (garbage, a line too long to
    // be an object) would send it again from the same version: read the
    // state anew instead, after the backoff.
    if (st.error().reason == "InvalidResponse") need_list = true;
    SleepBackoff();
  }
}

bool Informer::ListAndReplace() {
  ListOptions lo;
  lo.label_selector = options_.label_selector;
  lo.field_selector = options_.field_selector;
  lo.limit = options_.page_size;
  lo.item_fields = options_.fields;
  std::map<std::string, Entry> fresh;
  std::string resource_version;
  bool restarted = false;
  for (;;) {
    auto page = client_->List(options_.type, options_.ns, lo, &stop_);
    if (!page.ok()) {
      if (page.error().IsGone() && !lo.continue_token.empty() && !restarted) {
        // The continue token expired between pages: the list starts over.
        log::Debug("list: continue token expired; listing again from the start",
                   {{"resource", Described()}, {"objects_so_far", fresh.size()}});
        restarted = true;
        KeepTold(fresh);
        fresh.clear();
        resource_version.clear();
        lo.continue_token.clear();
        continue;
      }
      RecordFailure("list", page.error());
      KeepTold(fresh);
      return false;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.pages;
    }
    // The list is at the first page's version: later pages continue it.
    if (resource_version.empty()) resource_version = page->resource_version;
    for (Json& item : page->items) {
      if (NameOf(item).empty()) {
        RecordFailure("list", ApiError{200, "InvalidResponse",
                                       "list " + options_.type.plural + ": an item has no name"});
        KeepTold(fresh);
        return false;
      }
      Collect(std::move(item), fresh);
    }
    if (page->continue_token.empty()) break;
    lo.continue_token = std::move(page->continue_token);
  }
  Replace(std::move(fresh), resource_version);
  RecordSuccess();
  return true;
}

Informer::Entry Informer::Pack(const Json& object) {
  Entry e;
  e.resource_version = ResourceVersionOf(object);
  e.packed = Json::to_msgpack(object);
  e.packed.shrink_to_fit();
  return e;
}

Json Informer::Unpack(const Entry& entry) {
  return Json::from_msgpack(entry.packed, /*strict=*/true, /*allow_exceptions=*/false);
}

void Informer::Collect(Json&& object, std::map<std::string, Entry>& fresh) {
  if (options_.transform) options_.transform(object);
  std::string key = KeyOf(object);
  Entry entry = Pack(object);
  // The first list: nothing to diff against, so each object is told as it
  // arrives and its tree freed. (store_ is only written by this thread.)
  if (!synced_.load() && store_.empty()) {
    auto it = fresh.find(key);
    if (it == fresh.end()) {
      for (const auto& h : handlers_) {
        if (h.on_add) h.on_add(object);
      }
    } else {
      const Json old = Unpack(it->second);
      for (const auto& h : handlers_) {
        if (h.on_update) h.on_update(old, object);
      }
    }
  }
  fresh.insert_or_assign(std::move(key), std::move(entry));
}

void Informer::KeepTold(std::map<std::string, Entry>& fresh) {
  if (synced_.load() || !store_.empty() || fresh.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  store_ = std::move(fresh);
  fresh.clear();
}

void Informer::Replace(std::map<std::string, Entry>&& fresh, const std::string& resource_version) {
  const bool told = !synced_.load() && store_.empty();  // Collect told the handlers already
  std::map<std::string, Entry> previous;
  {
    std::lock_guard<std::mutex> lock(mu_);
    previous.swap(store_);
    store_ = std::move(fresh);
    resource_version_ = resource_version;
    if (stats_.lists > 0) ++stats_.relists;
    ++stats_.lists;
  }
  if (!told) {
    // A relist: the difference, one object unpacked at a time.
    for (const auto& [key, entry] : previous) {
      if (store_.count(key)) continue;
      const Json gone = Unpack(entry);
      for (const auto& h : handlers_) {
        if (h.on_delete) h.on_delete(gone);
      }
    }
    for (const auto& [key, entry] : store_) {
      auto it = previous.find(key);
      if (it != previous.end() && it->second.resource_version == entry.resource_version) continue;
      const Json now = Unpack(entry);
      if (it == previous.end()) {
        for (const auto& h : handlers_) {
          if (h.on_add) h.on_add(now);
        }
      } else {
        const Json old = Unpack(it->second);
        for (const auto& h : handlers_) {
          if (h.on_update) h.on_update(old, now);
        }
      }
    }
  }
  if (!synced_.exchange(true)) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
}

ApiStatus Informer::StreamingListAndWatch(bool* listed) {
  WatchOptions wo;
  wo.label_selector = options_.label_selector;
  wo.field_selector = options_.field_selector;
  wo.allow_bookmarks = true;
  wo.send_initial_events = true;
  wo.object_fields = options_.fields;
  wo.timeout_seconds = options_.watch_timeout_seconds;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.watches;
  }
  std::map<std::string, Entry> fresh;  // the initial events so far
  ApiStatus st = client_->Watch(
      options_.type, options_.ns, wo,
      [this, listed, &fresh](WatchEvent&& ev) {
        if (*listed) {
          Apply(std::move(ev));
          ++events_in_watch_;
          backoff_ = std::chrono::milliseconds(0);
          RecordSuccess();
          return !stop_.load();
        }
        if (ev.type == WatchEvent::Type::kBookmark) {
          if (AnnotationOf(ev.object, kInitialEventsEndAnnotation) == "true") {
            {
              std::lock_guard<std::mutex> lock(mu_);
              ++stats_.streaming_lists;
            }
            Replace(std::move(fresh), ResourceVersionOf(ev.object));
            fresh.clear();
            *listed = true;
            RecordSuccess();
          }
          return !stop_.load();
        }
        if (ev.type == WatchEvent::Type::kDeleted) {
          // Not sent before the bookmark by a real server; taken as a correction.
          if (options_.transform) options_.transform(ev.object);
          if (fresh.erase(KeyOf(ev.object)) > 0 && !synced_.load() && store_.empty()) {
            for (const auto& h : handlers_) {
              if (h.on_delete) h.on_delete(ev.object);
            }
          }
        } else {
          Collect(std::move(ev.object), fresh);
        }
        return !stop_.load();
      },
      &stop_);
  if (!*listed) KeepTold(fresh);
  return st;
}

ApiStatus Informer::WatchOnce() {
  WatchOptions wo;
  wo.label_selector = options_.label_selector;
  wo.field_selector = options_.field_selector;
  wo.allow_bookmarks = true;
  wo.timeout_seconds = options_.watch_timeout_seconds;
  wo.resource_version = LastResourceVersion();
  wo.object_fields = options_.fields;
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
  if (options_.transform) options_.transform(event.object);
  const std::string key = KeyOf(event.object);
  std::optional<Json> old;
  {
    // store_ is written by this thread only: read without the lock.
    auto it = store_.find(key);
    if (it != store_.end() && event.type != WatchEvent::Type::kDeleted) old = Unpack(it->second);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (event.type == WatchEvent::Type::kDeleted) {
      store_.erase(key);
    } else {
      store_.insert_or_assign(key, Pack(event.object));
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
