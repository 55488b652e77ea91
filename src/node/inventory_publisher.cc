#include "node/inventory_publisher.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "base/log.h"
#include "kube/typed_api.h"

namespace tessera::node {
namespace {

constexpr auto kMaxBackoff = std::chrono::seconds(30);

}  // namespace

std::string LabelValue(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    out += ok ? c : '-';
  }
  if (out.size() > 63) out.resize(63);
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  while (!out.empty() && !alnum(out.front())) out.erase(out.begin());
  while (!out.empty() && !alnum(out.back())) out.pop_back();
  return out;
}

core::NodeInventory BuildInventory(const std::string& node, const std::vector<core::Gpu>& gpus,
                                   Clock::Wall now) {
  core::NodeInventory inventory;
  inventory.node = node;
  inventory.heartbeat = kube::FormatMicroTime(now).substr(0, 19) + "Z";
  inventory.gpus = gpus;
  return inventory;
}

std::map<std::string, std::optional<std::string>> NodeLabels(const std::vector<core::Gpu>& gpus) {
  std::map<std::string, std::optional<std::string>> labels;
  std::set<std::string> models;
  for (const auto& gpu : gpus) models.insert(gpu.model);
  if (models.empty()) {
    labels[kGpuProductLabel] = std::nullopt;
  } else {
    labels[kGpuProductLabel] = models.size() == 1 ? LabelValue(*models.begin()) : "mixed";
  }
  labels[kGpuCountLabel] = std::to_string(gpus.size());
  return labels;
}

InventoryPublisher::InventoryPublisher(kube::Client* client, const DeviceState& devices,
                                       std::string node_name, std::chrono::seconds heartbeat, Clock* clock)
    : client_(client),
      devices_(devices),
      node_name_(std::move(node_name)),
      heartbeat_(heartbeat),
      clock_(OrRealClock(clock)),
      thread_([this] { return Step(); }) {}

InventoryPublisher::~InventoryPublisher() {
  Stop();
}

void InventoryPublisher::Start() {
  if (thread_.running()) return;
  published_version_ = 0;
  published_extra_.clear();
  ever_published_ = false;
  failing_ = false;
  next_heartbeat_ = next_attempt_ = std::chrono::steady_clock::now();
  backoff_ = std::chrono::milliseconds(0);
  thread_.Start();
}

void InventoryPublisher::Stop() {
  thread_.Stop();
}

PublisherStats InventoryPublisher::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

Status InventoryPublisher::PublishOnce() {
  auto snapshot = devices_.Get();
  if (extra_gpus_) {
    for (core::Gpu& gpu : extra_gpus_()) snapshot.gpus.push_back(std::move(gpu));
    std::stable_sort(snapshot.gpus.begin(), snapshot.gpus.end(),
                     [](const core::Gpu& a, const core::Gpu& b) { return a.index < b.index; });
  }
  auto text = core::EncodeInventory(BuildInventory(node_name_, snapshot.gpus, clock_->WallNow()));
  Status result = Status::Ok();
  if (!text.ok()) {
    result = text.error().Wrap("inventory of node " + node_name_ + " is invalid");
  } else {
    kube::NodesApi nodes(client_);
    auto patched = nodes.PatchAnnotations(node_name_, {{std::string(core::kInventoryAnnotation), *text}});
    if (!patched.ok()) {
      std::string message =
          "cannot publish the GPU inventory on node " + node_name_ + ": " + patched.error().message;
      if (patched.error().IsNotFound()) {
        message += " (no such node: set NODE_NAME to the node's name, e.g. from spec.nodeName)";
      }
      result = Error{message};
    } else {
      auto labels = NodeLabels(snapshot.gpus);
      if (extra_labels_) labels.merge(extra_labels_());
      bool labels_current;
      {
        std::lock_guard lock(mu_);
        labels_current = labels == labels_set_;
      }
      if (!labels_current) {
        if (auto l = nodes.PatchLabels(node_name_, labels); l.ok()) {
          std::lock_guard lock(mu_);
          labels_set_ = labels;
        } else {
          result = Error{"published the GPU inventory but cannot label node " + node_name_ + ": " +
                         l.error().message};
        }
      }
    }
  }
  std::lock_guard lock(mu_);
  if (result.ok()) {
    ++stats_.publishes;
    stats_.last_error.clear();
    stats_.last_success_unix =
        std::chrono::duration_cast<std::chrono::seconds>(clock_->WallNow().time_since_epoch()).count();
  } else {
    ++stats_.failures;
    stats_.last_error = result.error().message;
  }
  return result;
}

std::chrono::milliseconds InventoryPublisher::Step() {
  using SteadyClock = std::chrono::steady_clock;
  const uint64_t version = devices_.Get().version;
  std::vector<core::Gpu> extra;
  if (extra_gpus_) extra = extra_gpus_();
  const auto now = SteadyClock::now();
  const bool due = !ever_published_ || version != published_version_ || extra != published_extra_ ||
                   now >= next_heartbeat_;
  if (due && now >= next_attempt_) {
    auto status = PublishOnce();
    if (status.ok()) {
      if (failing_) log::Info("GPU inventory published again", {{"node", node_name_}});
      failing_ = false;
      ever_published_ = true;
      published_version_ = version;
      published_extra_ = std::move(extra);
      backoff_ = std::chrono::milliseconds(0);
      next_heartbeat_ = SteadyClock::now() + heartbeat_;
    } else {
      // One line per outage at warning level; the retries at debug level.
      if (!failing_) {
        log::Warn("GPU inventory not published; retrying with backoff", {{"error", status.error().message}});
      }
      log::Debug("GPU inventory not published", {{"error", status.error().message}});
      failing_ = true;
      backoff_ = std::min<std::chrono::milliseconds>(
          kMaxBackoff, backoff_.count() == 0 ? std::chrono::milliseconds(500) : backoff_ * 2);
      next_attempt_ = SteadyClock::now() + backoff_;
    }
    return std::chrono::milliseconds(0);
  }
  // Sleep until something changes, the next write is due, or a stop (checked
  // at least every 200 ms).
  auto wake =
      std::min(due ? next_attempt_ : next_heartbeat_, SteadyClock::now() + std::chrono::milliseconds(200));
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(wake - SteadyClock::now());
  if (wait.count() > 0) devices_.WaitForChange(version, wait);
  return std::chrono::milliseconds(0);
}

}  // namespace tessera::node
